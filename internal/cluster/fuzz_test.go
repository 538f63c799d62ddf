package cluster

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/stream"
)

// The decoders read what other nodes wrote into Redis. The fuzz targets check that none panics
// on any input, and that what one accepts encodes again to a payload that decodes to the same
// value and encodes to the same bytes: a node hands on exactly what it was sent.

// rawJSON compares raw JSON values by their encoded form (compact; nil is null).
var rawJSON = cmp.Transformer("json", normJSON)

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range []*stream.Message{
		message("chat/room1", 42, `{"text":"hi"}`),
		{Pos: stream.ChannelPosition("e", 1), Channel: "a"},
	} {
		b, err := encodeMessage(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[1:])
	}
	for _, s := range []string{
		`{"pos":"e:1","ch":"a","d":{ "a" : [1, 2] }}`,
		`{"pos":"16/B374D848","ch":"a","d":1}`,
		`{"pos":{"epoch":"e","offset":1},"ch":"a","ev":"x","d":"\u003c"}`,
		`{"pos":null,"ch":"a"}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			if m != nil {
				t.Fatalf("decodeMessage(%q) = %+v with error %v", b, m, err)
			}
			return
		}
		if !m.Pos.IsChannel() || m.Channel == "" {
			t.Fatalf("decodeMessage(%q) accepted %+v: no channel position or no channel", b, m)
		}
		enc, err := encodeMessage(m)
		if err != nil {
			t.Fatalf("decodeMessage(%q) accepted %+v, which does not encode: %v", b, m, err)
		}
		m2, err := decodeMessage(enc[1:])
		if err != nil {
			t.Fatalf("the encoding %q of %+v does not decode: %v", enc, m, err)
		}
		if diff := cmp.Diff(m, m2, rawJSON); diff != "" {
			t.Fatalf("%q decodes to %+v, which encodes to %q, which decodes to another (-first +second):\n%s", b, m, enc, diff)
		}
		if enc2, err := encodeMessage(m2); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding again gives %q, %v; want %q", enc2, err, enc)
		}
	})
}

func FuzzDecodePresence(f *testing.F) {
	for _, tc := range []struct {
		kind stream.PresenceKind
		m    stream.Member
	}{
		{stream.PresenceJoin, stream.Member{ID: "alice.c1", Subject: "alice", Meta: json.RawMessage(`{"s":"away"}`)}},
		{stream.PresenceJoin, stream.Member{ID: "c2"}},
		{stream.PresenceLeave, stream.Member{ID: "c3", Subject: "bob"}},
	} {
		b, err := encodePresence("docs/x", tc.kind, tc.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[1:])
	}
	for _, s := range []string{
		`{"ch":"a","k":"join","m":{"id":"x","meta":[ 1 ]}}`,
		`{"ch":"a","k":"roster","m":{"ID":"x"}}`,
		`{"ch":"a","k":"leave","m":{"ID":"x","Meta":null}}`,
		`{"ch":"","k":"join"}`, `7`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePresence(b)
		if err != nil {
			if p != nil {
				t.Fatalf("decodePresence(%q) = %+v with error %v", b, p, err)
			}
			return
		}
		if p.Channel == "" || p.Member.ID == "" || (p.Kind != stream.PresenceJoin && p.Kind != stream.PresenceLeave) {
			t.Fatalf("decodePresence(%q) accepted %+v", b, p)
		}
		if string(p.Member.Meta) == "null" {
			t.Fatalf("decodePresence(%q) kept a null meta; a member without meta has none", b)
		}
		enc, err := encodePresence(p.Channel, p.Kind, p.Member)
		if err != nil {
			t.Fatalf("decodePresence(%q) accepted %+v, which does not encode: %v", b, p, err)
		}
		p2, err := decodePresence(enc[1:])
		if err != nil {
			t.Fatalf("the encoding %q of %+v does not decode: %v", enc, p, err)
		}
		if diff := cmp.Diff(p, p2, rawJSON); diff != "" {
			t.Fatalf("%q decodes to %+v, which encodes to %q, which decodes to another (-first +second):\n%s", b, p, enc, diff)
		}
		if enc2, err := encodePresence(p2.Channel, p2.Kind, p2.Member); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding again gives %q, %v; want %q", enc2, err, enc)
		}
	})
}

// fuzzMaxEvents is the bound FuzzDecodeTxn decodes under: maxTxnEvents events of a few hundred
// bytes each would make one input cost gigabytes.
const fuzzMaxEvents = 1 << 12

func FuzzDecodeTxn(f *testing.F) {
	for _, idx := range [][]int{{0, 1, 2, 3}, {3}, {1, 3}} {
		b, err := encodeTxn(testTxn(), idx)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[1:])
	}
	b, err := encodeTxn(&change.Txn{CommitLSN: 9, Overflow: &change.Overflow{Tables: map[string]int{"public.a": 2}, Changes: 2}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b[1:])
	for _, s := range []string{
		`{"lsn":"0/1","n":3,"ev":[{"i":2,"op":"update","table":"t","before":{"id":1},"after":{ "id" : 2 },"k":["id"]}]}`,
		`{"lsn":"0/1","n":2,"ev":[{"i":1,"op":"insert"},{"i":1,"op":"delete"}]}`,
		`{"lsn":"0/1","n":4097,"ev":[]}`,
		`{"lsn":"0/1","n":16777217,"ev":[]}`,
		`{"lsn":"0/1","time":"2024-01-02T03:04:05.100+02:00","n":1,"ev":[{"i":1,"op":"insert","commit_time":"0001-01-01T00:00:00Z"}]}`,
		`{"n":-1}`, `{"ev":[{"i":0}]}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		txn, err := decodeTxnAtMost(b, fuzzMaxEvents)
		if err != nil {
			if txn != nil {
				t.Fatalf("decodeTxn(%q) = %+v with error %v", b, txn, err)
			}
			return
		}
		if len(txn.Events) > fuzzMaxEvents {
			t.Fatalf("decodeTxn(%q) made %d events, past the bound of %d", b, len(txn.Events), fuzzMaxEvents)
		}
		// What the sender sent: every event that is not a bare placeholder.
		var idx []int
		for i := range txn.Events {
			if !reflect.DeepEqual(txn.Events[i], change.Event{Op: change.Message}) {
				idx = append(idx, i)
			}
		}
		enc, err := encodeTxn(txn, idx)
		if err != nil {
			t.Fatalf("decodeTxn(%q) accepted a transaction that does not encode: %v", b, err)
		}
		txn2, err := decodeTxnAtMost(enc[1:], fuzzMaxEvents)
		if err != nil {
			t.Fatalf("the encoding %q does not decode: %v", enc, err)
		}
		if diff := cmp.Diff(txn, txn2, rawJSON, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%q decodes to a transaction that encodes to %q, which decodes to another (-first +second):\n%s", b, enc, diff)
		}
		if enc2, err := encodeTxn(txn2, idx); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding again gives %q, %v; want %q", enc2, err, enc)
		}
	})
}

