package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/stream"
)

var commitTime = time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))

// goldenFrames holds one frame of every type, each as full as its type allows, with the JSON
// it must encode to. TestProtocolDocFields checks these keys against docs/PROTOCOL.md.
var goldenFrames = []struct {
	name string
	f    Frame
	want string
}{
	{"connect", &Connect{ID: "1", Token: "eyJ.x.y"}, `{"type":"connect","id":"1","token":"eyJ.x.y"}`},
	{"connect without token", &Connect{ID: "1"}, `{"type":"connect","id":"1"}`},
	{"refresh", &Refresh{ID: "r", Token: "t"}, `{"type":"refresh","id":"r","token":"t"}`},
	{"subscribe table",
		&Subscribe{ID: "2", Sub: "s1", Table: "public.items", Filter: raw(`{"eq":["id",1]}`),
			Columns: []string{"id", "title"}, From: TablePosition(0x16B374D848, 3), Mode: ModeBroadcast},
		`{"type":"subscribe","id":"2","sub":"s1","table":"public.items","filter":{"eq":["id",1]},"columns":["id","title"],"from":"16/B374D848.3"}`},
	{"subscribe channel",
		&Subscribe{ID: "2", Sub: "c1", Channel: "docs/*/inbox", Event: "edit", From: ChannelPosition("k7", 4), Mode: ModeBroadcast},
		`{"type":"subscribe","id":"2","sub":"c1","channel":"docs/*/inbox","event":"edit","from":{"epoch":"k7","offset":4}}`},
	{"subscribe single",
		&Subscribe{ID: "2", Sub: "jobs", Channel: "jobs/eu", Mode: ModeSingle, Durable: true},
		`{"type":"subscribe","id":"2","sub":"jobs","channel":"jobs/eu","mode":"single","durable":true}`},
	{"subscribe channel with presence",
		&Subscribe{ID: "2", Sub: "p1", Channel: "rooms/1", Mode: ModeBroadcast, Presence: true},
		`{"type":"subscribe","id":"2","sub":"p1","channel":"rooms/1","presence":true}`},
	{"subscribe table with a snapshot",
		&Subscribe{ID: "2", Sub: "s1", Table: "public.items", Mode: ModeBroadcast, Snapshot: true},
		`{"type":"subscribe","id":"2","sub":"s1","table":"public.items","snapshot":true}`},
	{"unsubscribe", &Unsubscribe{ID: "3", Sub: "s1"}, `{"type":"unsubscribe","id":"3","sub":"s1"}`},
	{"unsubscribe and forget", &Unsubscribe{ID: "3", Sub: "jobs", Forget: true}, `{"type":"unsubscribe","id":"3","sub":"jobs","forget":true}`},
	{"track", &Track{ID: "7", Channel: "rooms/1", Meta: raw(`{"name":"Ada"}`)},
		`{"type":"track","id":"7","channel":"rooms/1","meta":{"name":"Ada"}}`},
	{"track without meta", &Track{ID: "7", Channel: "rooms/1"}, `{"type":"track","id":"7","channel":"rooms/1"}`},
	{"untrack", &Untrack{ID: "8", Channel: "rooms/1"}, `{"type":"untrack","id":"8","channel":"rooms/1"}`},
	{"tracked", &Tracked{ID: "7", Channel: "rooms/1", Member: "alice/c1"},
		`{"type":"tracked","id":"7","channel":"rooms/1","member":"alice/c1"}`},
	{"untracked", &Untracked{ID: "8", Channel: "rooms/1"}, `{"type":"untracked","id":"8","channel":"rooms/1"}`},
	{"roster", &Roster{Sub: "p1", Channel: "rooms/1", Members: []Member{
		{ID: "alice/c1", Subject: "alice", Meta: raw(`{"name":"Ada"}`)}, {ID: "bob/c2", Subject: "bob"}}},
		`{"type":"roster","sub":"p1","channel":"rooms/1","members":[{"id":"alice/c1","subject":"alice","meta":{"name":"Ada"}},{"id":"bob/c2","subject":"bob"}]}`},
	{"empty roster", &Roster{Sub: "p1", Channel: "rooms/1", Members: []Member{}},
		`{"type":"roster","sub":"p1","channel":"rooms/1","members":[]}`},
	{"join", &Join{Sub: "p1", Channel: "rooms/1", Member: Member{ID: "alice/c1", Subject: "alice", Meta: raw(`{"name":"Ada"}`)}},
		`{"type":"join","sub":"p1","channel":"rooms/1","member":{"id":"alice/c1","subject":"alice","meta":{"name":"Ada"}}}`},
	{"leave", &Leave{Sub: "p1", Channel: "rooms/1", Member: Member{ID: "/c3"}},
		`{"type":"leave","sub":"p1","channel":"rooms/1","member":{"id":"/c3"}}`},
	{"publish", &Publish{ID: "4", Channel: "rooms/1", Event: "chat", Data: raw(`{"text":"hi"}`)},
		`{"type":"publish","id":"4","channel":"rooms/1","event":"chat","data":{"text":"hi"}}`},
	{"ping", &Ping{ID: "5"}, `{"type":"ping","id":"5"}`},
	{"ack", &Ack{ID: "6", Sub: "jobs", Pos: ChannelPosition("e", 9)}, `{"type":"ack","id":"6","sub":"jobs","pos":{"epoch":"e","offset":9}}`},
	{"welcome",
		&Welcome{ID: "1", Version: 1, Session: "sess", ExpiresAt: commitTime, ExpiresIn: 3599500 * time.Millisecond,
			Limits: Limits{MaxFrameBytes: 65536, MaxSubscriptions: 100, PingInterval: 25 * time.Second, MaxUnreadReplies: 252}},
		`{"type":"welcome","id":"1","v":1,"session":"sess","expires_at":"2025-01-02T02:04:05.123Z","expires_in":3599,"limits":{"max_frame_bytes":65536,"max_subscriptions":100,"ping_interval_ms":25000,"max_unread_replies":252}}`},
	{"welcome on SSE", &Welcome{Session: "sess", Limits: Limits{MaxFrameBytes: 1, MaxSubscriptions: 2}},
		`{"type":"welcome","v":1,"session":"sess","limits":{"max_frame_bytes":1,"max_subscriptions":2}}`},
	{"subscribed", &Subscribed{ID: "2", Sub: "s1", Pos: TablePosition(0x16B374D848, 0)},
		`{"type":"subscribed","id":"2","sub":"s1","pos":"16/B374D848"}`},
	{"subscribed with a key", &Subscribed{ID: "2", Sub: "s1", Pos: TablePosition(0x16B374D848, 0), Key: []string{"org", "id"}},
		`{"type":"subscribed","id":"2","sub":"s1","pos":"16/B374D848","key":["org","id"]}`},
	{"subscribed pattern", &Subscribed{ID: "2", Sub: "s1"}, `{"type":"subscribed","id":"2","sub":"s1"}`},
	{"subscribed with a snapshot", &Subscribed{ID: "2", Sub: "s1", Key: []string{"id"}, Snapshot: true},
		`{"type":"subscribed","id":"2","sub":"s1","key":["id"],"snapshot":true}`},
	{"rows", &Rows{Sub: "s1", Rows: []change.Row{{{Name: "id", Value: raw(`1`)}, {Name: "title", Value: raw(`"x"`)}}, {{Name: "id", Value: raw(`2`)}, {Name: "title", Value: nil}}},
		Progress: Progress{Rows: 2, Bytes: 34, Pages: 1}},
		`{"type":"rows","sub":"s1","rows":[{"id":1,"title":"x"},{"id":2,"title":null}],"progress":{"rows":2,"bytes":34,"pages":1}}`},
	{"last rows", &Rows{Sub: "s1", Rows: []change.Row{}, Progress: Progress{Rows: 2, Bytes: 34, Pages: 2}, Last: true},
		`{"type":"rows","sub":"s1","rows":[],"progress":{"rows":2,"bytes":34,"pages":2},"last":true}`},
	{"live", &Live{Sub: "s1", Pos: TablePosition(0x16B374D848, 0)}, `{"type":"live","sub":"s1","pos":"16/B374D848"}`},
	{"unsubscribed", &Unsubscribed{ID: "3", Sub: "s1"}, `{"type":"unsubscribed","id":"3","sub":"s1"}`},
	{"unsubscribed by the server", &Unsubscribed{Sub: "s1", Code: CodeForbidden, Message: "policy now denies public.items"},
		`{"type":"unsubscribed","sub":"s1","code":"forbidden","message":"policy now denies public.items"}`},
	{"change insert",
		&Change{Sub: "s1", LSN: 0x16B374D848, Idx: 1, Op: OpInsert, Table: "public.items",
			Row:        change.Row{{Name: "id", Value: raw(`1`)}, {Name: "title", Value: raw(`"x"`)}},
			CommitTime: commitTime, TxID: 7890, WriteTag: "w1"},
		`{"type":"change","sub":"s1","pos":"16/B374D848","idx":1,"op":"insert","table":"public.items","row":{"id":1,"title":"x"},"commit_time":"2025-01-02T02:04:05.123Z","txid":7890,"write_tag":"w1"}`},
	{"change update with key-only old and omitted",
		&Change{Sub: "s1", LSN: 0x10, Idx: 2, Op: OpUpdate, Table: "public.items",
			Row: change.Row{{Name: "id", Value: raw(`1`)}}, Old: change.Row{{Name: "id", Value: raw(`1`)}},
			OldKeyOnly: true, Omitted: []string{"body", "blob"}},
		`{"type":"change","sub":"s1","pos":"0/10","idx":2,"op":"update","table":"public.items","row":{"id":1},"old":{"id":1},"old_key_only":true,"omitted":["body","blob"]}`},
	{"change leave", &Change{Sub: "s1", LSN: 0x10, Idx: 3, Op: OpLeave, Table: "a.b", Old: change.Row{{Name: "id", Value: nil}}},
		`{"type":"change","sub":"s1","pos":"0/10","idx":3,"op":"leave","table":"a.b","old":{"id":null}}`},
	{"message", &Message{Sub: "c1", Pos: ChannelPosition("k7Hq2x", 42), Channel: "rooms/1", Event: "chat", Data: raw(`{"text":"hi"}`)},
		`{"type":"message","sub":"c1","pos":{"epoch":"k7Hq2x","offset":42},"channel":"rooms/1","event":"chat","data":{"text":"hi"}}`},
	{"resync", &Resync{Sub: "s1", First: TablePosition(0x10, 2), Last: TablePosition(0x20, 0), Lost: 12, Reason: ResyncLaneFull},
		`{"type":"resync","sub":"s1","first":"0/10.2","last":"0/20","lost":12,"reason":"lane_full"}`},
	{"resync unknown range", &Resync{Sub: "c1", Last: ChannelPosition("e", 7), Reason: ResyncHistoryExpired},
		`{"type":"resync","sub":"c1","last":{"epoch":"e","offset":7},"reason":"history_expired"}`},
	{"error", &Error{ID: "2", Code: CodeBadFilter, Message: "m", Field: "filter", Err: bytes.ErrTooLarge},
		`{"type":"error","id":"2","code":"bad_filter","status":400,"message":"m","field":"filter"}`},
	{"error unprompted", &Error{Code: CodePolicyError, Message: "m", Sub: "s1"},
		`{"type":"error","code":"policy_error","status":500,"message":"m","sub":"s1"}`},
	{"pong", &Pong{ID: "5"}, `{"type":"pong","id":"5"}`},
	{"refreshed", &Refreshed{ID: "r", ExpiresAt: commitTime, ExpiresIn: time.Minute},
		`{"type":"refreshed","id":"r","expires_at":"2025-01-02T02:04:05.123Z","expires_in":60}`},
	{"published", &Published{ID: "4", Pos: ChannelPosition("k7Hq2x", 43)},
		`{"type":"published","id":"4","pos":{"epoch":"k7Hq2x","offset":43}}`},
	{"expiring", &Expiring{ExpiresAt: commitTime, ExpiresIn: 30 * time.Second},
		`{"type":"expiring","expires_at":"2025-01-02T02:04:05.123Z","expires_in":30}`},
}

