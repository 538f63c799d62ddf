package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/stream"
)

// decodeCodes are the codes a decoder may answer with.
var decodeCodes = map[Code]bool{CodeBadFrame: true, CodeUnknownType: true, CodeFrameTooLarge: true, CodeBadPosition: true}

const fuzzLimit = 4 << 10

func addSeeds(f *testing.F, client bool) {
	for _, g := range goldenFrames {
		if g.f.Type().FromClient() == client {
			f.Add([]byte(g.want))
		}
	}
	for _, s := range []string{
		`{"type":"subscribe","id":"1","sub":"s","channel":"c","from":{"epoch":"e","offset":1}}`,
		`{"type":"publish","id":"x","channel":"a","data":{ "a" : [1, 2e5, -0.5, true, null, "\ud83d\ude00"] }}`,
		`{"type":"ping","id":"1","id":"2"}`, `{"\u0074ype":"ping","id":"1"}`, `[]`, `{`, `{"type":"track","id":"1"}`,
		"{\"type\":\"ping\",\"id\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
}

// checkDecoded holds what every decoder result must satisfy: a frame or a typed error with a
// known code; accepted input is valid JSON; refused invalid JSON is a bad_frame; and a
// decoded frame re-encodes to valid one-line JSON that decodes to the same frame.
func checkDecoded(t *testing.T, in []byte, fr Frame, err error, decode func([]byte, int) (Frame, error)) {
	t.Helper()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %T %v is not an *Error", err, err)
		}
		if fr != nil {
			t.Fatalf("both a frame and an error")
		}
		if !decodeCodes[e.Code] || e.Message == "" || len(e.Message) > 512 || !utf8.ValidString(e.Message) {
			t.Fatalf("error %v: code %q not a decoder code, or the message is empty, long or not UTF-8", e, e.Code)
		}
		if len(in) <= fuzzLimit && (!json.Valid(in) || !utf8.Valid(in)) && e.Code != CodeBadFrame {
			t.Fatalf("invalid JSON refused with %s, want bad_frame", e.Code)
		}
		out, aerr := AppendFrame(nil, e)
		if aerr != nil || !json.Valid(out) {
			t.Fatalf("error frame %s is not valid JSON: %v", out, aerr)
		}
		return
	}
	if !json.Valid(in) || !utf8.Valid(in) {
		t.Fatalf("accepted input that is not valid JSON in UTF-8: %q", in)
	}
	enc, err := AppendFrame(nil, fr)
	if err != nil {
		t.Fatalf("re-encoding %#v: %v", fr, err)
	}
	if !json.Valid(enc) || bytes.ContainsAny(enc, "\r\n") {
		t.Fatalf("re-encoded frame is not one line of valid JSON: %q", enc)
	}
	back, err := decode(enc, 0)
	if err != nil {
		t.Fatalf("decoding re-encoded %s: %v", enc, err)
	}
	if diff := cmp.Diff(fr, back); diff != "" {
		t.Fatalf("decode(encode(f)) != f for %s (-first +second):\n%s", enc, diff)
	}
	again, _ := AppendFrame(nil, back)
	if !bytes.Equal(enc, again) {
		t.Fatalf("encoding not stable:\n%s\n%s", enc, again)
	}
}

func FuzzDecode(f *testing.F) {
	addSeeds(f, true)
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, err := Decode(in, fuzzLimit)
		checkDecoded(t, in, fr, err, Decode)
		var e *Error
		if errors.As(err, &e) && e.ID != "" && !validToken(e.ID) {
			t.Fatalf("error echoes an id outside the grammar: %q", e.ID)
		}
		if err == nil && !fr.Type().FromClient() {
			t.Fatalf("Decode returned a server frame %T", fr)
		}
	})
}

func FuzzDecodeServer(f *testing.F) {
	addSeeds(f, false)
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, err := DecodeServer(in, fuzzLimit)
		checkDecoded(t, in, fr, err, DecodeServer)
		if err == nil && fr.Type().FromClient() {
			t.Fatalf("DecodeServer returned a client frame %T", fr)
		}
	})
}

