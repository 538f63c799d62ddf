package stream

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

func TestPositionTextRoundTrip(t *testing.T) {
	tests := []struct {
		text string
		want Position
	}{
		{"16/B374D848", TablePosition(0x16B374D848, 0)},
		{"16/B374D848.3", TablePosition(0x16B374D848, 3)},
		{"0/1", TablePosition(1, 0)},
		{"FFFFFFFF/FFFFFFFF.4294967295", TablePosition(^change.LSN(0), 1<<32-1)},
		{"k7Hq2x:42", ChannelPosition("k7Hq2x", 42)},
		{"e:0", ChannelPosition("e", 0)},
		{"a.b~c-d_e:18446744073709551615", ChannelPosition("a.b~c-d_e", 1<<64-1)},
		{strings.Repeat("z", 64) + ":1", ChannelPosition(strings.Repeat("z", 64), 1)},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got, err := ParsePosition(tt.text)
			if err != nil {
				t.Fatalf("ParsePosition(%q): %v", tt.text, err)
			}
			if got != tt.want {
				t.Fatalf("ParsePosition(%q) = %+v, want %+v", tt.text, got, tt.want)
			}
			if s := got.String(); s != tt.text {
				t.Errorf("String() = %q, want %q", s, tt.text)
			}
			b, _ := got.MarshalText()
			var back Position
			if err := back.UnmarshalText(b); err != nil || back != got {
				t.Errorf("text round trip: %+v, %v", back, err)
			}
		})
	}
	if got, _ := ParsePosition("16/b374d848.3"); got.String() != "16/B374D848.3" {
		t.Errorf("lowercase hex prints as %q, want upper case", got.String())
	}
}

func TestParsePositionRejects(t *testing.T) {
	for _, bad := range []string{
		"", "0/0", "0/0.1", "1/2.", "1/2.0", "1/2.01", "1/2.-1", "1/2.+1", "1/2.4294967296", "1/2.x", "1/2.3.4",
		"/1", "1/", "1/2/3", "g/1", "123456789/1", " 1/2", "1/2 ",
		"e:", ":1", "e:01", "e:-1", "e:+1", "e:1.5", "e:1e3", "a b:1", "é:1", "e:18446744073709551616",
		strings.Repeat("z", 65) + ":1", "e", "16B374D848", "e:1:2",
	} {
		if p, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) = %+v, want an error", bad, p)
		} else if !errors.Is(err, errPositionSyntax) {
			t.Errorf("ParsePosition(%q) error %v does not wrap errPositionSyntax", bad, err)
		}
	}
}

func TestPositionJSON(t *testing.T) {
	type holder struct {
		P Position `json:"p"`
	}
	tests := []struct {
		p    Position
		json string
	}{
		{TablePosition(0x16B374D848, 0), `{"p":"16/B374D848"}`},
		{TablePosition(0x16B374D848, 2), `{"p":"16/B374D848.2"}`},
		{ChannelPosition("k7", 42), `{"p":{"epoch":"k7","offset":42}}`},
		{Position{}, `{"p":null}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(holder{tt.p})
		if err != nil || string(b) != tt.json {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tt.p, b, err, tt.json)
		}
		var back holder
		if err := json.Unmarshal(b, &back); err != nil || back.P != tt.p {
			t.Errorf("Unmarshal(%s) = %+v, %v", b, back.P, err)
		}
	}
	// A channel position's text form is accepted as a string too.
	var h holder
	if err := json.Unmarshal([]byte(`{"p":"k7:42"}`), &h); err != nil || h.P != ChannelPosition("k7", 42) {
		t.Errorf("text channel position: %+v, %v", h.P, err)
	}
	for _, bad := range []string{`{"p":1}`, `{"p":"x"}`, `{"p":{"epoch":"k7"}}`, `{"p":{"epoch":"","offset":1}}`, `{"p":[]}`} {
		if err := json.Unmarshal([]byte(bad), &h); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func TestPositionKinds(t *testing.T) {
	tests := []struct {
		p                    Position
		zero, table, channel bool
	}{
		{Position{}, true, false, false},
		{TablePosition(1, 0), false, true, false},
		{ChannelPosition("e", 0), false, false, true},
	}
	for _, tt := range tests {
		if tt.p.IsZero() != tt.zero || tt.p.IsTable() != tt.table || tt.p.IsChannel() != tt.channel {
			t.Errorf("%+v: IsZero %v IsTable %v IsChannel %v", tt.p, tt.p.IsZero(), tt.p.IsTable(), tt.p.IsChannel())
		}
	}
	if s := (Position{}).String(); s != "" {
		t.Errorf("zero String() = %q", s)
	}
}
