package change

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// plain marks the bytes a JSON string holds as they are: printable ASCII but the quote and the
// backslash.
var plain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// Eight bytes at a time: a byte is plain when its high bit is clear, it is at least 0x20, and
// it is neither '"' nor '\\'. Each test below sets the high bit of some byte of the word exactly
// when some byte fails it (the bit tricks of "Bit Twiddling Hacks": hasless and haszero, exact
// for whether any byte matches, which is all that is asked).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

func plainWord(w uint64) bool {
	control := (w - ones*0x20) &^ w
	quote := w ^ (ones * '"')
	quote = (quote - ones) &^ quote
	backslash := w ^ (ones * '\\')
	backslash = (backslash - ones) &^ backslash
	return (w|control|quote|backslash)&highs == 0
}

// load64 reads eight bytes of s from i, little-endian; the compiler makes it one load.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// AppendJSONString appends s to dst as a JSON string. Control characters are escaped and
// invalid UTF-8 becomes U+FFFD, so the result is valid JSON whatever bytes a database holds
// (a SQL_ASCII database can hold any).
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// The common case, a run of plain ASCII: eight bytes at a time, then one at a time.
		for i+8 <= len(s) && plainWord(load64(s, i)) {
			i += 8
		}
		for i < len(s) && plain[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		b := s[i]
		if b < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but end a line in JavaScript source; escape them as
		// encoding/json does.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendCompactJSON appends the valid JSON value v to dst without the white space between its
// tokens. Inside a string there is none to drop: valid JSON escapes its control characters. So
// the result holds no raw line break, whatever v held between its tokens.
func AppendCompactJSON(dst, v []byte) []byte {
	start := 0
	inString := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			dst = append(dst, v[start:i]...)
			start = i + 1
		}
	}
	return append(dst, v[start:]...)
}
