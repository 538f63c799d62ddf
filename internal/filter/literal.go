package filter

import (
	"encoding/json"
	"strconv"
)

// literal is a compiled filter value: parsed as its column's type, with its canonical key and
// its canonical JSON spelling.
type literal struct {
	v    scalar
	key  string
	json []byte
}

// column is a filter's column, resolved against the table.
type column struct {
	name string
	oid  uint32
	typ  Type
	hint int // the column's position in the table
}

func (c column) describe() string { return c.name + " (" + oidName(c.oid) + ")" }

// compileLiteral checks a client's value against its column's type and compiles it. path names
// the value in the filter; o is the operator it is an operand of.
func compileLiteral(tok json.Token, c column, o op, path string) (literal, *Error) {
	var lit literal
	mismatch := func(fix string) (literal, *Error) {
		return lit, &Error{Code: CodeBadFilter, Path: path,
			Detail: o.String() + " compares " + c.describe() + " with " + describe(tok), Fix: fix}
	}
	switch v := tok.(type) {
	case nil:
		return lit, &Error{Code: CodeBadFilter, Path: path,
			Detail: o.String() + " compares " + c.name + " with null, which matches no row",
			Fix:    `test for NULL with {"is_null":` + quote(c.name) + `} or {"not_null":` + quote(c.name) + `}`}
	case json.Delim:
		fix := "write one value"
		if o == opEq {
			fix = `to match any of several values, use {"in":[` + quote(c.name) + `,[...]]}`
		}
		return mismatch(fix)
	case string:
		if len(v) > MaxLiteralBytes {
			return lit, &Error{Code: CodeBadFilter, Path: path,
				Detail: "the value is " + strconv.Itoa(len(v)) + " bytes long, more than the " +
					strconv.Itoa(MaxLiteralBytes) + " a filter value may be",
				Fix: "compare with a shorter value"}
		}
	case json.Number:
		if len(v) > MaxLiteralBytes {
			return lit, &Error{Code: CodeBadFilter, Path: path,
				Detail: "the number is " + strconv.Itoa(len(v)) + " characters long, more than the " +
					strconv.Itoa(MaxLiteralBytes) + " a filter value may be",
				Fix: "compare with a shorter number"}
		}
	}

	switch c.typ {
	case Number:
		switch v := tok.(type) {
		case json.Number:
			d, ok := parseDecimal([]byte(v))
			if !ok { // the decoder has checked the syntax; this is belt and braces
				return mismatch(numberFix(c.oid))
			}
			lit.v.num = d
		case string:
			d, ok := parseNumberText([]byte(v))
			switch {
			case !ok:
				return mismatch(numberFix(c.oid))
			case d.class != numFinite && !specialNumbers(c.oid):
				// NaN and the infinities are no JSON number, and an integer column never holds
				// them: there is nothing to suggest writing instead.
				return mismatch("an " + oidName(c.oid) + " is never " + v + "; " + numberFix(c.oid))
			case !stringNumbers(c.oid):
				return mismatch("write the value as a JSON number: " + string(appendDecimal(nil, &d)))
			}
			lit.v.num = d
		default:
			return mismatch(numberFix(c.oid))
		}
	case Text, Char, Other:
		v, ok := tok.(string)
		if !ok {
			fix := "write the value as a JSON string"
			if n, isNum := tok.(json.Number); isNum {
				fix += ": " + quote(string(n))
			} else if b, isBool := tok.(bool); isBool {
				fix += ": " + quote(strconv.FormatBool(b))
			}
			if c.typ == Other {
				fix += ", spelt as Postgres prints the column's values"
			}
			return mismatch(fix)
		}
		lit.v.text = []byte(v)
	case Bool:
		v, ok := tok.(bool)
		if !ok {
			fix := "write true or false"
			if s, isStr := tok.(string); isStr && (s == "true" || s == "false") {
				fix = "write " + s + " without quotes"
			}
			return mismatch(fix)
		}
		lit.v.b = v
	case UUID:
		v, ok := tok.(string)
		var u [16]byte
		if ok {
			u, ok = parseUUID([]byte(v))
		}
		if !ok {
			return mismatch(`write a uuid as a string, like "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`)
		}
		lit.v.uuid = u
	case Date, Timestamp, LocalTimestamp:
		v, ok := tok.(string)
		var cal calendar
		if ok {
			cal, ok = parseCalendarLiteral(v, c.typ)
		}
		if !ok {
			return mismatch(calendarFix(c.typ))
		}
		lit.v.cal = cal
	default:
		return mismatch("filter on another column")
	}

	lit.key = string(appendKey(nil, c.typ, &lit.v))
	switch {
	case c.typ == Number && lit.v.num.class == numFinite, c.typ == Bool:
		lit.json = []byte(lit.key)
	default:
		lit.json = appendJSONString(nil, lit.key)
	}
	return lit, nil
}

// stringNumbers reports whether a Number column of type oid takes string literals: those whose
// values Herald itself may send as strings.
func stringNumbers(oid uint32) bool {
	switch oid {
	case int8OID, numericOID, float4OID, float8OID:
		return true
	}
	return false
}

// specialNumbers reports whether a Number column of type oid can hold NaN, Infinity and
// -Infinity: numeric and the floats can, the integer types cannot.
func specialNumbers(oid uint32) bool {
	switch oid {
	case numericOID, float4OID, float8OID:
		return true
	}
	return false
}

// numberFix says what a Number column of type oid accepts.
func numberFix(oid uint32) string {
	if specialNumbers(oid) {
		return `write a JSON number, like 5, or one of the strings "NaN", "Infinity" and "-Infinity"`
	}
	return "write a JSON number, like 5"
}

func calendarFix(t Type) string {
	switch t {
	case Date:
		return `write a date as a string, like "2024-01-06" (years 0001 to 9999), or "infinity" or "-infinity"`
	case LocalTimestamp:
		return `write an RFC 3339 date and time without an offset, like "2024-01-06T08:30:00" or "2024-01-06T08:30:00.123" (years 0001 to 9999), or "infinity" or "-infinity": the column holds wall-clock times`
	}
	return `write an RFC 3339 time with an offset, like "2024-01-06T08:30:00Z" or "2024-01-06T10:30:00+02:00", in years 0001 to 9999 once in UTC, or "infinity" or "-infinity"`
}

// describe names a client's JSON token for a message.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case string:
		return "the string " + quote(v)
	case json.Number:
		if len(v) > maxQuoted {
			return "the number " + string(v[:maxQuoted]) + "..."
		}
		return "the number " + string(v)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	case json.Delim:
		switch v {
		case '[':
			return "an array"
		case '{':
			return "an object"
		case ']':
			return "the end of the list"
		}
		return "the end of the object"
	}
	return "a value"
}
