package pgvalue

// maxDims is MAXDIM in Postgres's array.h. It also bounds this reader's recursion.
const maxDims = 6

// appendArray emits the text of an array (array_out's spelling) as a JSON array, one nested
// JSON array per dimension, each element by its own type's rule. A dimension decoration
// ([0:1]={7,8}) is checked against the shape and then dropped. Text that is not a well-formed,
// rectangular array is a string of itself.
func appendArray(dst, text []byte, elem uint32, delim byte) []byte {
	start := len(dst)
	r := arrayReader{text: text, elem: elem, delim: delim, leaf: -1}
	dst, ok := r.read(dst)
	if !ok {
		return appendString(dst[:start], text)
	}
	return dst
}

// arrayReader reads one array text. The shape rules are array_in's: sub-arrays at one depth all
// have the same length, every element sits at the same depth, and an empty sub-array is
// malformed (an empty array has no dimensions and is written {}).
type arrayReader struct {
	text  []byte
	pos   int
	elem  uint32
	delim byte
	leaf  int          // depth the elements sit at; -1 until the first element
	lens  [maxDims]int // length of every sub-array at each depth; 0 until the first closes
	decl  [maxDims]int // lengths the decoration declares
	ndecl int          // number of dimensions the decoration declares
	buf   [128]byte    // holds an unescaped element, so that a short one costs no allocation
}

func (r *arrayReader) read(dst []byte) ([]byte, bool) {
	if !r.readDecoration() {
		return dst, false
	}
	if r.pos >= len(r.text) || r.text[r.pos] != '{' {
		return dst, false
	}
	dst, ok := r.readArray(dst, 0)
	if !ok || r.pos != len(r.text) {
		return dst, false
	}
	if r.ndecl > 0 {
		if r.ndecl != r.leaf+1 {
			return dst, false
		}
		for i := range r.ndecl {
			if r.decl[i] != r.lens[i] {
				return dst, false
			}
		}
	}
	return dst, true
}

// readDecoration reads the [lower:upper]... = prefix array_out writes when a lower bound is not 1.
// JSON arrays start at 0 whatever the bounds, so the bounds are not kept; only the lengths are,
// to check the shape.
func (r *arrayReader) readDecoration() bool {
	for r.pos < len(r.text) && r.text[r.pos] == '[' {
		if r.ndecl == maxDims {
			return false
		}
		r.pos++
		lower, ok := r.readBound()
		if !ok || !r.consume(':') {
			return false
		}
		upper, ok := r.readBound()
		if !ok || !r.consume(']') || upper < lower {
			return false
		}
		r.decl[r.ndecl] = int(upper - lower + 1)
		r.ndecl++
	}
	return r.ndecl == 0 || r.consume('=')
}

// readBound reads a signed 32-bit array bound.
func (r *arrayReader) readBound() (int64, bool) {
	neg := r.consume('-')
	start := r.pos
	var n int64
	for r.pos < len(r.text) && isDigit(r.text[r.pos]) && r.pos-start < 10 {
		n = n*10 + int64(r.text[r.pos]-'0')
		r.pos++
	}
	if r.pos == start || n > 1<<31 || (!neg && n > 1<<31-1) {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

func (r *arrayReader) consume(c byte) bool {
	if r.pos < len(r.text) && r.text[r.pos] == c {
		r.pos++
		return true
	}
	return false
}

// readArray reads {...} at r.pos, whose nesting depth is depth.
func (r *arrayReader) readArray(dst []byte, depth int) ([]byte, bool) {
	if depth == maxDims {
		return dst, false
	}
	r.pos++ // '{'
	dst = append(dst, '[')
	if r.consume('}') {
		return append(dst, ']'), depth == 0
	}
	n := 0
	for {
		if r.pos >= len(r.text) {
			return dst, false
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if r.text[r.pos] == '{' {
			dst, ok = r.readArray(dst, depth+1)
		} else {
			if r.leaf < 0 {
				r.leaf = depth
			} else if r.leaf != depth {
				return dst, false
			}
			dst, ok = r.readElement(dst)
		}
		if !ok {
			return dst, false
		}
		n++
		if r.consume('}') {
			break
		}
		if !r.consume(r.delim) {
			return dst, false
		}
	}
	if r.lens[depth] == 0 {
		r.lens[depth] = n
	} else if r.lens[depth] != n {
		return dst, false
	}
	return append(dst, ']'), true
}

// readElement reads one element and emits it by the element type's rule. array_out quotes an
// element that is empty, is NULL in any case, or holds the delimiter, a brace, a quote, a
// backslash or white space; inside quotes a backslash escapes the next byte. So an unquoted NULL
// is SQL NULL and a quoted "NULL" is the text NULL.
func (r *arrayReader) readElement(dst []byte) ([]byte, bool) {
	t := r.text
	if t[r.pos] == '"' {
		r.pos++
		start, escaped := r.pos, false
		for r.pos < len(t) && t[r.pos] != '"' {
			if t[r.pos] == '\\' {
				escaped = true
				r.pos++
			}
			r.pos++
		}
		if r.pos >= len(t) {
			return dst, false
		}
		v := t[start:r.pos]
		r.pos++ // closing '"'
		if escaped {
			v = r.unescape(v)
		}
		return AppendJSON(dst, r.elem, v), true
	}
	start := r.pos
	for r.pos < len(t) {
		c := t[r.pos]
		if c == r.delim || c == '}' {
			break
		}
		if c == '{' || c == '"' || c == '\\' || isArraySpace(c) {
			return dst, false
		}
		r.pos++
	}
	v := t[start:r.pos]
	switch {
	case len(v) == 0:
		return dst, false
	case isNull(v):
		return append(dst, "null"...), true
	}
	return AppendJSON(dst, r.elem, v), true
}

// unescape returns v without the backslash of each \x pair. The result is valid until the next
// call.
func (r *arrayReader) unescape(v []byte) []byte {
	b := r.buf[:0]
	if len(v) > len(r.buf) {
		b = make([]byte, 0, len(v))
	}
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++
		}
		b = append(b, v[i])
	}
	return b
}

// isNull reports whether v is NULL, which array_in reads in any case.
func isNull(v []byte) bool {
	return len(v) == 4 &&
		v[0]|0x20 == 'n' && v[1]|0x20 == 'u' && v[2]|0x20 == 'l' && v[3]|0x20 == 'l'
}

// isArraySpace is array_isspace: the bytes array_in skips around an element and array_out
// therefore quotes.
func isArraySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}
