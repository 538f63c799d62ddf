package bench

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/wire"
)

// TestSentAtAgreesWithDecode checks the byte search against the full decoder, on frames the
// server's own encoder writes.
func TestSentAtAgreesWithDecode(t *testing.T) {
	const ns = int64(1_712_345_678_901_234_567)
	row := func(cols ...string) change.Row {
		var r change.Row
		for i := 0; i+1 < len(cols); i += 2 {
			r = append(r, change.Column{Name: cols[i], Value: json.RawMessage(cols[i+1])})
		}
		return r
	}
	payload := strconv.Quote(strconv.FormatInt(ns, 10))
	tests := []struct {
		name   string
		frame  wire.Frame
		want   int64
		wantOK bool
	}{
		{"message", &wire.Message{Sub: "b", Pos: wire.ChannelPosition("e1", 3), Channel: "bench/load",
			Data: channelData(nil, ns, 42)}, ns, true},
		{"message with an event", &wire.Message{Sub: "b", Pos: wire.ChannelPosition("e1", 3), Channel: "bench/load", Event: "x",
			Data: channelData(nil, 5, 0)}, 5, true},
		{"message of someone else", &wire.Message{Sub: "b", Pos: wire.ChannelPosition("e1", 3), Channel: "c",
			Data: json.RawMessage(`{"text":"\"data\":{\"t\":1}"}`)}, 0, false},
		{"insert", &wire.Change{Sub: "b", LSN: 0x16B374D848, Idx: 1, Op: wire.OpInsert, Table: "public.bench_items",
			Row: row("id", "7", "org_id", `"org_1"`, "payload", payload, "sent_at", `"2024-04-05T19:34:38.901Z"`)}, ns, true},
		{"update with the old row", &wire.Change{Sub: "b", LSN: 0x16B374D848, Idx: 2, Op: wire.OpUpdate, Table: "public.bench_items",
			Row: row("id", "7", "payload", `"99"`), Old: row("id", "7", "payload", payload)}, 99, true},
		{"a value that mentions the mark", &wire.Change{Sub: "b", LSN: 1, Idx: 1, Op: wire.OpInsert, Table: "public.t",
			Row: row("note", `"\"payload\":\"12\""`, "payload", `"34"`)}, 34, true},
		{"no payload", &wire.Change{Sub: "b", LSN: 1, Idx: 1, Op: wire.OpInsert, Table: "public.items",
			Row: row("id", "1", "title", `"x"`)}, 0, false},
		{"payload not a number", &wire.Change{Sub: "b", LSN: 1, Idx: 1, Op: wire.OpInsert, Table: "public.t",
			Row: row("payload", `"12ab"`)}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := wire.AppendFrame(nil, tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			if kindOf(b) != kindData {
				t.Errorf("kindOf(%s) = %v, want data", b, kindOf(b))
			}
			got, ok := sentAt(b)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("sentAt(%s) = %d, %v; want %d, %v", b, got, ok, tt.want, tt.wantOK)
			}
			// The full decoder's reading of the same frame.
			f, err := wire.DecodeServer(b, 0)
			if err != nil {
				t.Fatal(err)
			}
			decoded, dok := decodedSentAt(t, f)
			if decoded != got || dok != ok {
				t.Errorf("decoder reads %d, %v; byte search %d, %v", decoded, dok, got, ok)
			}
		})
	}
}

// decodedSentAt reads the send time from a decoded frame, the slow and sure way.
func decodedSentAt(t *testing.T, f wire.Frame) (int64, bool) {
	switch f := f.(type) {
	case *wire.Message:
		var d struct {
			T *int64 `json:"t"`
		}
		if json.Unmarshal(f.Data, &d) != nil || d.T == nil {
			return 0, false
		}
		return *d.T, true
	case *wire.Change:
		for _, c := range f.Row {
			if c.Name == "payload" {
				var s string
				if json.Unmarshal(c.Value, &s) != nil {
					return 0, false
				}
				n, err := strconv.ParseInt(s, 10, 64)
				return n, err == nil
			}
		}
	default:
		t.Fatalf("frame %T", f)
	}
	return 0, false
}

func TestKindAndLost(t *testing.T) {
	resync := wire.AppendResync(nil, &wire.Resync{Sub: "b", First: wire.ChannelPosition("e", 2), Last: wire.ChannelPosition("e", 9), Lost: 8, Reason: wire.ResyncLaneFull})
	noLost := wire.AppendResync(nil, &wire.Resync{Sub: "b", Last: wire.ChannelPosition("e", 9), Reason: wire.ResyncStreamReset})
	errFrame, _ := wire.AppendFrame(nil, &wire.Error{Code: wire.CodePolicyError, Sub: "b", Message: "m"})
	pong, _ := wire.AppendFrame(nil, &wire.Pong{ID: "1"})
	tests := []struct {
		name  string
		frame []byte
		kind  kind
		lost  int64
	}{
		{"resync", resync, kindResync, 8},
		{"resync without lost", noLost, kindResync, 0},
		{"error", errFrame, kindError, 0},
		{"pong", pong, kindOther, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if k := kindOf(tt.frame); k != tt.kind {
				t.Errorf("kindOf(%s) = %d, want %d", tt.frame, k, tt.kind)
			}
			if tt.kind == kindResync {
				if n := lostOf(tt.frame); n != tt.lost {
					t.Errorf("lostOf(%s) = %d, want %d", tt.frame, n, tt.lost)
				}
			}
		})
	}
}

func TestIntBefore(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"123,", 123, true},
		{"0}", 0, true},
		{"1712345678901234567,", 1712345678901234567, true},
		{"9223372036854775807}", 9223372036854775807, true},
		{"9223372036854775808}", 0, false}, // past int64
		{"123", 0, false},                  // no end
		{"12a", 0, false},                  // the wrong end
		{",", 0, false},
		{"", 0, false},
		{"-1,", 0, false},
	}
	for _, tt := range tests {
		got, ok := intBefore([]byte(tt.in), ',', '}')
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("intBefore(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func BenchmarkCountFrame(b *testing.B) {
	msg, _ := wire.AppendFrame(nil, &wire.Message{Sub: "b", Pos: wire.ChannelPosition("0123456789abcdef", 12345), Channel: "bench/load",
		Data: channelData(nil, 1_712_345_678_901_234_567, 12345)})
	var t tally
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		t.frame(msg, timeNow)
	}
}

func TestReasonOf(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"resync","sub":"s","reason":"upstream_gap","lost":3}`: "upstream_gap",
		`{"type":"resync","sub":"s"}`:                                  "",
		`{"type":"resync","reason":"lane_full`:                         "",
	} {
		if got := reasonOf([]byte(in)); got != want {
			t.Errorf("reasonOf(%s) = %q, want %q", in, got, want)
		}
	}
}
