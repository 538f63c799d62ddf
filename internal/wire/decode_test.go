package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/change"
)

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestDecodeClientFrames(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Frame
	}{
		{"connect with token", `{"type":"connect","id":"1","token":"eyJ.x.y"}`,
			&Connect{ID: "1", Token: "eyJ.x.y"}},
		{"connect without token", `{"type":"connect","id":"1"}`, &Connect{ID: "1"}},
		{"connect with null token", `{"type":"connect","id":"1","token":null}`, &Connect{ID: "1"}},
		{"refresh", `{"type":"refresh","id":"r1","token":"eyJ.new"}`, &Refresh{ID: "r1", Token: "eyJ.new"}},
		{"subscribe table, every field",
			`{"type":"subscribe","id":"2","sub":"items","table":"public.items",
			  "filter":{"and":[{"eq":["owner", "u1"]}, {"gt":["n", 3]}]},
			  "columns":["id","title"],"from":"16/B374D848.3"}`,
			&Subscribe{ID: "2", Sub: "items", Table: "public.items",
				Filter:  raw(`{"and":[{"eq":["owner","u1"]},{"gt":["n",3]}]}`),
				Columns: []string{"id", "title"}, From: TablePosition(0x16B374D848, 3), Mode: ModeBroadcast}},
		{"subscribe table from a whole transaction", `{"type":"subscribe","id":"2","sub":"s","table":"a.b","from":"0/1"}`,
			&Subscribe{ID: "2", Sub: "s", Table: "a.b", From: TablePosition(1, 0), Mode: ModeBroadcast}},
		{"subscribe table from lowercase hex", `{"type":"subscribe","id":"2","sub":"s","table":"a.b","from":"16/b374d848"}`,
			&Subscribe{ID: "2", Sub: "s", Table: "a.b", From: TablePosition(0x16B374D848, 0), Mode: ModeBroadcast}},
		{"subscribe channel with event and object position",
			`{"type":"subscribe","id":"3","sub":"c1","channel":"docs/alice/**","event":"edit","from":{"epoch":"k7Hq2x","offset":42}}`,
			&Subscribe{ID: "3", Sub: "c1", Channel: "docs/alice/**", Event: "edit",
				From: ChannelPosition("k7Hq2x", 42), Mode: ModeBroadcast}},
		{"subscribe channel with text position", `{"type":"subscribe","id":"3","sub":"c1","channel":"rooms/1","from":"k7Hq2x:0"}`,
			&Subscribe{ID: "3", Sub: "c1", Channel: "rooms/1", From: ChannelPosition("k7Hq2x", 0), Mode: ModeBroadcast}},
		{"subscribe single mode is decoded", `{"type":"subscribe","id":"3","sub":"c1","channel":"jobs","mode":"single"}`,
			&Subscribe{ID: "3", Sub: "c1", Channel: "jobs", Mode: ModeSingle, Durable: true}},
		{"subscribe durable broadcast", `{"type":"subscribe","id":"3","sub":"c1","channel":"feed","durable":true}`,
			&Subscribe{ID: "3", Sub: "c1", Channel: "feed", Mode: ModeBroadcast, Durable: true}},
		{"subscribe durable table is decoded", `{"type":"subscribe","id":"3","sub":"c1","table":"public.t","durable":true}`,
			&Subscribe{ID: "3", Sub: "c1", Table: "public.t", Mode: ModeBroadcast, Durable: true}},
		{"subscribe explicit broadcast", `{"type":"subscribe","id":"3","sub":"c1","channel":"jobs","mode":"broadcast"}`,
			&Subscribe{ID: "3", Sub: "c1", Channel: "jobs", Mode: ModeBroadcast}},
		{"subscribe null optionals", `{"type":"subscribe","id":"3","sub":"c1","table":"a.b","filter":null,"columns":null,"channel":null,"from":null}`,
			&Subscribe{ID: "3", Sub: "c1", Table: "a.b", Mode: ModeBroadcast}},
		{"unsubscribe", `{"type":"unsubscribe","id":"4","sub":"items"}`, &Unsubscribe{ID: "4", Sub: "items"}},
		{"unsubscribe and forget", `{"type":"unsubscribe","id":"4","sub":"jobs","forget":true}`, &Unsubscribe{ID: "4", Sub: "jobs", Forget: true}},
		{"publish with event", `{"type":"publish","id":"5","channel":"rooms/1","event":"chat","data":{ "text" : "hi there" }}`,
			&Publish{ID: "5", Channel: "rooms/1", Event: "chat", Data: raw(`{"text":"hi there"}`)}},
		{"publish scalar data", `{"type":"publish","id":"5","channel":"rooms/1","data":42}`,
			&Publish{ID: "5", Channel: "rooms/1", Data: raw(`42`)}},
		{"publish data with a line break", "{\"type\":\"publish\",\"id\":\"5\",\"channel\":\"c\",\"data\":[1,\n2]}",
			&Publish{ID: "5", Channel: "c", Data: raw(`[1,2]`)}},
		{"ping", `{"type":"ping","id":"6"}`, &Ping{ID: "6"}},
		{"ack table position", `{"type":"ack","id":"7","sub":"jobs","pos":"0/16B3748.2"}`,
			&Ack{ID: "7", Sub: "jobs", Pos: TablePosition(0x16B3748, 2)}},
		{"ack channel position", `{"type":"ack","id":"7","sub":"jobs","pos":{"epoch":"e1","offset":9}}`,
			&Ack{ID: "7", Sub: "jobs", Pos: ChannelPosition("e1", 9)}},
		{"unknown fields are ignored", `{"type":"ping","id":"6","client":"js/1.2","extra":{"deep":[1,{"x":null}]}}`, &Ping{ID: "6"}},
		{"keys are case-sensitive, so TYPE is just an unknown field", `{"type":"ping","TYPE":"connect","id":"6"}`, &Ping{ID: "6"}},
		{"escaped keys and values", `{"\u0074ype":"ping","id":"\u0061"}`, &Ping{ID: "a"}},
		{"whitespace around the object", " \n\t{\"type\":\"ping\",\"id\":\"6\"}\r\n ", &Ping{ID: "6"}},
		{"id of printable ASCII", `{"type":"ping","id":"~!#$%&'()*+,-./:;<=>?@[]^_{|}"}`, &Ping{ID: `~!#$%&'()*+,-./:;<=>?@[]^_{|}`}},
		{"id with escaped quote", `{"type":"ping","id":"a\"b"}`, &Ping{ID: `a"b`}},
		{"id of 64 bytes", `{"type":"ping","id":"` + strings.Repeat("x", 64) + `"}`, &Ping{ID: strings.Repeat("x", 64)}},
		{"string with escapes and surrogate pair", `{"type":"publish","id":"1","channel":"caf\u00e9 \ud83d\ude00\n","data":"\ud800x"}`,
			&Publish{ID: "1", Channel: "café 😀\n", Data: raw(`"\ud800x"`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.in), 0)
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode(%s) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestDecodeClientErrors(t *testing.T) {
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	tests := []struct {
		name      string
		in        string
		limit     int
		code      Code
		field     string
		id        string
		msgSubstr string // part of the message that tells how to fix it
	}{
		{name: "too large", in: `{"type":"ping","id":"1","pad":"` + strings.Repeat("x", 100) + `"}`, limit: 64,
			code: CodeFrameTooLarge, msgSubstr: "limit is 64"},
		{name: "default limit applies", in: `{"type":"ping","id":"1","pad":"` + strings.Repeat("x", DefaultMaxFrameBytes) + `"}`,
			code: CodeFrameTooLarge},
		{name: "not UTF-8", in: "{\"type\":\"ping\",\"id\":\"\xff\"}", code: CodeBadFrame, msgSubstr: "UTF-8"},
		{name: "empty", in: "", code: CodeBadFrame, msgSubstr: "not valid JSON"},
		{name: "truncated", in: `{"type":"ping","id":"1"`, code: CodeBadFrame, msgSubstr: "not valid JSON"},
		{name: "trailing data", in: `{"type":"ping","id":"1"} {}`, code: CodeBadFrame, msgSubstr: "after the frame"},
		{name: "array", in: `[{"type":"ping"}]`, code: CodeBadFrame, msgSubstr: "an array"},
		{name: "string", in: `"ping"`, code: CodeBadFrame, msgSubstr: "a string"},
		{name: "bare word", in: `ping`, code: CodeBadFrame, msgSubstr: "not valid JSON"},
		{name: "single quotes", in: `{'type':'ping'}`, code: CodeBadFrame},
		{name: "trailing comma", in: `{"type":"ping","id":"1",}`, code: CodeBadFrame},
		{name: "raw control character", in: "{\"type\":\"ping\",\"id\":\"a\tb\"}", code: CodeBadFrame, msgSubstr: "control character"},
		{name: "bad escape", in: `{"type":"ping","id":"\x"}`, code: CodeBadFrame, msgSubstr: "escape"},
		{name: "bad unicode escape", in: `{"type":"ping","id":"\u12"}`, code: CodeBadFrame},
		{name: "leading zero number", in: `{"type":"ping","id":"1","n":01}`, code: CodeBadFrame},
		{name: "nesting too deep", in: `{"type":"publish","id":"1","channel":"c","data":` + deep + `}`, code: CodeBadFrame, msgSubstr: "nested deeper"},
		{name: "type missing", in: `{"id":"1"}`, code: CodeBadFrame, field: "type", id: "1", msgSubstr: `"type":"subscribe"`},
		{name: "type not a string", in: `{"type":7,"id":"1"}`, code: CodeBadFrame, field: "type", id: "1", msgSubstr: "not a number"},
		{name: "type empty", in: `{"type":"","id":"1"}`, code: CodeBadFrame, field: "type", id: "1"},
		{name: "type unknown", in: `{"type":"subscribe_all","id":"1"}`, code: CodeUnknownType, field: "type", id: "1", msgSubstr: "a client sends"},
		{name: "type of a server frame", in: `{"type":"welcome","id":"1"}`, code: CodeUnknownType, field: "type", id: "1", msgSubstr: "the server sends"},
		{name: "track without channel", in: `{"type":"track","id":"1"}`, code: CodeBadFrame, field: "channel", id: "1", msgSubstr: "rooms/1"},
		{name: "track meta not JSON-ish", in: `{"type":"track","id":"1","channel":"a","meta":tru}`, code: CodeBadFrame, id: ""},
		{name: "untrack channel a number", in: `{"type":"untrack","id":"1","channel":1}`, code: CodeBadFrame, field: "channel", id: "1"},
		{name: "presence on a table", in: `{"type":"subscribe","id":"1","sub":"s","table":"public.t","presence":true}`, code: CodeBadFrame, field: "presence", id: "1", msgSubstr: "channel"},
		{name: "presence on a pattern", in: `{"type":"subscribe","id":"1","sub":"s","channel":"rooms/*","presence":true}`, code: CodeBadFrame, field: "presence", id: "1", msgSubstr: "pattern"},
		{name: "single on a pattern", in: `{"type":"subscribe","id":"1","sub":"s","channel":"jobs/*","mode":"single"}`, code: CodeBadFrame, field: "channel", id: "1", msgSubstr: "pattern"},
		{name: "durable with from", in: `{"type":"subscribe","id":"1","sub":"s","channel":"jobs","durable":true,"from":"e:1"}`, code: CodeBadFrame, field: "from", id: "1", msgSubstr: "resumes by itself"},
		{name: "single with presence", in: `{"type":"subscribe","id":"1","sub":"s","channel":"jobs","mode":"single","presence":true}`, code: CodeBadFrame, field: "presence", id: "1"},
		{name: "durable not a bool", in: `{"type":"subscribe","id":"1","sub":"s","channel":"jobs","durable":1}`, code: CodeBadFrame, field: "durable", id: "1"},
		{name: "forget not a bool", in: `{"type":"unsubscribe","id":"1","sub":"s","forget":"yes"}`, code: CodeBadFrame, field: "forget", id: "1"},
		{name: "presence not a bool", in: `{"type":"subscribe","id":"1","sub":"s","channel":"rooms/1","presence":"yes"}`, code: CodeBadFrame, field: "presence", id: "1"},
		{name: "snapshot on a channel", in: `{"type":"subscribe","id":"1","sub":"s","channel":"rooms/1","snapshot":true}`, code: CodeBadFrame, field: "snapshot", id: "1", msgSubstr: "table"},
		{name: "snapshot with from", in: `{"type":"subscribe","id":"1","sub":"s","table":"public.t","from":"1/2","snapshot":true}`, code: CodeBadFrame, field: "snapshot", id: "1", msgSubstr: "from"},
		{name: "snapshot in mode single", in: `{"type":"subscribe","id":"1","sub":"s","table":"public.t","mode":"single","snapshot":true}`, code: CodeBadFrame, field: "snapshot", id: "1", msgSubstr: "broadcast"},
		{name: "snapshot not a bool", in: `{"type":"subscribe","id":"1","sub":"s","table":"public.t","snapshot":1}`, code: CodeBadFrame, field: "snapshot", id: "1"},
		{name: "type unknown and huge is echoed short", in: `{"type":"` + strings.Repeat("é", 5000) + `","id":"1"}`, code: CodeUnknownType, field: "type", id: "1", msgSubstr: `..."`},
		{name: "type case differs", in: `{"type":"PING","id":"1"}`, code: CodeUnknownType, field: "type", id: "1"},
		{name: "type twice", in: `{"type":"ping","type":"connect","id":"1"}`, code: CodeBadFrame, field: "type", id: "1", msgSubstr: "more than once"},
		{name: "id missing", in: `{"type":"ping"}`, code: CodeBadFrame, field: "id", msgSubstr: `"id":"1"`},
		{name: "id a number", in: `{"type":"ping","id":1}`, code: CodeBadFrame, field: "id", msgSubstr: "a string"},
		{name: "id empty", in: `{"type":"ping","id":""}`, code: CodeBadFrame, field: "id"},
		{name: "id too long", in: `{"type":"ping","id":"` + strings.Repeat("x", 65) + `"}`, code: CodeBadFrame, field: "id", msgSubstr: "1 to 64"},
		{name: "id with a space", in: `{"type":"ping","id":"a b"}`, code: CodeBadFrame, field: "id"},
		{name: "id non-ASCII", in: `{"type":"ping","id":"é"}`, code: CodeBadFrame, field: "id"},
		{name: "id twice", in: `{"type":"ping","id":"1","id":"2"}`, code: CodeBadFrame, field: "id"},
		{name: "connect token empty", in: `{"type":"connect","id":"1","token":""}`, code: CodeBadFrame, field: "token", id: "1", msgSubstr: "leave it out"},
		{name: "connect token a number", in: `{"type":"connect","id":"1","token":5}`, code: CodeBadFrame, field: "token", id: "1"},
		{name: "refresh token missing", in: `{"type":"refresh","id":"1"}`, code: CodeBadFrame, field: "token", id: "1"},
		{name: "subscribe sub missing", in: `{"type":"subscribe","id":"1","table":"a.b"}`, code: CodeBadFrame, field: "sub", id: "1", msgSubstr: `"sub":"s1"`},
		{name: "subscribe sub with a space", in: `{"type":"subscribe","id":"1","sub":"my sub","table":"a.b"}`, code: CodeBadFrame, field: "sub", id: "1"},
		{name: "subscribe neither table nor channel", in: `{"type":"subscribe","id":"1","sub":"s"}`, code: CodeBadFrame, field: "table", id: "1", msgSubstr: "or a channel"},
		{name: "subscribe both table and channel", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","channel":"c"}`, code: CodeBadFrame, field: "channel", id: "1", msgSubstr: "not both"},
		{name: "subscribe table empty", in: `{"type":"subscribe","id":"1","sub":"s","table":""}`, code: CodeBadFrame, field: "table", id: "1"},
		{name: "subscribe table unqualified", in: `{"type":"subscribe","id":"1","sub":"s","table":"items"}`, code: CodeBadFrame, field: "table", id: "1", msgSubstr: "public.items"},
		{name: "subscribe table trailing dot", in: `{"type":"subscribe","id":"1","sub":"s","table":"public."}`, code: CodeBadFrame, field: "table", id: "1"},
		{name: "subscribe filter on a channel", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","filter":{}}`, code: CodeBadFrame, field: "filter", id: "1"},
		{name: "subscribe columns on a channel", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","columns":["a"]}`, code: CodeBadFrame, field: "columns", id: "1"},
		{name: "subscribe event on a table", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","event":"x"}`, code: CodeBadFrame, field: "event", id: "1"},
		{name: "subscribe columns not an array", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","columns":"a,b"}`, code: CodeBadFrame, field: "columns", id: "1", msgSubstr: "an array of strings"},
		{name: "subscribe columns empty", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","columns":[]}`, code: CodeBadFrame, field: "columns", id: "1", msgSubstr: "leave it out"},
		{name: "subscribe column a number", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","columns":["a",2]}`, code: CodeBadFrame, field: "columns[1]", id: "1"},
		{name: "subscribe column empty", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","columns":[""]}`, code: CodeBadFrame, field: "columns[0]", id: "1"},
		{name: "subscribe from garbled", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","from":"16-B374"}`, code: CodeBadFrame, field: "from", id: "1", msgSubstr: "16/B374D848"},
		{name: "subscribe from zero LSN", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","from":"0/0"}`, code: CodeBadFrame, field: "from", id: "1"},
		{name: "subscribe from index zero", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","from":"1/0.0"}`, code: CodeBadFrame, field: "from", id: "1"},
		{name: "subscribe from a number", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","from":12}`, code: CodeBadFrame, field: "from", id: "1", msgSubstr: "not a number"},
		{name: "subscribe from epoch missing", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":{"offset":1}}`, code: CodeBadFrame, field: "from.epoch", id: "1"},
		{name: "subscribe from epoch bad", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":{"epoch":"a b","offset":1}}`, code: CodeBadFrame, field: "from.epoch", id: "1"},
		{name: "subscribe from offset missing", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":{"epoch":"e"}}`, code: CodeBadFrame, field: "from.offset", id: "1", msgSubstr: `"offset":42`},
		{name: "subscribe from offset negative", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":{"epoch":"e","offset":-1}}`, code: CodeBadFrame, field: "from.offset", id: "1", msgSubstr: "whole number"},
		{name: "subscribe from offset fractional", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":{"epoch":"e","offset":1.5}}`, code: CodeBadFrame, field: "from.offset", id: "1"},
		{name: "subscribe from offset a string", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":{"epoch":"e","offset":"1"}}`, code: CodeBadFrame, field: "from.offset", id: "1"},
		{name: "subscribe from channel text garbled", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":"e:01"}`, code: CodeBadFrame, field: "from", id: "1"},
		{name: "subscribe table from a channel position", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","from":{"epoch":"e","offset":1}}`, code: CodeBadPosition, field: "from", id: "1"},
		{name: "subscribe channel from a table position", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","from":"16/B374D848"}`, code: CodeBadPosition, field: "from", id: "1"},
		{name: "subscribe mode unknown", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","mode":"fanout"}`, code: CodeBadFrame, field: "mode", id: "1", msgSubstr: `"broadcast"`},
		{name: "subscribe mode empty", in: `{"type":"subscribe","id":"1","sub":"s","channel":"c","mode":""}`, code: CodeBadFrame, field: "mode", id: "1"},
		{name: "subscribe table twice", in: `{"type":"subscribe","id":"1","sub":"s","table":"a.b","table":"c.d"}`, code: CodeBadFrame, field: "table", id: "1"},
		{name: "unsubscribe sub missing", in: `{"type":"unsubscribe","id":"1"}`, code: CodeBadFrame, field: "sub", id: "1"},
		{name: "publish channel missing", in: `{"type":"publish","id":"1","data":1}`, code: CodeBadFrame, field: "channel", id: "1"},
		{name: "publish data missing", in: `{"type":"publish","id":"1","channel":"c"}`, code: CodeBadFrame, field: "data", id: "1"},
		{name: "publish data null", in: `{"type":"publish","id":"1","channel":"c","data":null}`, code: CodeBadFrame, field: "data", id: "1"},
		{name: "publish event a number", in: `{"type":"publish","id":"1","channel":"c","event":1,"data":1}`, code: CodeBadFrame, field: "event", id: "1"},
		{name: "ack pos missing", in: `{"type":"ack","id":"1","sub":"s"}`, code: CodeBadFrame, field: "pos", id: "1"},
		{name: "ack sub missing", in: `{"type":"ack","id":"1","pos":"1/1"}`, code: CodeBadFrame, field: "sub", id: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Decode([]byte(tt.in), tt.limit)
			if err == nil {
				t.Fatalf("Decode(%s) = %#v, want a %s error", tt.in, f, tt.code)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Decode(%s) error %T %v, want *Error", tt.in, err, err)
			}
			if e.Code != tt.code || e.Field != tt.field || e.ID != tt.id {
				t.Errorf("Decode(%s) = code %q field %q id %q, want code %q field %q id %q (%v)",
					tt.in, e.Code, e.Field, e.ID, tt.code, tt.field, tt.id, e)
			}
			if !strings.Contains(e.Message, tt.msgSubstr) {
				t.Errorf("message %q does not contain %q", e.Message, tt.msgSubstr)
			}
			if e.Message == "" || len(e.Message) > 400 || !utf8.ValidString(e.Message) {
				t.Errorf("message is empty, over 400 bytes or not UTF-8: %q", e.Message)
			}
			if CodeOf(err) != tt.code {
				t.Errorf("CodeOf = %q, want %q", CodeOf(err), tt.code)
			}
		})
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	in := []byte(`{"type":"publish","id":"1","channel":"c","event":"e","data":{"a":"b"}}`)
	f, err := Decode(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'X'
	}
	p := f.(*Publish)
	if p.ID != "1" || p.Channel != "c" || p.Event != "e" || string(p.Data) != `{"a":"b"}` {
		t.Fatalf("frame changed with its input buffer: %#v", p)
	}
}

func TestDecodeServerFrames(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 123e6, time.UTC)
	tests := []struct {
		name string
		in   string
		want Frame
	}{
		{"welcome", `{"type":"welcome","id":"1","v":1,"session":"sess-1","expires_at":"2025-01-02T03:04:05.123Z","expires_in":3600,
			"limits":{"max_frame_bytes":65536,"max_subscriptions":100,"ping_interval_ms":25000,"max_unread_replies":252}}`,
			&Welcome{ID: "1", Version: 1, Session: "sess-1", ExpiresAt: at, ExpiresIn: time.Hour,
				Limits: Limits{MaxFrameBytes: 65536, MaxSubscriptions: 100, PingInterval: 25 * time.Second, MaxUnreadReplies: 252}}},
		{"welcome minimal", `{"type":"welcome","v":1,"session":"s","limits":{"max_frame_bytes":1,"max_subscriptions":0}}`,
			&Welcome{Version: 1, Session: "s", Limits: Limits{MaxFrameBytes: 1}}},
		{"subscribed table", `{"type":"subscribed","id":"2","sub":"s1","pos":"16/B374D848"}`,
			&Subscribed{ID: "2", Sub: "s1", Pos: TablePosition(0x16B374D848, 0)}},
		{"subscribed with a key", `{"type":"subscribed","id":"2","sub":"s1","pos":"16/B374D848","key":["id"]}`,
			&Subscribed{ID: "2", Sub: "s1", Pos: TablePosition(0x16B374D848, 0), Key: []string{"id"}}},
		{"subscribed channel", `{"type":"subscribed","sub":"s1","pos":{"epoch":"e","offset":0}}`,
			&Subscribed{Sub: "s1", Pos: ChannelPosition("e", 0)}},
		// A pattern spans channels: its subscribed has no position, and a client must read it.
		{"subscribed pattern", `{"type":"subscribed","id":"2","sub":"s1"}`, &Subscribed{ID: "2", Sub: "s1"}},
		{"unsubscribed answer", `{"type":"unsubscribed","id":"3","sub":"s1"}`, &Unsubscribed{ID: "3", Sub: "s1"}},
		{"unsubscribed by the server", `{"type":"unsubscribed","sub":"s1","code":"forbidden","message":"no longer allowed"}`,
			&Unsubscribed{Sub: "s1", Code: CodeForbidden, Message: "no longer allowed"}},
		{"change", `{"type":"change","sub":"s1","pos":"16/B374D848","idx":2,"op":"update","table":"public.items",
			"row":{"id":1,"title":"x"},"old":{"id":1},"old_key_only":true,"omitted":["body"],
			"commit_time":"2025-01-02T03:04:05.123Z","txid":7890,"write_tag":"w1"}`,
			&Change{Sub: "s1", LSN: 0x16B374D848, Idx: 2, Op: OpUpdate, Table: "public.items",
				Row:        change.Row{{Name: "id", Value: raw(`1`)}, {Name: "title", Value: raw(`"x"`)}},
				Old:        change.Row{{Name: "id", Value: raw(`1`)}},
				OldKeyOnly: true, Omitted: []string{"body"}, CommitTime: at, TxID: 7890, WriteTag: "w1"}},
		{"change truncate", `{"type":"change","sub":"s1","pos":"1/2","idx":1,"op":"truncate","table":"a.b"}`,
			&Change{Sub: "s1", LSN: 1<<32 | 2, Idx: 1, Op: OpTruncate, Table: "a.b"}},
		{"change leave", `{"type":"change","sub":"s1","pos":"1/2","idx":1,"op":"leave","table":"a.b","old":{"id":3}}`,
			&Change{Sub: "s1", LSN: 1<<32 | 2, Idx: 1, Op: OpLeave, Table: "a.b", Old: change.Row{{Name: "id", Value: raw(`3`)}}}},
		{"message", `{"type":"message","sub":"c1","pos":{"epoch":"e","offset":5},"channel":"rooms/1","event":"chat","data":{"t":"hi"}}`,
			&Message{Sub: "c1", Pos: ChannelPosition("e", 5), Channel: "rooms/1", Event: "chat", Data: raw(`{"t":"hi"}`)}},
		{"resync", `{"type":"resync","sub":"s1","first":"1/2.1","last":"1/9","lost":4,"reason":"lane_full"}`,
			&Resync{Sub: "s1", First: TablePosition(1<<32|2, 1), Last: TablePosition(1<<32|9, 0), Lost: 4, Reason: ResyncLaneFull}},
		{"resync unknown reason and range", `{"type":"resync","sub":"s1","last":{"epoch":"e","offset":3},"reason":"something_new"}`,
			&Resync{Sub: "s1", Last: ChannelPosition("e", 3), Reason: "something_new"}},
		{"error", `{"type":"error","id":"4","code":"bad_filter","status":400,"message":"m","field":"filter"}`,
			&Error{ID: "4", Code: CodeBadFilter, Message: "m", Field: "filter"}},
		{"error unknown code keeps its status", `{"type":"error","code":"teapot","status":418}`,
			&Error{Code: "teapot", Status: 418}},
		{"error unprompted for a subscription", `{"type":"error","code":"policy_error","status":500,"message":"m","sub":"s1"}`,
			&Error{Code: CodePolicyError, Message: "m", Sub: "s1"}},
		{"pong", `{"type":"pong","id":"5"}`, &Pong{ID: "5"}},
		{"refreshed", `{"type":"refreshed","id":"6","expires_at":"2025-01-02T03:04:05.123Z","expires_in":60}`,
			&Refreshed{ID: "6", ExpiresAt: at, ExpiresIn: time.Minute}},
		{"published", `{"type":"published","id":"7","pos":{"epoch":"e","offset":43}}`, &Published{ID: "7", Pos: ChannelPosition("e", 43)}},
		{"expiring", `{"type":"expiring","expires_at":"2025-01-02T03:04:05.123Z","expires_in":30}`,
			&Expiring{ExpiresAt: at, ExpiresIn: 30 * time.Second}},
		{"server frames nest as deep as a jsonb value may", `{"type":"message","sub":"s","pos":"e:1","channel":"c","data":` +
			strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`,
			&Message{Sub: "s", Pos: ChannelPosition("e", 1), Channel: "c", Data: raw(strings.Repeat("[", 1000) + strings.Repeat("]", 1000))}},
		{"server ids are not held to the client grammar", `{"type":"pong","id":"a b"}`, &Pong{ID: "a b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeServer([]byte(tt.in), 0)
			if err != nil {
				t.Fatalf("DecodeServer(%s): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodeServer(%s) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestDecodeServerErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		limit int
		code  Code
		field string
	}{
		{"client frame", `{"type":"subscribe","id":"1"}`, 0, CodeUnknownType, "type"},
		{"unknown type, which a client ignores", `{"type":"roster2"}`, 0, CodeUnknownType, "type"},
		{"join without sub", `{"type":"join"}`, 0, CodeBadFrame, "sub"},
		{"join without member", `{"type":"join","sub":"s","channel":"c"}`, 0, CodeBadFrame, "member"},
		{"join member without id", `{"type":"join","sub":"s","channel":"c","member":{"subject":"a"}}`, 0, CodeBadFrame, "member.id"},
		{"roster member not an object", `{"type":"roster","sub":"s","channel":"c","members":[1]}`, 0, CodeBadFrame, "members[0]"},
		{"roster without members", `{"type":"roster","sub":"s","channel":"c"}`, 0, CodeBadFrame, "members"},
		{"tracked without id", `{"type":"tracked","channel":"c","member":"m"}`, 0, CodeBadFrame, "id"},
		{"limit", `{"type":"pong","id":"1"}`, 5, CodeFrameTooLarge, ""},
		{"welcome without v", `{"type":"welcome","session":"s"}`, 0, CodeBadFrame, "v"},
		{"welcome v 0", `{"type":"welcome","v":0,"session":"s","limits":{"max_frame_bytes":1,"max_subscriptions":1}}`, 0, CodeBadFrame, "v"},
		{"welcome without limits", `{"type":"welcome","v":1,"session":"s"}`, 0, CodeBadFrame, "limits"},
		{"welcome limits incomplete", `{"type":"welcome","v":1,"session":"s","limits":{"max_frame_bytes":1}}`, 0, CodeBadFrame, "limits.max_subscriptions"},
		{"change without idx", `{"type":"change","sub":"s","pos":"1/1","op":"insert","table":"a.b"}`, 0, CodeBadFrame, "idx"},
		{"change idx 0", `{"type":"change","sub":"s","pos":"1/1","idx":0,"op":"insert","table":"a.b"}`, 0, CodeBadFrame, "idx"},
		{"error without status", `{"type":"error","code":"bad_frame"}`, 0, CodeBadFrame, "status"},
		{"error status out of range", `{"type":"error","code":"bad_frame","status":99}`, 0, CodeBadFrame, "status"},
		{"welcome bad limits", `{"type":"welcome","v":1,"session":"s","limits":{"max_frame_bytes":"big","max_subscriptions":1}}`, 0, CodeBadFrame, "limits.max_frame_bytes"},
		{"welcome limits not an object", `{"type":"welcome","v":1,"session":"s","limits":[]}`, 0, CodeBadFrame, "limits"},
		{"welcome bad time", `{"type":"welcome","v":1,"session":"s","expires_at":"tomorrow","limits":{"max_frame_bytes":1,"max_subscriptions":1}}`, 0, CodeBadFrame, "expires_at"},
		{"welcome time out of range", `{"type":"welcome","v":1,"session":"s","expires_at":"0000-01-01T00:00:00+01:00","limits":{"max_frame_bytes":1,"max_subscriptions":1}}`, 0, CodeBadFrame, "expires_at"},
		{"change without pos", `{"type":"change","sub":"s","idx":1,"op":"insert","table":"a.b"}`, 0, CodeBadFrame, "pos"},
		{"change with a channel pos", `{"type":"change","sub":"s","pos":"e:1","idx":1,"op":"insert","table":"a.b"}`, 0, CodeBadFrame, "pos"},
		{"change row not an object", `{"type":"change","sub":"s","pos":"1/1","idx":1,"op":"insert","table":"a.b","row":[1]}`, 0, CodeBadFrame, "row"},
		{"change old_key_only not a bool", `{"type":"change","sub":"s","pos":"1/1","idx":1,"op":"insert","table":"a.b","old_key_only":1}`, 0, CodeBadFrame, "old_key_only"},
		{"message without data", `{"type":"message","sub":"s","pos":"e:1","channel":"c"}`, 0, CodeBadFrame, "data"},
		{"resync without last", `{"type":"resync","sub":"s","reason":"lane_full"}`, 0, CodeBadFrame, "last"},
		{"error without code", `{"type":"error","status":400}`, 0, CodeBadFrame, "code"},
		{"pong without id", `{"type":"pong"}`, 0, CodeBadFrame, "id"},
		{"published without pos", `{"type":"published","id":"1"}`, 0, CodeBadFrame, "pos"},
		{"rows without rows", `{"type":"rows","sub":"s","progress":{"rows":0,"bytes":0,"pages":1}}`, 0, CodeBadFrame, "rows"},
		{"rows not an array", `{"type":"rows","sub":"s","rows":{},"progress":{}}`, 0, CodeBadFrame, "rows"},
		{"a row not an object", `{"type":"rows","sub":"s","rows":[{"id":1},2],"progress":{}}`, 0, CodeBadFrame, "rows[1].row"},
		{"rows without progress", `{"type":"rows","sub":"s","rows":[]}`, 0, CodeBadFrame, "progress"},
		{"rows progress not a count", `{"type":"rows","sub":"s","rows":[],"progress":{"rows":-1}}`, 0, CodeBadFrame, "progress.rows"},
		{"live without pos", `{"type":"live","sub":"s"}`, 0, CodeBadFrame, "pos"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := DecodeServer([]byte(tt.in), tt.limit)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("DecodeServer(%s) = %#v, %v; want an *Error", tt.in, f, err)
			}
			if e.Code != tt.code || e.Field != tt.field {
				t.Errorf("DecodeServer(%s) = code %q field %q, want %q %q (%v)", tt.in, e.Code, e.Field, tt.code, tt.field, e)
			}
		})
	}
}

func TestDecodePublishRequest(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *Publish
	}{
		{"channel and data", `{"channel":"rooms/1","data":{ "text" : "hi" }}`,
			&Publish{Channel: "rooms/1", Data: raw(`{"text":"hi"}`)}},
		{"every field", `{"type":"publish","id":"order-42","channel":"rooms/1","event":"chat","data":[1,` + "\r\n" + `2]}`,
			&Publish{ID: "order-42", Channel: "rooms/1", Event: "chat", Data: raw(`[1,2]`)}},
		{"null optionals", `{"id":null,"type":null,"event":null,"channel":"c","data":""}`,
			&Publish{Channel: "c", Data: raw(`""`)}},
		{"unknown fields are ignored", `{"channel":"c","data":1,"meta":{"a":[1]}}`, &Publish{Channel: "c", Data: raw(`1`)}},
		{"keys are case-sensitive, so Channel is an unknown field", `{"channel":"c","Channel":"other","data":1}`,
			&Publish{Channel: "c", Data: raw(`1`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodePublishRequest([]byte(tt.in))
			if err != nil {
				t.Fatalf("DecodePublishRequest(%s): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodePublishRequest(%s) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// TestDecodePublishRequestErrors: the HTTP body is held to a publish frame's rules, so a gateway
// that reads the body one way cannot be bypassed by a body Herald reads another way.
func TestDecodePublishRequestErrors(t *testing.T) {
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	tests := []struct {
		name, in  string
		field, id string
	}{
		{"duplicate channel", `{"channel":"allowed","channel":"secret","data":1}`, "channel", ""},
		{"duplicate channel echoes the id", `{"id":"p1","channel":"allowed","channel":"secret","data":1}`, "channel", "p1"},
		{"duplicate data", `{"channel":"c","data":1,"data":2}`, "data", ""},
		{"duplicate id", `{"id":"a","id":"b","channel":"c","data":1}`, "id", ""},
		{"keys are case-sensitive", `{"CHANNEL":"c","Data":1}`, "channel", ""},
		{"channel missing", `{"data":1}`, "channel", ""},
		{"channel not a string", `{"channel":1,"data":1}`, "channel", ""},
		{"channel empty", `{"channel":"","data":1}`, "channel", ""},
		{"data missing", `{"id":"p","channel":"c"}`, "data", "p"},
		{"data null", `{"channel":"c","data":null}`, "data", ""},
		{"event not a string", `{"channel":"c","event":1,"data":1}`, "event", ""},
		{"id with a space is not echoed", `{"id":"a b","channel":"c","data":1}`, "id", ""},
		{"id empty", `{"id":"","channel":"c","data":1}`, "id", ""},
		{"id too long", `{"id":"` + strings.Repeat("x", 65) + `","channel":"c","data":1}`, "id", ""},
		{"id a number", `{"id":7,"channel":"c","data":1}`, "id", ""},
		{"type of another frame", `{"type":"subscribe","id":"p","channel":"c","data":1}`, "type", "p"},
		{"not UTF-8 in data", "{\"channel\":\"c\",\"data\":\"\xff\"}", "", ""},
		{"not UTF-8 in a key", "{\"channel\":\"c\",\"data\":1,\"\xc3\":1}", "", ""},
		{"raw control character in data", "{\"channel\":\"c\",\"data\":\"a\nb\"}", "", ""},
		{"nesting too deep", `{"channel":"c","data":` + deep + `}`, "", ""},
		{"not an object", `[{"channel":"c","data":1}]`, "", ""},
		{"trailing data", `{"channel":"c","data":1} {"channel":"d","data":1}`, "", ""},
		{"empty", ``, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := DecodePublishRequest([]byte(tt.in))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("DecodePublishRequest(%q) = %+v, %v; want a bad_frame *Error", tt.in, f, err)
			}
			if e.Code != CodeBadFrame || e.Field != tt.field || e.ID != tt.id || e.Message == "" {
				t.Errorf("DecodePublishRequest(%q): got code %s field %q id %q (%q), want bad_frame field %q id %q",
					tt.in, e.Code, e.Field, e.ID, e.Message, tt.field, tt.id)
			}
		})
	}
}

// TestDecodePublishRequestMatchesDecode: a body read as a request and the same fields sent as a
// publish frame decode to the same publication.
func TestDecodePublishRequestMatchesDecode(t *testing.T) {
	for _, body := range []string{
		`"channel":"rooms/1","event":"chat","data":{"a": [1, 2.5e3, "\u00e9"]}`,
		`"channel":"caf\u00e9","data":"\ud800x"`,
		`"channel":"c","data":[` + "\n" + `]`,
	} {
		req, err := DecodePublishRequest([]byte(`{"id":"1",` + body + `}`))
		if err != nil {
			t.Fatalf("request {%s}: %v", body, err)
		}
		frame, err := Decode([]byte(`{"type":"publish","id":"1",`+body+`}`), 0)
		if err != nil {
			t.Fatalf("frame {%s}: %v", body, err)
		}
		if diff := cmp.Diff(frame, Frame(req)); diff != "" {
			t.Errorf("{%s}: frame and request differ (-frame +request):\n%s", body, diff)
		}
	}
}