// jsonText is what a client reads for s after AppendJSONString escaped it.
func jsonText(t *testing.T, s string) string {
	var out string
	if err := json.Unmarshal(change.AppendJSONString(nil, s), &out); err != nil {
		t.Fatalf("AppendJSONString(%q) is not a JSON string: %v", s, err)
	}
	return out
}

func FuzzDataFrame(f *testing.F) {
	f.Add("s1", "public.items", "title", "hello", "tag", "rooms/1", "chat", "k7Hq2x", uint64(0x16B374D848), uint32(1), uint64(42))
	f.Add("", "", "", "", "", "", "", "", uint64(0), uint32(0), uint64(0))
	f.Add("we\"ird\\", "a\x00b", "\xff\xfe", "\u2028\u2029", "é", "\x7f", "\t", "a b", uint64(1), uint32(1<<31), uint64(1<<63))
	f.Fuzz(func(t *testing.T, sub, table, col, val, tag, channel, event, epoch string, lsn uint64, idx uint32, offset uint64) {
		if idx == 0 {
			idx = 1
		}
		c := &Change{
			LSN: change.LSN(lsn | 1), Idx: idx, Op: OpUpdate, Table: "t" + table,
			Row:     change.Row{{Name: col, Value: change.AppendJSONString(nil, val)}, {Name: "n", Value: []byte("1")}},
			Old:     change.Row{{Name: col, Value: nil}},
			Omitted: []string{"o" + val}, CommitTime: commitTime, TxID: lsn, WriteTag: tag,
		}
		if !validEpoch(epoch) {
			epoch = "e"
		}
		m := &Message{Pos: ChannelPosition(epoch, offset), Channel: "c" + channel, Event: event,
			Data: change.AppendJSONString(nil, val)}
		frames := map[FrameType][]byte{
			FrameChange:  AppendChangeBody(AppendDataHead(nil, FrameChange, sub), c),
			FrameMessage: AppendMessageBody(AppendDataHead(nil, FrameMessage, sub), m),
			FrameResync: AppendGap(nil, sub, &stream.Gap{Reason: stream.Reason(tag),
				First: TablePosition(change.LSN(lsn), uint32(offset)), Last: ChannelPosition(epoch, offset), Lost: offset}),
		}
		for typ, b := range frames {
			if !json.Valid(b) || !utf8.Valid(b) || bytes.ContainsAny(b, "\r\n") {
				t.Fatalf("%s frame is not one line of valid JSON: %q", typ, b)
			}
			var fields map[string]any
			if err := json.Unmarshal(b, &fields); err != nil {
				t.Fatal(err)
			}
			if fields["type"] != string(typ) || fields["sub"] != jsonText(t, sub) {
				t.Fatalf("%s frame reads type %v sub %v", typ, fields["type"], fields["sub"])
			}
		}
		if jsonText(t, sub) == "" {
			return // DecodeServer needs a sub; the JSON checks above are what matters for it
		}
		got, err := DecodeServer(frames[FrameChange], 0)
		if err != nil {
			t.Fatalf("DecodeServer(%s): %v", frames[FrameChange], err)
		}
		gc := got.(*Change)
		if gc.Sub != jsonText(t, sub) || gc.Table != jsonText(t, "t"+table) || gc.WriteTag != jsonText(t, tag) ||
			gc.LSN != c.LSN || gc.Idx != idx || gc.TxID != lsn || len(gc.Row) != 2 ||
			gc.Row[0].Name != jsonText(t, col) || string(gc.Row[0].Value) != string(c.Row[0].Value) ||
			gc.Omitted[0] != jsonText(t, "o"+val) || !gc.CommitTime.Equal(commitTime.Truncate(1e6)) {
			t.Fatalf("change round trip: got %+v from %s", gc, frames[FrameChange])
		}
		got, err = DecodeServer(frames[FrameMessage], 0)
		if err != nil {
			t.Fatalf("DecodeServer(%s): %v", frames[FrameMessage], err)
		}
		gm := got.(*Message)
		if gm.Sub != jsonText(t, sub) || gm.Pos != m.Pos || gm.Channel != jsonText(t, "c"+channel) ||
			gm.Event != jsonText(t, event) || string(gm.Data) != string(m.Data) {
			t.Fatalf("message round trip: got %+v from %s", gm, frames[FrameMessage])
		}
	})
}

