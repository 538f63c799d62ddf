package filter

import (
	"bytes"
	"encoding/json"
)

// scalar is one value of a column's type, parsed for comparison: a literal, compiled once, or a
// row value, parsed per evaluation, whose slices then point into the row (or a caller's buffer)
// and must not outlive it.
type scalar struct {
	num  decimal  // Number
	cal  calendar // Date, Timestamp, LocalTimestamp
	b    bool     // Bool
	uuid [16]byte // UUID
	text []byte   // Text, Char (padding kept), Other
}

// parseValue parses a row value of a column of type t. buf is scratch space for a string that
// must be unescaped. ok is false when the value cannot be read as its type: SQL NULL, which the
// caller tests first, or a value of another shape (a column whose type changed after the filter
// was checked against it).
func parseValue(t Type, raw, buf []byte) (v scalar, ok bool) {
	switch t {
	case Number:
		v.num, ok = parseNumber(raw)
	case Bool:
		switch string(raw) {
		case "true":
			v.b, ok = true, true
		case "false":
			ok = true
		}
	case Text, Char, Other:
		v.text, ok = stringContent(raw, buf)
	case UUID:
		var s []byte
		if s, ok = stringContent(raw, buf); ok {
			v.uuid, ok = parseUUID(s)
		}
	case Date, Timestamp, LocalTimestamp:
		var s []byte
		if s, ok = stringContent(raw, buf); ok {
			v.cal, ok = parseCalendar(s, t)
		}
	}
	return v, ok
}

// compare orders two values of type t: -1, 0 or +1. Types without an order the operators may
// use still get a total one here, for sorting in lists.
func compare(t Type, a, b *scalar) int {
	switch t {
	case Number:
		return compareDecimal(&a.num, &b.num)
	case Date, Timestamp, LocalTimestamp:
		return compareCalendar(&a.cal, &b.cal)
	case Bool:
		switch {
		case a.b == b.b:
			return 0
		case b.b:
			return -1
		}
		return 1
	case UUID:
		return bytes.Compare(a.uuid[:], b.uuid[:])
	case Char:
		return bytes.Compare(trimPadding(a.text), trimPadding(b.text))
	}
	return bytes.Compare(a.text, b.text)
}

// appendKey appends the canonical spelling of v: equal values of type t, whatever their
// spelling, give equal keys.
func appendKey(dst []byte, t Type, v *scalar) []byte {
	switch t {
	case Number:
		return appendDecimal(dst, &v.num)
	case Date, Timestamp, LocalTimestamp:
		return appendCalendar(dst, &v.cal, t)
	case Bool:
		if v.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case UUID:
		return appendUUID(dst, &v.uuid)
	case Char:
		return append(dst, trimPadding(v.text)...)
	}
	return append(dst, v.text...)
}

// AppendKey appends the index key of a row value of a column of type t to dst: the canonical
// spelling of the value, so that values equal under the filter's eq give equal keys (numeric
// 1.0 and 1, an int8 as a string or a number, a uuid in either case, a timestamp at any offset,
// a char(n) with or without its padding). ok is false for SQL NULL, which no eq matches, and
// for a value that cannot be read as its type. It allocates only to grow dst, and to unescape a
// string that holds escapes.
func AppendKey(dst []byte, t Type, v json.RawMessage) ([]byte, bool) {
	var buf [64]byte
	s, ok := parseValue(t, v, buf[:0])
	if !ok || t == Unsupported {
		return dst, false
	}
	if (t == Timestamp || t == LocalTimestamp || t == Date) && isCanonicalCalendar(v, t) {
		return append(dst, v[1:len(v)-1]...), true // a valid value in its canonical spelling
	}
	return appendKey(dst, t, &s), true
}

// isCanonicalCalendar reports whether a JSON string has the shape of the canonical spelling of
// a value of type t (see appendCalendar), as pgvalue writes every value in years 0001–9999.
// A value of that shape that parses is its own canonical spelling.
func isCanonicalCalendar(raw []byte, t Type) bool {
	n := len(raw) - 2
	switch t {
	case Date:
		return n == len("2006-01-02")
	case LocalTimestamp:
		return n == len("2006-01-02T15:04:05.000") && raw[11] == 'T' && raw[20] == '.'
	}
	return n == len("2006-01-02T15:04:05.000Z") && raw[11] == 'T' && raw[20] == '.' && raw[24] == 'Z'
}

// Key is AppendKey as a string.
func Key(t Type, v json.RawMessage) (string, bool) {
	var buf [64]byte
	b, ok := AppendKey(buf[:0], t, v)
	return string(b), ok
}
