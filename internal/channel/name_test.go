package channel

import (
	"errors"
	"strings"
	"testing"
)

// deep returns a name of n segments "s1/s2/...".
func deep(n int) string {
	segs := make([]string, n)
	for i := range segs {
		segs[i] = "s"
	}
	return strings.Join(segs, "/")
}

func TestCheckName(t *testing.T) {
	long := strings.Repeat("a", MaxNameBytes)
	tests := []struct {
		name   string
		in     string
		detail string // "" for valid; else a substring of the error's Detail
	}{
		{"one segment", "a", ""},
		{"two segments", "rooms/1", ""},
		{"three segments", "docs/alice/inbox", ""},
		{"every allowed character", "AZaz09-_.~:@=/x", ""},
		{"dots inside a segment", "a.b/.hidden/...", ""},
		{"max depth", deep(MaxDepth), ""},
		{"max bytes", long, ""},
		{"case matters but is allowed", "Docs/ALICE", ""},

		{"empty", "", "empty"},
		{"too long", long + "a", "256 bytes"},
		{"too deep", deep(MaxDepth + 1), "more than 16 segments"},
		{"leading slash", "/a", "segment 1 is empty"},
		{"trailing slash", "a/", "segment 2 is empty"},
		{"double slash", "a//b", "segment 2 is empty"},
		{"only a slash", "/", "segment 1 is empty"},
		{"dot segment", "a/./b", `segment 2 is "."`},
		{"dot-dot segment", "..", `segment 1 is ".."`},
		{"star", "a/*", "wildcards belong in subscription patterns"},
		{"double star", "**", "wildcards belong in subscription patterns"},
		{"star inside a segment", "room*", "byte 5 is '*'"},
		{"space", "a b", "byte 2 is ' '"},
		{"percent", "a%20", "byte 2 is '%'"},
		{"brace", "{tag}", "byte 1 is '{'"},
		{"pipe", "a|b", "byte 2 is '|'"},
		{"comma", "a,b", "byte 2 is ','"},
		{"plus", "a+b", "byte 2 is '+'"},
		{"question mark", "a?b", "byte 2 is '?'"},
		{"hash", "a#b", "byte 2 is '#'"},
		{"backslash", `a\b`, `byte 2 is '\\'`},
		{"NUL", "a\x00", "byte 2 is 0x00"},
		{"newline", "a\n", "byte 2 is 0x0A"},
		{"non-ASCII", "caf\u00e9", "byte 4 is 0xC3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckName(tt.in)
			if tt.detail == "" {
				if err != nil {
					t.Fatalf("CheckName(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("CheckName(%q) = %v, want an *Error", tt.in, err)
			}
			if e.Reason != ReasonBadName || !errors.Is(err, ErrBadName) || errors.Is(err, ErrBadPattern) {
				t.Errorf("reason %q, want %q (and errors.Is ErrBadName only)", e.Reason, ReasonBadName)
			}
			if !strings.Contains(e.Detail, tt.detail) {
				t.Errorf("Detail = %q, want it to contain %q", e.Detail, tt.detail)
			}
			if e.Fix == "" {
				t.Error("Fix is empty")
			}
		})
	}
}

func TestCheckEvent(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		detail string
	}{
		{"word", "chat", ""},
		{"dotted", "user.joined", ""},
		{"every allowed character", "AZaz09-_.~:@=", ""},
		{"max bytes", strings.Repeat("e", MaxEventBytes), ""},
		{"empty", "", "empty"},
		{"too long", strings.Repeat("e", MaxEventBytes+1), "65 bytes"},
		{"slash", "a/b", "byte 2 is '/'"},
		{"star is kept for event patterns", "user.*", "byte 6 is '*'"},
		{"space", "a b", "byte 2 is ' '"},
		{"control", "\t", "byte 1 is 0x09"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckEvent(tt.in)
			if tt.detail == "" {
				if err != nil {
					t.Fatalf("CheckEvent(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Reason != ReasonBadEvent || !errors.Is(err, ErrBadEvent) {
				t.Fatalf("CheckEvent(%q) = %v, want an *Error of reason %q", tt.in, err, ReasonBadEvent)
			}
			if !strings.Contains(e.Detail, tt.detail) {
				t.Errorf("Detail = %q, want it to contain %q", e.Detail, tt.detail)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	long := strings.Repeat("x", 200) + "*"
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"name", CheckName("a//b"),
			`channel name "a//b": segment 2 is empty: separate segments with one "/", with none at either end (fix: ` + nameFix + `)`},
		{"event", CheckEvent("a b"),
			`event name "a b": byte 2 is ' ', which is not allowed (fix: ` + eventFix + `)`},
		{"long value is cut", CheckName(long),
			`channel name "` + strings.Repeat("x", maxErrorValue) + `...": byte 201 is '*': a publication names one channel, and wildcards belong in subscription patterns (fix: ` + nameFix + `)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error()\n got %s\nwant %s", got, tt.want)
			}
		})
	}
	if got := len(Reasons()); got != 3 {
		t.Errorf("Reasons() has %d, want 3", got)
	}
}