// FuzzRawValuesStayOneLine: whatever valid JSON a row value or a message's data holds, white
// space and line breaks between its tokens included, the frame that carries it is one line of
// valid JSON that carries the same value.
func FuzzRawValuesStayOneLine(f *testing.F) {
	for _, s := range []string{`1`, "1\r\n", "\"x y\"\n", "\r\n{\"a\":\r\n[1,\t2]}\r\n", "[\"\\n\", \"\u2028\"]", " null "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !utf8.Valid(v) || !json.Valid(v) {
			return // change.Row and Decode promise valid JSON; AppendFrame refuses anything else
		}
		var want bytes.Buffer
		_ = json.Compact(&want, v)
		c := &Change{LSN: 1, Idx: 1, Op: OpInsert, Table: "a.b", Row: change.Row{{Name: "v", Value: v}}}
		m := &Message{Pos: ChannelPosition("e", 1), Channel: "c", Data: v}
		frames := [][]byte{AppendChangeBody(AppendDataHead(nil, FrameChange, "s"), c)}
		if want.String() != "null" { // a message's data is never null
			frames = append(frames, AppendMessageBody(AppendDataHead(nil, FrameMessage, "s"), m))
		}
		for _, b := range frames {
			if !json.Valid(b) || bytes.ContainsAny(b, "\r\n") {
				t.Fatalf("frame is not one line of valid JSON: %q", b)
			}
			fr, err := DecodeServer(b, 0)
			if err != nil {
				t.Fatalf("DecodeServer(%s): %v", b, err)
			}
			var got []byte
			switch fr := fr.(type) {
			case *Change:
				got = fr.Row[0].Value
			case *Message:
				got = fr.Data
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("value %q arrived as %s, want %s", v, got, want.Bytes())
			}
		}
	})
}

func FuzzDecodePublishRequest(f *testing.F) {
	for _, s := range []string{
		`{"channel":"rooms/1","data":{"text":"hi"}}`,
		`{"type":"publish","id":"p1","channel":"c","event":"e","data":[1,` + "\r\n" + `2]}`,
		`{"channel":"a","channel":"b","data":1}`, `{"CHANNEL":"c","Data":1}`, `{"id":"a b","channel":"c","data":1}`,
		"{\"channel\":\"c\",\"data\":\"\xff\"}", `{"channel":"c","data":null}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := DecodePublishRequest(in)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeBadFrame || e.Message == "" || !utf8.ValidString(e.Message) {
				t.Fatalf("error %T %v: want a bad_frame *Error with a message", err, err)
			}
			if e.ID != "" && !validToken(e.ID) {
				t.Fatalf("error echoes an id outside the grammar: %q", e.ID)
			}
			return
		}
		if !json.Valid(in) || !utf8.Valid(in) {
			t.Fatalf("accepted input that is not valid JSON in UTF-8: %q", in)
		}
		if p.Channel == "" || (p.ID != "" && !validToken(p.ID)) || string(p.Data) == "null" || bytes.ContainsAny(p.Data, "\r\n") {
			t.Fatalf("accepted %q as %+v", in, p)
		}
		// The same publication sent as a frame reads the same.
		sent := *p
		if sent.ID == "" {
			sent.ID = "x"
		}
		enc, err := AppendFrame(nil, &sent)
		if err != nil {
			t.Fatalf("encoding %+v: %v", sent, err)
		}
		back, err := Decode(enc, 1<<20)
		if err != nil {
			t.Fatalf("decoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(Frame(&sent), back); diff != "" {
			t.Fatalf("%s (-request +frame):\n%s", enc, diff)
		}
	})
}