func TestAppendFrameGolden(t *testing.T) {
	seen := map[FrameType]bool{}
	for _, tt := range goldenFrames {
		t.Run(tt.name, func(t *testing.T) {
			seen[tt.f.Type()] = true
			got, err := AppendFrame([]byte("prefix"), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			got = bytes.TrimPrefix(got, []byte("prefix"))
			if string(got) != tt.want {
				t.Fatalf("AppendFrame =\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatalf("not valid JSON: %s", got)
			}
			// "type" comes first, so a reader can dispatch before it parses the rest.
			if !bytes.HasPrefix(got, []byte(`{"type":"`+string(tt.f.Type())+`"`)) {
				t.Errorf("frame does not start with its type: %s", got)
			}
			// Decoding it back gives the frame, up to the precision the wire keeps.
			decode := DecodeServer
			if tt.f.Type().FromClient() {
				decode = Decode
			}
			back, err := decode(got, 0)
			if err != nil {
				t.Fatalf("decoding %s: %v", got, err)
			}
			again, err := AppendFrame(nil, back)
			if err != nil || string(again) != tt.want {
				t.Errorf("re-encoded %s, %v; want %s", again, err, tt.want)
			}
		})
	}
	for _, typ := range FrameTypes() {
		if !seen[typ] {
			t.Errorf("no golden frame of type %s", typ)
		}
	}
}

func TestDataFrameIsHeadPlusSharedBody(t *testing.T) {
	c := &Change{LSN: 0x16B374D848, Idx: 1, Op: OpInsert, Table: "public.items",
		Row: change.Row{{Name: "id", Value: raw(`1`)}}, CommitTime: commitTime}
	body := AppendChangeBody(nil, c)
	if want := `"pos":"16/B374D848","idx":1,"op":"insert","table":"public.items","row":{"id":1},"commit_time":"2025-01-02T02:04:05.123Z"}`; string(body) != want {
		t.Fatalf("AppendChangeBody = %s, want %s", body, want)
	}
	m := &Message{Pos: ChannelPosition("e", 1), Channel: "c", Data: raw(`[1]`)}
	mbody := AppendMessageBody(nil, m)
	if want := `"pos":{"epoch":"e","offset":1},"channel":"c","data":[1]}`; string(mbody) != want {
		t.Fatalf("AppendMessageBody = %s, want %s", mbody, want)
	}
	for _, sub := range []string{"s1", "feed", `we"ird\sub`, "", "é\x00\xff"} {
		for _, tc := range []struct {
			typ  FrameType
			body []byte
		}{{FrameChange, body}, {FrameMessage, mbody}} {
			frame := append(AppendDataHead(nil, tc.typ, sub), tc.body...)
			if !json.Valid(frame) {
				t.Fatalf("head+body is not valid JSON: %q", frame)
			}
			var got map[string]any
			if err := json.Unmarshal(frame, &got); err != nil {
				t.Fatal(err)
			}
			var wantSub string
			_ = json.Unmarshal(change.AppendJSONString(nil, sub), &wantSub)
			if got["type"] != string(tc.typ) || got["sub"] != wantSub {
				t.Errorf("head for %q: type %v sub %v", sub, got["type"], got["sub"])
			}
		}
	}
	// The frame AppendFrame writes is the same bytes.
	c.Sub = "s1"
	whole, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if split := append(AppendDataHead(nil, FrameChange, "s1"), body...); !bytes.Equal(whole, split) {
		t.Errorf("AppendFrame %s != head+body %s", whole, split)
	}
	// Other types get the general head.
	if got := string(AppendDataHead(nil, FrameResync, "s")); got != `{"type":"resync","sub":"s",` {
		t.Errorf("resync head = %s", got)
	}
}

func TestFramesAreOneLine(t *testing.T) {
	c := &Change{Sub: "s", LSN: 1, Idx: 1, Op: OpInsert, Table: "a.b",
		Row: change.Row{{Name: "doc", Value: raw("{\n  \"a\": [1,\r\n 2],\n  \"s\": \"x y\"\n}")}, {Name: "n", Value: raw("1")}}}
	f, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(f, "\r\n") {
		t.Fatalf("frame has a line break: %q", f)
	}
	want := `{"type":"change","sub":"s","pos":"0/1","idx":1,"op":"insert","table":"a.b","row":{"doc":{"a":[1,2],"s":"x y"},"n":1}}`
	if string(f) != want {
		t.Errorf("frame = %s, want %s", f, want)
	}
	m := &Message{Sub: "s", Pos: ChannelPosition("e", 1), Channel: "c", Data: raw("[\n1]")}
	if f, _ := AppendFrame(nil, m); bytes.ContainsAny(f, "\r\n") {
		t.Errorf("message frame has a line break: %q", f)
	}
}

func TestAppendGap(t *testing.T) {
	tests := []struct {
		name string
		sub  string
		g    stream.Gap
		want string
	}{
		{"table range", "s1", stream.Gap{Reason: stream.ReasonLaneFull, First: TablePosition(0x16B374D848, 2), Last: TablePosition(0x16B374D900, 1), Lost: 5},
			`{"type":"resync","sub":"s1","first":"16/B374D848.2","last":"16/B374D900.1","lost":5,"reason":"lane_full"}`},
		{"channel range", "c1", stream.Gap{Reason: stream.ReasonTooLarge, First: ChannelPosition("k7", 3), Last: ChannelPosition("k7", 3), Lost: 1},
			`{"type":"resync","sub":"c1","first":{"epoch":"k7","offset":3},"last":{"epoch":"k7","offset":3},"lost":1,"reason":"too_large"}`},
		{"no first, count unknown", "s", stream.Gap{Reason: stream.ReasonHistoryExpired, Last: TablePosition(0x100000001, 0)},
			`{"type":"resync","sub":"s","last":"1/1","reason":"history_expired"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendGap(nil, tt.sub, &tt.g)
			if string(got) != tt.want {
				t.Fatalf("AppendGap =\n%s\nwant\n%s", got, tt.want)
			}
			f, err := DecodeServer(got, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := &Resync{Sub: tt.sub, First: tt.g.First, Last: tt.g.Last, Lost: tt.g.Lost, Reason: tt.g.Reason}
			if diff := cmp.Diff(want, f); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendFrameRefusesInvalidRaw(t *testing.T) {
	for _, f := range []Frame{
		&Publish{ID: "1", Channel: "c", Data: raw(`{"a":`)},
		&Subscribe{ID: "1", Sub: "s", Table: "a.b", Filter: raw(`nope`)},
		&Message{Sub: "s", Pos: ChannelPosition("e", 1), Channel: "c", Data: raw("\"\xff\"")},
		&Change{Sub: "s", LSN: 1, Idx: 1, Op: OpInsert, Table: "a.b", Row: change.Row{{Name: "a", Value: raw(`1 2`)}}},
		&Change{Sub: "s", LSN: 1, Idx: 1, Op: OpDelete, Table: "a.b", Old: change.Row{{Name: "a", Value: raw(`[`)}}},
		&Change{Sub: "s", LSN: 1, Op: OpDelete, Table: "a.b"},
	} {
		if b, err := AppendFrame(nil, f); err == nil {
			t.Errorf("AppendFrame(%T) = %s, want an error", f, b)
		}
	}
}

func TestNewChange(t *testing.T) {
	e := &change.Event{
		Table: "public.items", Op: change.Update,
		Before: change.Row{{Name: "id", Value: raw(`1`)}}, After: change.Row{{Name: "id", Value: raw(`1`)}, {Name: "t", Value: raw(`"x"`)}},
		Omitted: []string{"body"}, BeforeKeyOnly: true,
		LSN: 0x16B374D848, TxID: 77, CommitTime: commitTime, WriteTag: "w",
	}
	got := NewChange(e, 3)
	want := Change{LSN: e.LSN, Idx: 3, Op: OpUpdate, Table: e.Table, Row: e.After, Old: e.Before, OldKeyOnly: true,
		Omitted: e.Omitted, CommitTime: commitTime, TxID: 77, WriteTag: "w"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NewChange (-want +got):\n%s", diff)
	}
	if p := got.Position(); p != TablePosition(e.LSN, 3) || p.String() != "16/B374D848.3" {
		t.Errorf("Position() = %v", p)
	}
}

func TestDataFramesAllocateNothing(t *testing.T) {
	c := benchChange(10)
	m := &Message{Pos: ChannelPosition("k7Hq2x", 42), Channel: "rooms/1", Event: "chat", Data: raw(`{"text":"hello"}`)}
	g := &stream.Gap{Reason: stream.ReasonLaneFull, First: TablePosition(0x16B374D848, 2), Last: ChannelPosition("k7", 9), Lost: 5}
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendDataHead(buf[:0], FrameChange, "subscription-1")
		b = AppendChangeBody(b, c)
		b = AppendDataHead(b[:0], FrameMessage, "s")
		b = AppendMessageBody(b, m)
		_ = AppendGap(b[:0], "s1", g)
	})
	if allocs != 0 {
		t.Errorf("data frame encoders allocate %v times per frame, want 0", allocs)
	}
}

func TestErrorValue(t *testing.T) {
	e := &Error{ID: "1", Code: CodeBadFrame, Field: "sub", Message: "m", Err: bytes.ErrTooLarge}
	if got := e.Error(); got != "bad_frame (sub): m" {
		t.Errorf("Error() = %q", got)
	}
	if e.Unwrap() != bytes.ErrTooLarge {
		t.Errorf("Unwrap")
	}
	if e.StatusCode() != 400 {
		t.Errorf("StatusCode = %d", e.StatusCode())
	}
	if got := Errorf(CodeNotFound, "no subscription %q", "s9"); got.Code != CodeNotFound || !strings.Contains(got.Message, `"s9"`) {
		t.Errorf("Errorf = %+v", got)
	}
	if CodeOf(bytes.ErrTooLarge) != CodeInternal {
		t.Errorf("CodeOf(plain error) = %s, want internal", CodeOf(bytes.ErrTooLarge))
	}
}

func TestAppendTimeMatchesLayout(t *testing.T) {
	times := []time.Time{
		time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2024, 2, 29, 12, 0, 0, 1e6, time.FixedZone("", -(4*3600+56*60+2))),
		time.Date(0, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600)), // year -1 in UTC
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		commitTime,
	}
	for i := int64(0); i < 2000; i++ {
		times = append(times, time.Unix(i*7919*86400/3+i*104729, i*999983%1e9))
	}
	for _, tm := range times {
		got := string(appendTime(nil, tm))
		want := tm.UTC().Format(timeLayout)
		if got != want {
			t.Fatalf("appendTime(%v) = %s, want %s", tm, got, want)
		}
	}
}

func TestAppendOneLine(t *testing.T) {
	for in, want := range map[string]string{
		`1`:                          `1`,
		`"a\nb"`:                     `"a\nb"`, // an escaped line break is not a raw one
		`"x y"`:                      `"x y"`,
		"{\"a\": 1}":                 "{\"a\": 1}", // no line break: copied as it is
		"{\n\"a\": \"b c\"\n}":       `{"a":"b c"}`,
		"[1,\r\n2]":                  `[1,2]`,
		"\n1":                        `1`,
		"1\r\n":                      `1`,
		"\"x y\"\n":                  `"x y"`,
		"true\r":                     `true`,
		"null \n ":                   `null`,
		"1 ":                         "1 ", // no line break: copied as it is
		"{\"k\":\"\\\\\"\n,\"j\":2}": `{"k":"\\","j":2}`,
	} {
		got := string(appendOneLine(nil, []byte(in)))
		if got != want {
			t.Errorf("appendOneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
