package change

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

func TestLSNRoundTrip(t *testing.T) {
	tests := []struct {
		text string
		want LSN
	}{
		{"0/0", 0},
		{"16/B374D848", 0x16B374D848},
		{"FFFFFFFF/FFFFFFFF", ^LSN(0)},
		{"0/1", 1},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got, err := ParseLSN(tt.text)
			if err != nil {
				t.Fatalf("ParseLSN(%q): %v", tt.text, err)
			}
			if got != tt.want {
				t.Fatalf("ParseLSN(%q) = %d, want %d", tt.text, got, tt.want)
			}
			if s := got.String(); s != tt.text {
				t.Fatalf("String() = %q, want %q", s, tt.text)
			}
		})
	}
}

func TestParseLSNRejects(t *testing.T) {
	for _, bad := range []string{"", "0", "/0", "0/", "g/0", "0/-1", "123456789/0", "1/2/3"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q) succeeded, want an error", bad)
		}
	}
}

func TestRowJSONKeepsColumnOrder(t *testing.T) {
	r := Row{{"z", json.RawMessage(`1`)}, {"a", json.RawMessage(`"x"`)}, {"m", nil}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"z":1,"a":"x","m":null}`; got != want {
		t.Fatalf("Marshal = %s, want %s", got, want)
	}
	var back Row
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 3 || back[0].Name != "z" || back[2].Name != "m" || string(back[2].Value) != "null" {
		t.Fatalf("Unmarshal = %+v", back)
	}
	if v, ok := back.Get("a"); !ok || string(v) != `"x"` {
		t.Fatalf(`Get("a") = %s, %v`, v, ok)
	}
	if _, ok := back.Get("missing"); ok {
		t.Fatal(`Get("missing") reported present`)
	}
}

func TestNilRowIsNull(t *testing.T) {
	b, err := json.Marshal(Event{Table: "public.t", Op: Delete})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if string(m["after"]) != "null" {
		t.Fatalf("after = %s, want null", m["after"])
	}
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"q\"b\\", `"q\"b\\"`},
		{"\n\r\t\x00\x1f", `"\n\r\t\u0000\u001f"`},
		{"é✓", `"é✓"`},
		{"bad\xffbyte", `"bad\ufffdbyte"`},
		{"\u2028", `"\u2028"`},
	}
	for _, tt := range tests {
		got := string(AppendJSONString(nil, tt.in))
		if got != tt.want {
			t.Errorf("AppendJSONString(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("AppendJSONString(%q) = %s is not valid JSON", tt.in, got)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("hello")
	f.Add("\xff\x00\"")
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("AppendJSONString(%q) = %s: not valid JSON: %v", s, out, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("round trip of %q gave %q", s, back)
		}
	})
}

func TestEventAppendJSONMatchesEncodingJSON(t *testing.T) {
	events := []Event{
		{Table: "public.items", Op: Insert, After: Row{{"id", json.RawMessage(`1`)}, {"b", json.RawMessage(`"x\"y"`)}},
			LSN: 0x16B374D848, TxID: 7, CommitTime: time.Date(2024, 1, 6, 8, 30, 0, 123456000, time.UTC), Tenant: "acme", WriteTag: "w1"},
		{Table: "public.items", Op: Update, Before: Row{{"id", json.RawMessage(`1`)}}, BeforeKeyOnly: true,
			After: Row{{"id", json.RawMessage(`1`)}}, Omitted: []string{"body", "blob"}, LSN: 1},
		{Table: "s.t", Op: Truncate},
		{Op: Message, Prefix: "app", Content: "hello\n", LSN: 0xA},
	}
	for i, e := range events {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got := e.AppendJSON(nil)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("event %d: AppendJSON gave invalid JSON %s: %v", i, got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("event %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// TestEventJSONOmitsWhatItDoesNotHave: a message sent outside any transaction has no table, no
// transaction id and no commit time. Neither encoder writes them as "", 0 or year 1.
func TestEventJSONOmitsWhatItDoesNotHave(t *testing.T) {
	e := Event{Op: Message, Prefix: "app", Content: "hi", LSN: 0xA}
	want := `{"op":"message","before":null,"after":null,"lsn":"0/A","prefix":"app","content":"hi"}`
	if got := string(e.AppendJSON(nil)); got != want {
		t.Errorf("AppendJSON:\n got %s\nwant %s", got, want)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("json.Marshal:\n got %s\nwant %s", b, want)
	}
}

func BenchmarkEventAppendJSON(b *testing.B) {
	e := Event{Table: "public.items", Op: Update,
		After: Row{{"id", json.RawMessage(`12345`)}, {"org_id", json.RawMessage(`"acme"`)}, {"body", json.RawMessage(`"0123456789012345678901234567890123456789012345678901234567890123"`)}, {"n", json.RawMessage(`7`)}},
		LSN:   0x16B374D848, TxID: 7, CommitTime: time.Now()}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = e.AppendJSON(buf[:0])
	}
}