func FuzzDecodeDurable(f *testing.F) {
	ents := []durable.Entry{
		{Msg: message("jobs/eu", 7, `{"job":1}`), Attempt: 2},
		{Gap: &stream.Gap{First: stream.ChannelPosition("e", 3), Last: stream.ChannelPosition("e", 5), Lost: 3, Reason: stream.ReasonQueueFull}},
		{Gap: &stream.Gap{Last: stream.ChannelPosition("e", 9), Reason: stream.ReasonUpstreamGap}},
	}
	b, err := encodeDurable(durable.Key{Subject: "alice", App: "web", Name: "jobs"}, "n1.c1", ents)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b[1:])
	for _, s := range []string{
		`{"s":"a","n":"j","c":"c","e":[]}`,
		`{"s":"a","n":"j","c":"c","e":[{"m":{"pos":"e:1","ch":"x","d":1},"t":1},{"g":{"f":null,"l":"e:2","r":"parked"}}]}`,
		`{"s":"","n":"j","c":"c"}`,
		`{"s":"a","n":"j","c":"c","e":[{"g":{"l":null,"r":"x"}}]}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		key, conn, ents, err := decodeDurable(b)
		if err != nil {
			return
		}
		if key.Subject == "" || key.Name == "" || conn == "" {
			t.Fatalf("decodeDurable(%q) accepted %+v %q with no subject, name or connection", b, key, conn)
		}
		enc, err := encodeDurable(key, conn, ents)
		if err != nil {
			t.Fatalf("decodeDurable(%q) accepted what does not encode: %v", b, err)
		}
		key2, conn2, ents2, err := decodeDurable(enc[1:])
		if err != nil {
			t.Fatalf("the encoding %q does not decode: %v", enc, err)
		}
		if diff := cmp.Diff([]any{key, conn, ents}, []any{key2, conn2, ents2}, rawJSON, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%q decodes to one value, its encoding %q to another (-first +second):\n%s", b, enc, diff)
		}
		if enc2, err := encodeDurable(key2, conn2, ents2); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding again gives %q, %v; want %q", enc2, err, enc)
		}
	})
}
