package channel

import (
	"errors"
	"strings"
	"testing"
)

// FuzzPattern checks that ParsePattern never panics, refuses only with an *Error of a pattern
// or event reason, and that what it accepts prints back to itself, anchors at a prefix of
// itself, matches a name built from it, and agrees with the reference matcher on any valid name.
func FuzzPattern(f *testing.F) {
	for _, s := range [][3]string{
		{"chat/room1", "", "chat/room1"},
		{"docs/alice/**", "", "docs/alice/inbox"},
		{"docs/*/inbox", "mention", "docs/bob/inbox"},
		{"**", "", "a/b/c"},
		{"*/inbox", "x", "a/inbox"},
		{"a/*/b/*", "", "a/x/b/y/z"},
		{"a/**/b", "", "a/b"},
		{"room*", "", "room1"},
		{"a//b", "", "a"},
		{"a/./*", "", "a/./b"},
		{"", "", ""},
		{"a/*", "a b", "a/b"},
		{"\xff/*", "", "\xff/a"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, glob, event, name string) {
		p, err := ParsePattern(glob, event)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Reason != ReasonBadPattern && e.Reason != ReasonBadEvent) {
				t.Fatalf("ParsePattern(%q, %q) = %v, want an *Error of a pattern or event reason", glob, event, err)
			}
			if !p.IsZero() {
				t.Fatalf("refused pattern is %+v, want zero", p)
			}
			return
		}
		q, err := ParsePattern(p.String(), p.Event())
		if err != nil || q != p {
			t.Fatalf("ParsePattern(%q, %q) = %+v, %v; want %+v", p.String(), p.Event(), q, err, p)
		}
		if a := p.Anchor(); !strings.HasPrefix(glob, a) || (a != "" && CheckName(a) != nil) {
			t.Fatalf("Anchor() = %q: not a valid name prefixing %q", a, glob)
		}
		if p.IsExact() != (CheckName(glob) == nil) {
			t.Fatalf("IsExact() = %v for %q, but CheckName says %v", p.IsExact(), glob, CheckName(glob))
		}

		// A name made from the pattern, each wildcard taking one segment, matches it.
		segs := strings.Split(glob, "/")
		for i, s := range segs {
			if s == "*" || s == "**" {
				segs[i] = "x"
			}
		}
		inst := strings.Join(segs, "/")
		if err := CheckName(inst); err != nil {
			t.Fatalf("name %q built from %q: %v", inst, glob, err)
		}
		if !p.Match(inst, event) {
			t.Fatalf("%q does not match %q built from it", glob, inst)
		}

		if CheckName(name) == nil {
			for _, ev := range []string{"", event, "other"} {
				if got, want := p.Match(name, ev), bruteMatch(glob, event, name, ev); got != want {
					t.Fatalf("Match(%q, %q) of %q %q = %v, reference matcher says %v", name, ev, glob, event, got, want)
				}
			}
		}
	})
}

// FuzzName checks that CheckName never panics, and that a valid name is exactly an exact
// pattern: it parses as one and matches itself.
func FuzzName(f *testing.F) {
	for _, s := range []string{
		"a", "rooms/1", "docs/alice/inbox", "AZaz09-_.~:@=", "a/.b/..c", "", "/", "a/", "a//b",
		".", "..", "a/*", "**", "a b", "caf\u00e9", "{x}", strings.Repeat("a/", 17) + "a",
		strings.Repeat("a", 256),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckName(s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Reason != ReasonBadName || e.Detail == "" {
				t.Fatalf("CheckName(%q) = %v, want an *Error of reason %q with a detail", s, err, ReasonBadName)
			}
			if !strings.Contains(s, "*") {
				if _, perr := ParsePattern(s, ""); perr == nil {
					t.Fatalf("%q is not a name but parses as a pattern without wildcards", s)
				}
			}
			return
		}
		if len(s) > MaxNameBytes || strings.Count(s, "/") >= MaxDepth {
			t.Fatalf("CheckName accepted %q beyond the limits", s)
		}
		p, perr := ParsePattern(s, "")
		if perr != nil || !p.IsExact() || p.Anchor() != s || !p.Match(s, "any") {
			t.Fatalf("name %q as a pattern: %+v, %v; want an exact pattern matching it", s, p, perr)
		}
	})
}
