package filter

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/change"
)

func appendJSONString(dst []byte, s string) []byte { return change.AppendJSONString(dst, s) }

// stringContent returns the text of a JSON string value. When raw holds no escape, that is a
// slice of raw and nothing is copied; otherwise the text is decoded into buf, which is grown
// only if it is too small. ok is false when raw is not a JSON string.
func stringContent(raw, buf []byte) (s []byte, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	body := raw[1 : len(raw)-1]
	for i, c := range body {
		if c == '\\' {
			return unescape(append(buf[:0], body[:i]...), body[i:])
		}
		if c == '"' {
			return nil, false
		}
	}
	return body, true
}

// unescape appends the decoded text of a JSON string's body, from its first backslash on, to
// dst. A lone surrogate decodes to U+FFFD, as encoding/json decodes it.
func unescape(dst, body []byte) ([]byte, bool) {
	for i := 0; i < len(body); {
		c := body[i]
		if c == '"' {
			return nil, false
		}
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 >= len(body) {
			return nil, false
		}
		switch body[i+1] {
		case '"', '\\', '/':
			dst = append(dst, body[i+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(body[i+2:])
			if !ok {
				return nil, false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
					r2, _ := hex4(body[i+2 : i+6])
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						dst = utf8.AppendRune(dst, dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			return nil, false
		}
		i += 2
	}
	return dst, true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// trimPadding drops the trailing spaces that do not count in a char(n) comparison.
func trimPadding(s []byte) []byte {
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// hexValue maps a byte to its value as a hex digit, or 0xFF.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	for i, c := range "ABCDEF" {
		t[c] = byte(10 + i)
	}
	return t
}()

// parseUUID reads a uuid in any spelling Postgres accepts on input: 32 hex digits of either case,
// optionally in braces, with a hyphen allowed after any group of four digits.
func parseUUID(s []byte) (u [16]byte, ok bool) {
	if len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' {
		// The spelling Postgres prints, and so every row value's: no hyphen to place.
		var bad byte
		for i, j := 0, 0; i < 16; i++ {
			if j == 8 || j == 13 || j == 18 || j == 23 {
				j++
			}
			hi, lo := hexValue[s[j]], hexValue[s[j+1]]
			bad |= hi | lo
			u[i] = hi<<4 | lo
			j += 2
		}
		return u, bad&0xF0 == 0
	}
	if len(s) >= 2 && s[0] == '{' && s[len(s)-1] == '}' {
		s = s[1 : len(s)-1]
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' {
			if n == 0 || n%4 != 0 || n == 32 || s[i-1] == '-' {
				return u, false
			}
			continue
		}
		v := hexValue[c]
		if v == 0xFF || n == 32 {
			return u, false
		}
		u[n/2] |= v << (4 * (1 - n%2))
		n++
	}
	return u, n == 32
}

// appendUUID appends the canonical spelling of u, as Postgres prints it: lowercase, 8-4-4-4-12.
func appendUUID(dst []byte, u *[16]byte) []byte {
	const hex = "0123456789abcdef"
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hex[b>>4], hex[b&0xF])
	}
	return dst
}
