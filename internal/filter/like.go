package filter

import (
	"bytes"
	"sort"
	"unicode/utf8"
)

// A like pattern is matched in time linear in the text, whatever the pattern, and never
// backtracks:
//
//   - A pattern without _ is a list of literal parts between % signs. The first part must
//     begin the text, the last must end it, and each part between is found, in order, at its
//     leftmost place after the one before. Leftmost is never wrong: any later place leaves less
//     text for the parts after it. Each search is a bytes.Index over what remains.
//   - A pattern with _ runs as a bit-parallel NFA (shift-and): one bit per pattern position, so
//     a few operations on at most maxPatternWords words per character of text.
//
// Matching is on characters, as Postgres matches in a UTF-8 database: _ takes one whole
// character. A byte that is not valid UTF-8 counts as one character that no literal matches.

// likeMatcher is a compiled like pattern. It is immutable.
type likeMatcher struct {
	// Without _: parts are the literal runs between % signs; one part means no %.
	parts [][]byte

	// With _: an NFA of m positions. Position i (1..m) is the pattern's i-th element: a
	// character, _ or %. State bit i is set when the text read so far can match elements 1..i.
	nfa      bool
	m        int
	words    int      // uint64 words per state vector: (m+1+63)/64
	anyMask  []uint64 // positions that are _
	starMask []uint64 // positions that are %
	ascii    [utf8.RuneSelf]int16
	runes    []rune   // non-ASCII characters in the pattern, sorted
	runeIdx  []int16  // mask index of each of runes
	masks    []uint64 // per distinct character: the positions it matches, words each
	noLit    []uint64 // words zeros: what a character no literal is matches
}

// maxPatternWords is the size of the NFA's state vector for the longest pattern: one position
// per byte at most, plus the start state.
const maxPatternWords = (MaxPatternBytes + 1 + 63) / 64

type likeElem struct {
	kind byte // 'c' a character, '_' any one, '%' any run
	r    rune
}

// compileLike compiles a pattern. ok is false when it ends in a lone backslash, which escapes
// nothing (Postgres refuses it too).
func compileLike(pattern string) (*likeMatcher, bool) {
	var elems []likeElem
	hasAny := false
	for i := 0; i < len(pattern); {
		r, size := utf8.DecodeRuneInString(pattern[i:])
		i += size
		switch r {
		case '\\':
			if i >= len(pattern) {
				return nil, false
			}
			r, size = utf8.DecodeRuneInString(pattern[i:])
			i += size
			elems = append(elems, likeElem{kind: 'c', r: r})
		case '%':
			if len(elems) > 0 && elems[len(elems)-1].kind == '%' {
				continue // %% is %
			}
			elems = append(elems, likeElem{kind: '%'})
		case '_':
			hasAny = true
			elems = append(elems, likeElem{kind: '_'})
		default:
			elems = append(elems, likeElem{kind: 'c', r: r})
		}
	}
	if !hasAny {
		lm := &likeMatcher{}
		var part []byte
		for _, e := range elems {
			if e.kind == '%' {
				lm.parts = append(lm.parts, part)
				part = nil
				continue
			}
			part = utf8.AppendRune(part, e.r)
		}
		lm.parts = append(lm.parts, part)
		return lm, true
	}
	return compileNFA(elems), true
}

func compileNFA(elems []likeElem) *likeMatcher {
	lm := &likeMatcher{nfa: true, m: len(elems)}
	lm.words = (lm.m + 1 + 63) / 64
	lm.anyMask = make([]uint64, lm.words)
	lm.starMask = make([]uint64, lm.words)
	for i := range lm.ascii {
		lm.ascii[i] = -1
	}
	var nonASCII []rune
	index := map[rune]int16{}
	for _, e := range elems {
		if e.kind != 'c' {
			continue
		}
		if _, ok := index[e.r]; ok {
			continue
		}
		index[e.r] = int16(len(index))
		if e.r < utf8.RuneSelf {
			lm.ascii[e.r] = index[e.r]
		} else {
			nonASCII = append(nonASCII, e.r)
		}
	}
	sort.Slice(nonASCII, func(i, j int) bool { return nonASCII[i] < nonASCII[j] })
	lm.runes = nonASCII
	for _, r := range nonASCII {
		lm.runeIdx = append(lm.runeIdx, index[r])
	}
	lm.masks = make([]uint64, len(index)*lm.words)
	lm.noLit = make([]uint64, lm.words)
	for i, e := range elems {
		pos := i + 1
		w, bit := pos/64, uint64(1)<<(pos%64)
		switch e.kind {
		case '_':
			lm.anyMask[w] |= bit
		case '%':
			lm.starMask[w] |= bit
		default:
			lm.masks[int(index[e.r])*lm.words+w] |= bit
		}
	}
	return lm
}

