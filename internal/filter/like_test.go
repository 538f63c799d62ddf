package filter

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLike(t *testing.T) {
	for _, tc := range []struct {
		pattern, text string
		want          bool
	}{
		{"", "", true},
		{"", "a", false},
		{"abc", "abc", true},
		{"abc", "abcd", false},
		{"abc", "ab", false},
		{"ABC", "abc", false}, // case-sensitive
		{"%", "", true},
		{"%", "anything", true},
		{"%%", "", true},
		{"a%", "abc", true},
		{"a%", "ba", false},
		{"%c", "abc", true},
		{"%c", "cb", false},
		{"%b%", "abc", true},
		{"%b%", "ac", false},
		{"a%c", "ac", true},
		{"a%c", "abbbc", true},
		{"a%a", "a", false}, // the prefix and suffix may not overlap
		{"a%a", "aa", true},
		{"%a%b%c%", "xxaxxbxxcxx", true},
		{"%a%b%c%", "xxcxxbxxaxx", false},
		{"%ab%ab%", "abab", true},
		{"%ab%ab%", "aba", false},
		{"_", "a", true},
		{"_", "", false},
		{"_", "ab", false},
		{"_", "é", true}, // one character, not one byte
		{"__", "é", false},
		{"_b_", "abc", true},
		{"a_%", "a", false},
		{"a_%", "ab", true},
		{"%_", "", false},
		{"%_", "x", true},
		{"%_%_%", "x", false},
		{"%_%_%", "xy", true},
		{"_%_", "ab", true},
		{"%a_c%", "xxabcxx", true},
		{"%a_c%", "xxacxx", false},
		{`a\%`, "a%", true},
		{`a\%`, "ab", false},
		{`a\_`, "a_", true},
		{`a\_`, "ab", false},
		{`a\\`, `a\`, true},
		{`\a`, "a", true}, // an escaped ordinary character is itself
		{`%\%%`, "100%", true},
		{`%\%%`, "100", false},
		{"Zo_", "Zoë", true},
		{"%ë", "Zoë", true},
		{"日_語", "日本語", true},
		{"%本%", "日本語", true},
		{"AB%", "AB   ", true},
		{"AB", "AB   ", false},
	} {
		lm, ok := compileLike(tc.pattern)
		if !ok {
			t.Fatalf("compileLike(%q) refused", tc.pattern)
		}
		if got := lm.match([]byte(tc.text)); got != tc.want {
			t.Errorf("%q LIKE %q = %v, want %v", tc.text, tc.pattern, got, tc.want)
		}
		if got := refLike(tc.pattern, tc.text); got != tc.want {
			t.Errorf("reference: %q LIKE %q = %v, want %v", tc.text, tc.pattern, got, tc.want)
		}
	}
}

func TestLikeRefused(t *testing.T) {
	for _, p := range []string{`\`, `abc\`, `%\`} {
		if _, ok := compileLike(p); ok {
			t.Errorf("compileLike(%q) accepted a trailing backslash", p)
		}
	}
	if _, ok := compileLike(`abc\\`); !ok {
		t.Errorf(`compileLike("abc\\\\") refused an escaped backslash`)
	}
}

// TestLikeInvalidUTF8: a byte that is not UTF-8 is one character no literal matches, on both
// the NFA and the literal path.
func TestLikeInvalidUTF8(t *testing.T) {
	for _, tc := range []struct {
		pattern, text string
		want          bool
	}{
		{"_", "\xff", true},
		{"__", "\xe2\x82", true},
		{"%\uFFFD%", "a\xffb", false},
		{"%\uFFFD_", "a\xffb", false},
		{"a%b", "a\xffb", true},
		{"a_b", "a\xffb", true},
	} {
		lm, _ := compileLike(tc.pattern)
		if got := lm.match([]byte(tc.text)); got != tc.want {
			t.Errorf("%q LIKE %q = %v, want %v", tc.text, tc.pattern, got, tc.want)
		}
		if got := refLike(tc.pattern, tc.text); got != tc.want {
			t.Errorf("reference: %q LIKE %q = %v, want %v", tc.text, tc.pattern, got, tc.want)
		}
	}
}

// TestLikeRandom compares the matcher with the reference on random patterns and texts over a
// small alphabet, where matches and near misses are common.
func TestLikeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	patternAlphabet := []string{"a", "b", "é", "%", "_", `\%`, `\_`, `\\`, "%", "_"}
	textAlphabet := []string{"a", "b", "é", "%", "_", `\`, "\xff"}
	for i := range 20000 {
		var p, s strings.Builder
		for range rng.IntN(8) {
			p.WriteString(patternAlphabet[rng.IntN(len(patternAlphabet))])
		}
		if i%50 == 0 { // now and then a pattern long enough for the multi-word NFA
			for range 70 {
				p.WriteString(patternAlphabet[rng.IntN(len(patternAlphabet))])
			}
		}
		for range rng.IntN(12) {
			s.WriteString(textAlphabet[rng.IntN(len(textAlphabet))])
		}
		lm, ok := compileLike(p.String())
		if !ok {
			t.Fatalf("compileLike(%q) refused", p.String())
		}
		if got, want := lm.match([]byte(s.String())), refLike(p.String(), s.String()); got != want {
			t.Fatalf("%q LIKE %q = %v, reference says %v", s.String(), p.String(), got, want)
		}
	}
}

// TestLikeLongPattern exercises the multi-word NFA at the pattern bound.
func TestLikeLongPattern(t *testing.T) {
	pattern := strings.Repeat("a_", MaxPatternBytes/2)
	text := strings.Repeat("ab", MaxPatternBytes/2)
	lm, _ := compileLike(pattern)
	if lm.words < 2 {
		t.Fatalf("pattern of %d elements uses %d words", lm.m, lm.words)
	}
	if !lm.match([]byte(text)) {
		t.Error("long pattern does not match its text")
	}
	if lm.match([]byte(text[:len(text)-1])) {
		t.Error("long pattern matches a text one character short")
	}
	if !lm.match([]byte(text[:len(text)-1] + "é")) {
		t.Error("long pattern does not match with a multi-byte last character")
	}
	// 64 positions and more straddle the word boundary.
	for n := 60; n <= 70; n++ {
		p := strings.Repeat("_", n-1) + "%"
		lm, _ := compileLike(p)
		for l := n - 3; l <= n+3; l++ {
			s := strings.Repeat("x", l)
			if got, want := lm.match([]byte(s)), refLike(p, s); got != want {
				t.Errorf("%d chars LIKE %d _ and %%: %v, want %v", l, n-1, got, want)
			}
		}
	}
}

// pathological patterns make a backtracking matcher take exponential or quadratic time. Each
// must run in time linear in the text; the test would time out otherwise.
var pathological = []struct{ name, pattern, text string }{
	{"percent runs", strings.Repeat("%a", 30) + "%b", strings.Repeat("a", 100_000)},
	{"underscore runs", "%" + strings.Repeat("a_", 100) + "b", strings.Repeat("a", 100_000)},
	{"mixed", strings.Repeat("%_a", 40) + "%b", strings.Repeat("a", 100_000)},
	{"near miss suffix", "%" + strings.Repeat("a", 200) + "b%", strings.Repeat("a", 100_000)},
}

func TestLikePathological(t *testing.T) {
	for _, tc := range pathological {
		t.Run(tc.name, func(t *testing.T) {
			lm, ok := compileLike(tc.pattern)
			if !ok {
				t.Fatal("refused")
			}
			if lm.match([]byte(tc.text)) {
				t.Error("matched; every pathological text lacks the b")
			}
			if !lm.match([]byte(tc.text+"b")) && !strings.HasSuffix(tc.pattern, "b%") {
				t.Error("does not match once the b is there")
			}
		})
	}
}

// refLike is a plain dynamic-programming LIKE over characters, the reference the matcher is
// checked against. A byte that is not UTF-8 is a character no literal matches.
func refLike(pattern, text string) bool {
	type elem struct {
		kind byte
		r    rune
	}
	var p []elem
	for i := 0; i < len(pattern); {
		r, n := utf8.DecodeRuneInString(pattern[i:])
		i += n
		switch r {
		case '\\':
			r, n = utf8.DecodeRuneInString(pattern[i:])
			i += n
			p = append(p, elem{'c', r})
		case '%':
			p = append(p, elem{'%', 0})
		case '_':
			p = append(p, elem{'_', 0})
		default:
			p = append(p, elem{'c', r})
		}
	}
	var s []rune
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		if r == utf8.RuneError && n == 1 {
			r = -1
		}
		s = append(s, r)
		i += n
	}
	// m[i][j]: p[i:] matches s[j:].
	m := make([][]bool, len(p)+1)
	for i := range m {
		m[i] = make([]bool, len(s)+1)
	}
	m[len(p)][len(s)] = true
	for i := len(p) - 1; i >= 0; i-- {
		for j := len(s); j >= 0; j-- {
			switch p[i].kind {
			case '%':
				m[i][j] = m[i+1][j] || (j < len(s) && m[i][j+1])
			case '_':
				m[i][j] = j < len(s) && m[i+1][j+1]
			default:
				m[i][j] = j < len(s) && s[j] == p[i].r && m[i+1][j+1]
			}
		}
	}
	return m[0][0]
}
