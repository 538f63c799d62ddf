package wire

import (
	"bytes"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/change"
)

// maxNesting bounds how deeply arrays and objects may nest in a client's frame. The scanner
// recurses, so the bound keeps a hostile frame from growing the stack; 128 levels is far more
// than any filter or payload a person writes.
const maxNesting = 128

// maxServerNesting bounds nesting in a server's frame, read by a client: rows carry jsonb
// values as deep as Postgres allows them. It matches encoding/json's own bound.
const maxServerNesting = 10000

// member is one member of a JSON object.
type member struct {
	key []byte // unescaped
	val []byte // the raw value, without surrounding whitespace
}

// syntaxError is a JSON syntax error at a byte offset.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

// scanner validates JSON text the way RFC 8259 defines it. It does not check UTF-8: the
// decoder checks the whole frame once before scanning.
type scanner struct {
	b        []byte
	i        int
	maxDepth int // 0 means maxNesting
}

func (s *scanner) tooDeep(depth int) error {
	max := s.maxDepth
	if max == 0 {
		max = maxNesting
	}
	if depth <= max {
		return nil
	}
	return s.failf("JSON nested deeper than %d levels", max)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) fail(msg string) error {
	if s.i >= len(s.b) {
		return &syntaxError{off: s.i, msg: "unexpected end of JSON"}
	}
	return &syntaxError{off: s.i, msg: msg}
}

func (s *scanner) failf(format string, args ...any) error {
	return s.fail(fmt.Sprintf(format, args...))
}

// objectMembers reads b as exactly one JSON object, with nothing but whitespace around it, and
// appends its members to ms in order. ok is false when b is valid JSON but not an object.
// maxDepth bounds nesting; 0 means maxNesting.
func objectMembers(b []byte, ms []member, maxDepth int) (_ []member, ok bool, err error) {
	s := scanner{b: b, maxDepth: maxDepth}
	s.ws()
	if s.i < len(b) && b[s.i] != '{' {
		// Still validate, so the error says whether it was JSON at all.
		if err := s.value(0); err != nil {
			return ms, false, err
		}
		s.ws()
		if s.i != len(b) {
			return ms, false, s.fail("data after the JSON value")
		}
		return ms, false, nil
	}
	if s.i >= len(b) {
		return ms, false, s.fail("")
	}
	// The members are collected here and not in object, which recurses: escape analysis
	// gives up on a recursive function's parameters, and ms would go to the heap.
	s.i++
	s.ws()
	if s.i < len(b) && b[s.i] == '}' {
		s.i++
	} else {
		for {
			key, escaped, err := s.key()
			if err != nil {
				return ms, false, err
			}
			vStart := s.i
			if err := s.value(1); err != nil {
				return ms, false, err
			}
			if escaped {
				key = unescape(nil, key)
			}
			ms = append(ms, member{key: key, val: b[vStart:s.i]})
			if done, err := s.next('}'); err != nil {
				return ms, false, err
			} else if done {
				break
			}
		}
	}
	s.ws()
	if s.i != len(b) {
		return ms, false, s.fail("data after the frame's closing brace")
	}
	return ms, true, nil
}

// object reads and validates an object at s.i ('{') nested depth levels deep.
func (s *scanner) object(depth int) error {
	if err := s.tooDeep(depth); err != nil {
		return err
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		if _, _, err := s.key(); err != nil {
			return err
		}
		if err := s.value(depth); err != nil {
			return err
		}
		if done, err := s.next('}'); err != nil || done {
			return err
		}
	}
}

// key reads an object member's key and the colon after it, leaving s.i at the value. It
// returns the key's raw body, and whether it holds escapes.
func (s *scanner) key() (body []byte, escaped bool, err error) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, s.fail("want a string key")
	}
	start := s.i
	if escaped, err = s.str(); err != nil {
		return nil, false, err
	}
	body = s.b[start+1 : s.i-1]
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false, s.fail(`want ':' after the key`)
	}
	s.i++
	s.ws()
	return body, escaped, nil
}

// next reads the ',' between members or elements, or the closing byte, reporting whether it
// was the close.
func (s *scanner) next(closing byte) (done bool, err error) {
	s.ws()
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case ',':
			s.i++
			return false, nil
		case closing:
			s.i++
			return true, nil
		}
	}
	if closing == '}' {
		return false, s.fail(`want ',' or '}' after an object member`)
	}
	return false, s.fail(`want ',' or ']' after an array element`)
}

// value reads one JSON value at s.i. depth is the nesting of the container it is in.
func (s *scanner) value(depth int) error {
	if s.i >= len(s.b) {
		return s.fail("")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.failf("unexpected %q", rune(c))
	}
}

func (s *scanner) array(depth int) error {
	if err := s.tooDeep(depth); err != nil {
		return err
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if err := s.value(depth); err != nil {
			return err
		}
		if done, err := s.next(']'); err != nil || done {
			return err
		}
	}
}

// str reads a string at s.i ('"') and reports whether it holds an escape.
func (s *scanner) str() (escaped bool, err error) {
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, nil
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return escaped, s.fail("")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for k := 0; k < 4; k++ {
					if s.i >= len(s.b) || hexVal(s.b[s.i]) < 0 {
						return escaped, s.fail(`want four hexadecimal digits after \u`)
					}
					s.i++
				}
			default:
				return escaped, s.failf("invalid escape \\%c", rune(s.b[s.i]))
			}
		case c < 0x20:
			return escaped, s.fail("control character in a string: escape it")
		default:
			s.i++
		}
	}
	return escaped, s.fail("")
}

func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return s.fail("want a digit")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.fail("want a digit after the decimal point")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.fail("want a digit in the exponent")
		}
	}
	return nil
}

func (s *scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

func (s *scanner) literal(lit string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return s.failf("want %s", lit)
	}
	s.i += len(lit)
	return nil
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// unquote returns the string a scanned JSON string literal (quotes included) holds.
func unquote(lit []byte) string {
	body := lit[1 : len(lit)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body)
	}
	return string(unescape(make([]byte, 0, len(body)), body))
}

// unescape appends the text of a scanned string's body to dst, resolving escapes. A \u escape
// of a lone surrogate becomes U+FFFD, as encoding/json does.
func unescape(dst, body []byte) []byte {
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			j := bytes.IndexByte(body[i:], '\\')
			if j < 0 {
				return append(dst, body[i:]...)
			}
			dst = append(dst, body[i:i+j]...)
			i += j
			continue
		}
		i++
		switch body[i] {
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
			r := hex4(body[i+1:])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				// The scanner validated every escape, so a following \u has its four digits.
				if i+2 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					r2 = hex4(body[i+3:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, body[i])
		}
		i++
	}
	return dst
}

func hex4(b []byte) rune {
	return rune(hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3]))
}

// appendOneLine appends the valid JSON value v to dst so that no raw CR or LF reaches the
// frame. It runs for every row value, so it looks only where a line break can be: in valid
// JSON a raw line break is white space between tokens, so it sits inside an object or array
// (a json column as a person typed it) or before or after the value ("x"\r\n); a number,
// string, boolean or null has none within. Only such a value is searched, and compacted if it
// holds one.
func appendOneLine(dst, v []byte) []byte {
	if isSpace(v[len(v)-1]) || v[0] == '{' || v[0] == '[' || isSpace(v[0]) {
		if bytes.IndexByte(v, '\n') >= 0 || bytes.IndexByte(v, '\r') >= 0 {
			return change.AppendCompactJSON(dst, v)
		}
	}
	return append(dst, v...)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// jsonKind names the kind of a raw JSON value for error messages.
func jsonKind(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