// match reports whether text matches the whole pattern.
func (lm *likeMatcher) match(text []byte) bool {
	if lm.nfa {
		if lm.words == 1 {
			return lm.match1(text)
		}
		return lm.matchN(text)
	}
	parts := lm.parts
	if len(parts) == 1 {
		return bytes.Equal(text, parts[0])
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(text) < len(first)+len(last) || !bytes.HasPrefix(text, first) || !bytes.HasSuffix(text, last) {
		return false
	}
	rest := text[len(first) : len(text)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := bytes.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// charMask returns the index into masks of the positions the character at the start of text
// matches, or -1 when no literal of the pattern is that character, and the character's size.
func (lm *likeMatcher) charMask(text []byte) (idx int, size int) {
	if c := text[0]; c < utf8.RuneSelf {
		return int(lm.ascii[c]), 1
	}
	r, size := utf8.DecodeRune(text)
	if r == utf8.RuneError && size == 1 {
		return -1, 1
	}
	i := sort.Search(len(lm.runes), func(i int) bool { return lm.runes[i] >= r })
	if i < len(lm.runes) && lm.runes[i] == r {
		return int(lm.runeIdx[i]), size
	}
	return -1, size
}

// match1 is the NFA for patterns of at most 63 elements: one word of state.
func (lm *likeMatcher) match1(text []byte) bool {
	anyM, star := lm.anyMask[0], lm.starMask[0]
	final := uint64(1) << lm.m
	d := uint64(1)
	d |= (d << 1) & star
	for len(text) > 0 {
		idx, size := lm.charMask(text)
		text = text[size:]
		m := anyM
		if idx >= 0 {
			m |= lm.masks[idx]
		}
		d = (d<<1)&m | d&star
		d |= (d << 1) & star // % matches the empty run: step over it
		if d == 0 {
			return false
		}
	}
	return d&final != 0
}

// matchN is the NFA for longer patterns, on a state vector of several words, updated in place
// from the lowest word up: each word needs only the top bit of the word below as it was.
func (lm *likeMatcher) matchN(text []byte) bool {
	var d [maxPatternWords]uint64
	n := lm.words
	d[0] = 1
	closeStars(d[:n], lm.starMask)
	anyM, star := lm.anyMask[:n], lm.starMask[:n]
	for len(text) > 0 {
		idx, size := lm.charMask(text)
		text = text[size:]
		lit := lm.noLit[:n]
		if idx >= 0 {
			lit = lm.masks[idx*n : idx*n+n]
		}
		var carry, carryStep, live uint64
		for w := range n {
			dw := d[w]
			step := (dw<<1|carry)&(anyM[w]|lit[w]) | dw&star[w]
			carry = dw >> 63
			// % matches the empty run: step over it. A % never follows a %, so the bit this
			// adds needs no stepping over in turn, and the carry can be taken before it.
			next := step | (step<<1|carryStep)&star[w]
			carryStep = step >> 63
			d[w] = next
			live |= next
		}
		if live == 0 {
			return false
		}
	}
	return d[lm.m/64]&(1<<(lm.m%64)) != 0
}

// closeStars adds, for each active state, the % position right after it: % may match nothing.
// No two % are adjacent in a compiled pattern, so one pass reaches every such state.
func closeStars(d, star []uint64) {
	var carry uint64
	for w := range d {
		shifted := d[w]<<1 | carry
		carry = d[w] >> 63
		d[w] |= shifted & star[w]
	}
}
