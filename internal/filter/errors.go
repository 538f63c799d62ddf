package filter

import (
	"strings"

	"github.com/heraldrt/herald/internal/problem"
)

// Code says which client error code a refused filter maps to. The set is closed and the strings
// are stable: the server maps them to the wire's codes of the same names.
type Code string

// The closed set of codes.
const (
	// CodeBadFilter: the filter does not parse, breaks a bound, or does not type-check against
	// the table: an unknown operator, a wrong number of operands, a literal of the wrong type, an
	// operator the column's type does not support.
	CodeBadFilter Code = "bad_filter"
	// CodeUnknownColumn: the filter names a column the table does not have.
	CodeUnknownColumn Code = "unknown_column"
)

// Codes returns every Code, for metrics that pre-create their labels.
func Codes() []Code { return []Code{CodeBadFilter, CodeUnknownColumn} }

// String returns the code's stable text.
func (c Code) String() string { return string(c) }

// Error is a refused filter. Everything in it came from the client's filter or the table's
// column names, so the whole error may be logged and shown to the client.
//
// Match the code with errors.Is against ErrBadFilter or ErrUnknownColumn, or read Code after
// errors.As.
type Error struct {
	Code Code
	// Path names the offending part of the filter, operator keys and operand indexes from the
	// root: "and[1].eq[0]" is the column of the eq that is the second operand of the root's and.
	// Empty for the filter as a whole.
	Path string
	// Detail says what failed, e.g. `gt compares qty (int4) with the string "5"`.
	Detail string
	// Fix says how to write it instead, e.g. `write the value as a JSON number: 5`.
	Fix string
	// Err is the JSON decoder's error, when the filter is not valid JSON.
	Err error
}

// Sentinels for errors.Is: an *Error matches the sentinel of its Code.
var (
	ErrBadFilter     = &Error{Code: CodeBadFilter}
	ErrUnknownColumn = &Error{Code: CodeUnknownColumn}
)

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("filter")
	if e.Path != "" {
		b.WriteString(" at ")
		b.WriteString(e.Path)
	}
	b.WriteString(": ")
	b.WriteString(e.Detail)
	if e.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the JSON decoder's error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Path == "" && t.Detail == "" && t.Code == e.Code
}

// maxQuoted bounds how much of a client's value an error repeats: enough to recognise it, not a
// second copy of a long literal.
const maxQuoted = 40

// quote renders a client's string for a message, cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) > maxQuoted {
		cut := maxQuoted
		for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		return string(appendJSONString(nil, s[:cut])) + "..."
	}
	return string(appendJSONString(nil, s))
}

// Problem is the refusal as a person meets it: code "filter.<code>", the path of the
// offending part in Detail.
func (e *Error) Problem() problem.Problem {
	d := e.Detail
	if e.Path != "" {
		d = e.Path + ": " + d
	}
	return problem.Problem{Code: "filter." + string(e.Code), Stage: "filter", Detail: d, Fix: e.Fix}
}
