package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/stream"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []*stream.Message{
		{Pos: stream.ChannelPosition("k7Hq2x", 42), Channel: "chat/room1", Event: "said", Data: json.RawMessage(`{"text":"hi","n":[1,2.5,null]}`)},
		{Pos: stream.ChannelPosition("e", stream.MaxSafeOffset), Channel: "a", Data: json.RawMessage(`"<&>"`)},
		{Pos: stream.ChannelPosition("e", 1), Channel: "a/b/c", Data: json.RawMessage(`null`)},
	} {
		t.Run(m.Channel, func(t *testing.T) {
			b, err := encodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			if b[0] != kindMessage || kindOf(b) != KindChannel {
				t.Fatalf("payload starts %q (kind %d), want %q", b[0], kindOf(b), kindMessage)
			}
			got, err := decodeMessage(b[1:])
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			if diff := cmp.Diff(m, got, cmp.Transformer("json", normJSON)); diff != "" {
				t.Errorf("round trip (-sent +got):\n%s", diff)
			}
		})
	}
}

func TestPresenceRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind stream.PresenceKind
		m    stream.Member
	}{
		{"join with meta", stream.PresenceJoin, stream.Member{ID: "alice.c1", Subject: "alice", Meta: json.RawMessage(`{"status":"away"}`)}},
		{"join without meta", stream.PresenceJoin, stream.Member{ID: "c2"}},
		{"leave", stream.PresenceLeave, stream.Member{ID: "bob.c3", Subject: "bob"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodePresence("docs/x", tc.kind, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if b[0] != kindPresence || kindOf(b) != KindPresence {
				t.Fatalf("payload starts %q (kind %d), want %q", b[0], kindOf(b), kindPresence)
			}
			got, err := decodePresence(b[1:])
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			// Meta is compared as bytes: a member without meta must arrive without meta (nil),
			// not as the JSON null it travelled as.
			want := &wirePresence{Channel: "docs/x", Kind: tc.kind, Member: tc.m}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip (-sent +got):\n%s", diff)
			}
		})
	}
}

// testTxn is a transaction of four events over two tables and a logical message.
func testTxn() *change.Txn {
	lsn := change.LSN(0x16_B374D848)
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	ev := func(table string, op change.Op, before, after change.Row) change.Event {
		return change.Event{Table: table, Op: op, Before: before, After: after, LSN: lsn, TxID: 900, CommitTime: at, WriteTag: "w1"}
	}
	row := func(id int, name string) change.Row {
		return change.Row{{Name: "id", Value: json.RawMessage(fmt.Sprint(id))}, {Name: "name", Value: json.RawMessage(fmt.Sprintf("%q", name))}}
	}
	key := []string{"id"}
	events := []change.Event{
		ev("public.orders", change.Insert, nil, row(1, "a")),
		ev("public.items", change.Update, row(5, "old"), row(5, "new")),
		{Op: change.Message, LSN: lsn, TxID: 900, CommitTime: at, Prefix: "app", Content: "hello"},
		ev("public.orders", change.Delete, change.Row{{Name: "id", Value: json.RawMessage("2")}}, nil),
	}
	events[0].Key, events[1].Key, events[3].Key = key, key, key
	events[1].Omitted = []string{"blob"}
	events[3].BeforeKeyOnly = true
	events[0].Tenant = "t1"
	return &change.Txn{XID: 900, XID8: change.MakeXID8(2, 900), CommitLSN: lsn, EndLSN: lsn + 0x30, CommitTime: at, WriteTag: "w1", Transactional: true, Events: events}
}

func TestTxnRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		idx  []int // the events sent
	}{
		{"every event", []int{0, 1, 2, 3}},
		{"one table", []int{0, 3}},
		{"out of order", []int{3, 1}},
		{"the last alone", []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			txn := testTxn()
			b, err := encodeTxn(txn, tc.idx)
			if err != nil {
				t.Fatal(err)
			}
			if b[0] != kindTxn || kindOf(b) != KindTable {
				t.Fatalf("payload starts %q (kind %d), want %q", b[0], kindOf(b), kindTxn)
			}
			got, err := decodeTxn(b[1:])
			if err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			// Each event sent is at its index, with its Key; the others are bare messages,
			// which the router skips, so every event keeps its position (index+1).
			want := testTxn()
			for i := range want.Events {
				if !slices.Contains(tc.idx, i) {
					want.Events[i] = change.Event{Op: change.Message}
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTxnOverflowRoundTrip(t *testing.T) {
	txn := &change.Txn{XID: 7, CommitLSN: 0x100, EndLSN: 0x180, CommitTime: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Transactional: true,
		Overflow: &change.Overflow{Tables: map[string]int{"public.orders": 3, "public.items": 9}, Changes: 12}}
	b, err := encodeTxn(txn, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeTxn(b[1:])
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	want := *txn
	want.Events = []change.Event{}
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decode func([]byte) error
		in     string
	}{
		{"message: not JSON", decodeMsgErr, `{"pos":`},
		{"message: not an object", decodeMsgErr, `[1]`},
		{"message: no position", decodeMsgErr, `{"ch":"a","d":1}`},
		{"message: a table position", decodeMsgErr, `{"pos":"16/B374D848","ch":"a","d":1}`},
		{"message: a bad epoch", decodeMsgErr, `{"pos":{"epoch":"a b","offset":1},"ch":"a","d":1}`},
		{"message: no channel", decodeMsgErr, `{"pos":"e:1","d":1}`},
		{"message: an empty channel", decodeMsgErr, `{"pos":"e:1","ch":"","d":1}`},
		{"message: a channel of the wrong type", decodeMsgErr, `{"pos":"e:1","ch":5,"d":1}`},

		{"presence: not JSON", decodePresErr, `{`},
		{"presence: no channel", decodePresErr, `{"k":"join","m":{"ID":"a"}}`},
		{"presence: no member", decodePresErr, `{"ch":"a","k":"join"}`},
		{"presence: a member without id", decodePresErr, `{"ch":"a","k":"join","m":{"Subject":"s"}}`},
		{"presence: a roster", decodePresErr, `{"ch":"a","k":"roster","m":{"ID":"a"}}`},
		{"presence: no kind", decodePresErr, `{"ch":"a","m":{"ID":"a"}}`},
		{"presence: an unknown kind", decodePresErr, `{"ch":"a","k":"wave","m":{"ID":"a"}}`},
		{"presence: meta not JSON", decodePresErr, `{"ch":"a","k":"join","m":{"ID":"a","Meta":x}}`},

		{"txn: not JSON", decodeTxnErr, `{"n":`},
		{"txn: a negative length", decodeTxnErr, `{"lsn":"0/1","n":-1,"ev":[]}`},
		{"txn: past the bound", decodeTxnErr, fmt.Sprintf(`{"lsn":"0/1","n":%d,"ev":[]}`, maxTxnEvents+1)},
		{"txn: a length past int", decodeTxnErr, `{"lsn":"0/1","n":1e30,"ev":[]}`},
		{"txn: more events than its length", decodeTxnErr, `{"lsn":"0/1","n":1,"ev":[{"i":1,"op":"insert"},{"i":1,"op":"insert"}]}`},
		{"txn: index 0", decodeTxnErr, `{"lsn":"0/1","n":2,"ev":[{"i":0,"op":"insert"}]}`},
		{"txn: an index past its length", decodeTxnErr, `{"lsn":"0/1","n":2,"ev":[{"i":3,"op":"insert"}]}`},
		{"txn: a negative index", decodeTxnErr, `{"lsn":"0/1","n":2,"ev":[{"i":-1,"op":"insert"}]}`},
		{"txn: a bad LSN", decodeTxnErr, `{"lsn":"zz","n":0,"ev":[]}`},
		{"txn: a row that is not an object", decodeTxnErr, `{"lsn":"0/1","n":1,"ev":[{"i":1,"op":"insert","after":[1]}]}`},
		{"txn: a bad commit time", decodeTxnErr, `{"lsn":"0/1","time":"yesterday","n":0,"ev":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.decode([]byte(tc.in)); err == nil {
				t.Fatalf("decoded %s, want an error", tc.in)
			}
		})
	}
}

func decodeMsgErr(b []byte) error  { _, err := decodeMessage(b); return err }
func decodePresErr(b []byte) error { _, err := decodePresence(b); return err }
func decodeTxnErr(b []byte) error  { _, err := decodeTxn(b); return err }

// TestDecodeTxnAtTheBound checks the bound is the largest length taken, with a smaller one, so
// that the test allocates little.
func TestDecodeTxnAtTheBound(t *testing.T) {
	const max = 8
	in := func(n int) []byte {
		return fmt.Appendf(nil, `{"lsn":"0/1","n":%d,"ev":[{"i":%d,"op":"insert","table":"t"}]}`, n, n)
	}
	txn, err := decodeTxnAtMost(in(max), max)
	if err != nil {
		t.Fatalf("a transaction of %d events at a bound of %d: %v", max, max, err)
	}
	if len(txn.Events) != max || txn.Events[max-1].Table != "t" || txn.Events[0].Op != change.Message {
		t.Fatalf("decoded %+v, want %d events, the last of table t", txn.Events, max)
	}
	if _, err := decodeTxnAtMost(in(max+1), max); err == nil {
		t.Fatalf("a transaction of %d events at a bound of %d decoded", max+1, max)
	}
}

func TestKindOf(t *testing.T) {
	for in, want := range map[string]int{"": KindChannel, "m{}": KindChannel, "t{}": KindTable, "p{}": KindPresence, "x{}": KindChannel} {
		if got := kindOf([]byte(in)); got != want {
			t.Errorf("kindOf(%q) = %d, want %d", in, got, want)
		}
	}
}

// normJSON is the form a raw JSON value takes once encoded (compact, HTML characters escaped;
// nil is null), so values can be compared across an encoding.
func normJSON(r json.RawMessage) string {
	b, err := json.Marshal(r)
	if err != nil {
		return "invalid JSON: " + strings.ToValidUTF8(string(r), "?")
	}
	return string(b)
}
