package channel

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	type want struct {
		anchor string
		depth  int
		exact  bool
	}
	tests := []struct {
		name   string
		glob   string
		event  string
		want   want
		reason Reason // "" for valid
		detail string
	}{
		{"exact", "chat/room1", "", want{"chat/room1", 2, true}, "", ""},
		{"exact one segment", "lobby", "", want{"lobby", 1, true}, "", ""},
		{"anything below", "docs/alice/**", "", want{"docs/alice", 2, false}, "", ""},
		{"one segment wildcard", "docs/*/inbox", "", want{"docs", 1, false}, "", ""},
		{"wildcard last", "docs/*", "", want{"docs", 1, false}, "", ""},
		{"two wildcards", "a/*/b/*", "", want{"a", 1, false}, "", ""},
		{"star then double star", "a/*/**", "", want{"a", 1, false}, "", ""},
		{"root double star", "**", "", want{"", 0, false}, "", ""},
		{"root star", "*", "", want{"", 0, false}, "", ""},
		{"root star then literal", "*/inbox", "", want{"", 0, false}, "", ""},
		{"event filter", "chat/room1", "mention", want{"chat/room1", 2, true}, "", ""},
		{"max depth with double star", deep(MaxDepth-1) + "/**", "", want{deep(MaxDepth - 1), MaxDepth - 1, false}, "", ""},
		{"max bytes", strings.Repeat("a", MaxNameBytes-3) + "/**", "", want{strings.Repeat("a", MaxNameBytes-3), 1, false}, "", ""},

		{"empty", "", "", want{}, ReasonBadPattern, "empty"},
		{"too long", strings.Repeat("a", MaxNameBytes) + "/*", "", want{}, ReasonBadPattern, "257 bytes"},
		{"too deep", deep(MaxDepth) + "/**", "", want{}, ReasonBadPattern, "more than 16 segments"},
		{"double star in the middle", "a/**/b", "", want{}, ReasonBadPattern, `segment 2 is "**", which may only end a pattern`},
		{"double star first of two", "**/a", "", want{}, ReasonBadPattern, `segment 1 is "**"`},
		{"two double stars", "a/**/**", "", want{}, ReasonBadPattern, `segment 2 is "**"`},
		{"partial wildcard", "room*", "", want{}, ReasonBadPattern, `segment 1 is "room*": a wildcard is a whole segment`},
		{"partial wildcard later", "a/b**", "", want{}, ReasonBadPattern, `segment 2 is "b**"`},
		{"triple star", "a/***", "", want{}, ReasonBadPattern, `segment 2 is "***"`},
		{"leading slash", "/a/**", "", want{}, ReasonBadPattern, "segment 1 is empty"},
		{"trailing slash", "a/*/", "", want{}, ReasonBadPattern, "segment 3 is empty"},
		{"double slash", "a//*", "", want{}, ReasonBadPattern, "segment 2 is empty"},
		{"dot segment", "a/*/..", "", want{}, ReasonBadPattern, `segment 3 is ".."`},
		{"bad byte", "a/*/b c", "", want{}, ReasonBadPattern, "byte 6 is ' '"},
		{"bad event", "chat/*", "a b", want{}, ReasonBadEvent, "byte 2 is ' '"},
		{"event with star", "chat/*", "user.*", want{}, ReasonBadEvent, "byte 6 is '*'"},
		{"long event", "chat", strings.Repeat("e", MaxEventBytes+1), want{}, ReasonBadEvent, "65 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePattern(tt.glob, tt.event)
			if tt.reason != "" {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("ParsePattern(%q, %q) = %v, want an *Error", tt.glob, tt.event, err)
				}
				if e.Reason != tt.reason {
					t.Errorf("reason %q, want %q", e.Reason, tt.reason)
				}
				if !strings.Contains(e.Detail, tt.detail) {
					t.Errorf("Detail = %q, want it to contain %q", e.Detail, tt.detail)
				}
				if !p.IsZero() {
					t.Errorf("refused pattern is %+v, want the zero Pattern", p)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePattern(%q, %q): %v", tt.glob, tt.event, err)
			}
			got := want{p.Anchor(), int(p.depth), p.IsExact()}
			if got != tt.want {
				t.Errorf("anchor, depth, exact = %+v, want %+v", got, tt.want)
			}
			if p.String() != tt.glob || p.Event() != tt.event {
				t.Errorf("String(), Event() = %q, %q, want %q, %q", p.String(), p.Event(), tt.glob, tt.event)
			}
		})
	}
}

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		glob, filter string
		name, event  string
		want         bool
	}{
		{"chat/room1", "", "chat/room1", "", true},
		{"chat/room1", "", "chat/room1", "any", true},
		{"chat/room1", "", "chat/room10", "", false},
		{"chat/room1", "", "chat/room", "", false},
		{"chat/room1", "", "chat/room1/x", "", false},
		{"chat/room1", "", "chat", "", false},
		{"chat/room1", "", "Chat/room1", "", false},

		{"docs/alice/**", "", "docs/alice/inbox", "", true},
		{"docs/alice/**", "", "docs/alice/a/b/c", "", true},
		{"docs/alice/**", "", "docs/alice", "", false},
		{"docs/alice/**", "", "docs/alicex/inbox", "", false},
		{"docs/alice/**", "", "docs/alic/inbox", "", false},
		{"docs/alice/**", "", "docs/bob/inbox", "", false},
		{"docs/alice/**", "", "docs", "", false},
		{"docs/alice/**", "", "xdocs/alice/inbox", "", false},

		{"docs/*/inbox", "", "docs/alice/inbox", "", true},
		{"docs/*/inbox", "", "docs/inbox", "", false},
		{"docs/*/inbox", "", "docs/a/b/inbox", "", false},
		{"docs/*/inbox", "", "docs/alice/inbox/x", "", false},
		{"docs/*/inbox", "", "docs/alice/outbox", "", false},
		{"docs/*/inbox", "", "docs/alice/inboxes", "", false},
		{"docs/*/inbox", "", "docsx/alice/inbox", "", false},

		{"docs/*", "", "docs/a", "", true},
		{"docs/*", "", "docs", "", false},
		{"docs/*", "", "docs/a/b", "", false},

		{"a/*/**", "", "a/b/c", "", true},
		{"a/*/**", "", "a/b/c/d", "", true},
		{"a/*/**", "", "a/b", "", false},
		{"a/*/b/*", "", "a/x/b/y", "", true},
		{"a/*/b/*", "", "a/x/b", "", false},
		{"a/*/b/*", "", "a/x/c/y", "", false},
		{"a/*/b/*", "", "a/x/b/y/z", "", false},

		{"**", "", "a", "", true},
		{"**", "", "a/b/c", "", true},
		{"*", "", "a", "", true},
		{"*", "", "a/b", "", false},
		{"*/inbox", "", "x/inbox", "", true},
		{"*/inbox", "", "inbox", "", false},
		{"*/inbox", "", "a/b/inbox", "", false},

		{"chat/room1", "mention", "chat/room1", "mention", true},
		{"chat/room1", "mention", "chat/room1", "", false},
		{"chat/room1", "mention", "chat/room1", "mentions", false},
		{"chat/room1", "mention", "chat/room1", "Mention", false},
		{"chat/**", "mention", "chat/room1", "mention", true},
		{"chat/**", "mention", "chat/room1", "chat", false},
	}
	for _, tt := range tests {
		name := tt.glob + "|" + tt.filter + " vs " + tt.name + "|" + tt.event
		t.Run(name, func(t *testing.T) {
			p := mustPattern(t, tt.glob, tt.filter)
			if got := p.Match(tt.name, tt.event); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
			if got := bruteMatch(tt.glob, tt.filter, tt.name, tt.event); got != tt.want {
				t.Errorf("the reference matcher says %v, want %v: the test table is wrong", got, tt.want)
			}
		})
	}
	var zero Pattern
	if zero.Match("a", "") {
		t.Error("the zero Pattern matched")
	}
	if mustPattern(t, "**", "").Match("", "") {
		t.Error(`"**" matched the empty name`)
	}
}
