package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/channel"
)

func TestChannelInterest(t *testing.T) {
	for _, tc := range []struct{ glob, owner, token string }{
		{"a", "c:a", "x:a"},
		{"a/b", "c:a", "x:a/b"},
		{"docs/alice/inbox", "c:docs", "x:docs/alice/inbox"},
		{"a:b/c", "c:a:b", "x:a:b/c"},
		{"a/*", "c:a", "p:a"},
		{"a/**", "c:a", "p:a"},
		{"a/b/*", "c:a", "p:a/b"},
		{"a/*/c", "c:a", "p:a"},
		{"a/b/**", "c:a", "p:a/b"},
		{"*", "c:", "p:"},
		{"**", "c:", "p:"},
		{"*/inbox", "c:", "p:"},
		{"*/b/**", "c:", "p:"},
	} {
		t.Run(tc.glob, func(t *testing.T) {
			p, err := channel.ParsePattern(tc.glob, "")
			if err != nil {
				t.Fatal(err)
			}
			owner, token := ChannelInterest(p)
			if owner != tc.owner || token != tc.token {
				t.Fatalf("ChannelInterest(%q) = %q, %q; want %q, %q", tc.glob, owner, token, tc.owner, tc.token)
			}
		})
	}
}

func TestMessageInterest(t *testing.T) {
	for name, want := range map[string][2]ownerTokens{
		"a":     {{"c:", []string{"p:"}}, {"c:a", []string{"x:a"}}},
		"a/b":   {{"c:", []string{"p:"}}, {"c:a", []string{"p:a", "x:a/b"}}},
		"a/b/c": {{"c:", []string{"p:"}}, {"c:a", []string{"p:a", "p:a/b", "x:a/b/c"}}},
	} {
		if diff := cmp.Diff(want, messageInterest(name), cmp.AllowUnexported(ownerTokens{})); diff != "" {
			t.Errorf("messageInterest(%q) (-want +got):\n%s", name, diff)
		}
	}
}

func TestTableOwner(t *testing.T) {
	if got := TableOwner("public.orders"); got != "t:public.orders" {
		t.Fatalf(`TableOwner("public.orders") = %q, want "t:public.orders"`, got)
	}
}

// TestInterestCoversMatches checks, over every name of depth 1 to 3 and every pattern of depth
// 1 to 4 on a small alphabet, that a pattern matching a name is filed under an (owner, token)
// the name's publication looks up, and that an exact subscription is looked up by no other name:
// so a publication reaches every node with a subscription it matches, and only the pattern
// subscriptions' nodes get more than they match.
func TestInterestCoversMatches(t *testing.T) {
	segs := []string{"a", "b", "ab"}
	var names []string
	for depth := 1; depth <= 3; depth++ {
		names = append(names, words(segs, depth)...)
	}
	var globs []string
	for depth := 1; depth <= 4; depth++ {
		for _, w := range words(append(segs, "*"), depth) {
			globs = append(globs, w)
			if depth < 4 {
				globs = append(globs, w+"/**")
			}
		}
	}
	globs = append(globs, "**")
	matched := 0
	for _, glob := range globs {
		p, err := channel.ParsePattern(glob, "")
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", glob, err)
		}
		owner, token := ChannelInterest(p)
		for _, name := range names {
			looked := false
			for _, ot := range messageInterest(name) {
				if ot.owner == owner && contains(ot.tokens, token) {
					looked = true
				}
			}
			if p.Match(name, "") {
				matched++
				if !looked {
					t.Errorf("%q matches %q, but a publication to %q does not look up %q under %q: %v", glob, name, name, token, owner, messageInterest(name))
				}
			}
			if p.IsExact() && looked != (glob == name) {
				t.Errorf("the exact subscription %q (%q under %q) is looked up by a publication to %q: %v", glob, token, owner, name, looked)
			}
		}
	}
	if matched < len(names) {
		t.Fatalf("only %d (pattern, name) pairs matched: the generator is broken", matched)
	}
}

// words returns every path of depth segments from segs.
func words(segs []string, depth int) []string {
	out := []string{""}
	for range depth {
		var next []string
		for _, w := range out {
			for _, s := range segs {
				if w == "" {
					next = append(next, s)
				} else {
					next = append(next, w+"/"+s)
				}
			}
		}
		out = next
	}
	return out
}

func TestFirstSegment(t *testing.T) {
	for in, want := range map[string]string{"": "", "a": "a", "a/b": "a", "ab/c/d": "ab"} {
		if got := firstSegment(in); got != want {
			t.Errorf("firstSegment(%q) = %q, want %q", in, got, want)
		}
	}
}
