// Package filter owns the filter language of table subscriptions: its grammar, its checking
// against a table's columns and types, its evaluation on row images, and the index keys the
// router files subscriptions under.
//
// It is pure: no I/O, no goroutines. A compiled Filter is immutable and safe for concurrent
// use. docs/FILTERS.md is the client's reference, with examples.
//
// # Grammar
//
// A filter is JSON. Absent, or null, it matches every row.
//
//	{"eq":  ["col", value]}          also neq, lt, lte, gt, gte
//	{"in":  ["col", [value, ...]]}   at most MaxInValues values; [] matches no row
//	{"like": ["col", "pattern"]}     SQL LIKE: % any run, _ one character, \ escapes the next
//	{"is_null": "col"}  {"not_null": "col"}
//	{"and": [filter, ...]}  {"or": [filter, ...]}  {"not": filter}
//
// An object holds exactly one operator. An empty and is true, an empty or false. Bounds:
// MaxBytes of JSON, MaxDepth levels, MaxNodes operators and values, MaxLiteralBytes per value,
// MaxPatternBytes per like pattern. A refused filter is an *Error whose Code is bad_filter or
// unknown_column and whose Path names the fault, like and[1].eq[0].
//
// # Types
//
// A column's type OID gives its Type, which says which operators apply and how values
// compare. A value is written the way Herald writes the column's values (pgvalue):
//
//	Type            types                                operators          value
//	Number          int2 int4 int8 oid numeric float4/8  all but like       JSON number; for int8,
//	                                                                        numeric and floats also
//	                                                                        a string of one, and for
//	                                                                        numeric and floats "NaN",
//	                                                                        "Infinity", "-Infinity"
//	Text            text varchar name "char"             all                string
//	Char            bpchar (char(n))                     all                string
//	Bool            bool                                 eq neq in          true, false
//	Timestamp       timestamptz                          all but like       RFC 3339 with offset
//	LocalTimestamp  timestamp                            all but like       RFC 3339 without offset
//	Date            date                                 all but like       "YYYY-MM-DD"
//	UUID            uuid                                 eq neq in          string, any case
//	Other           enums, time, interval, inet, ...     eq neq in          string, as Postgres prints
//	Unsupported     json jsonb arrays                    is_null not_null   -
//
// is_null and not_null apply to every type; dates and timestamps also take "infinity" and
// "-infinity". A null value is refused: NULL is tested with is_null.
//
// # Semantics
//
//   - Three-valued logic, as in a SQL WHERE clause: a comparison with NULL is NULL, and a row
//     matches only when the filter is true. So neither {"eq":["a",1]} nor {"not":{"eq":["a",1]}}
//     matches a row whose a is NULL.
//   - A column absent from the image (an unchanged TOAST value, a key-only old image) is not
//     NULL but unknown: it could hold anything. Eval returns Unknown exactly when the answer
//     depends on it: false AND unknown is False, true OR unknown is True, NOT unknown is Unknown.
//   - Numbers compare by exact decimal value, never through a float64: 1 = 1.0 = 1e0, and
//     "9007199254740993" > 9007199254740992. -Infinity < finite < Infinity < NaN = NaN, as
//     Postgres orders them. A float4 compares as the decimal Herald sends for it.
//   - Text compares bytewise, which is Postgres's C collation, not the database's: "B" < "a".
//     Char ignores trailing spaces, except in like, which sees the padded value, as Postgres
//     does. like is case-sensitive and matches characters, not bytes.
//   - Timestamps compare as instants (Timestamp) or wall-clock times (LocalTimestamp) to the
//     millisecond: a literal is normalised to UTC and truncated to milliseconds, as pgvalue
//     normalises row values. infinity and -infinity order after and before every time.
//   - UUIDs compare by value, whatever the case or hyphens. Other compares the text exactly, so
//     two intervals Postgres calls equal but prints differently are different here.
//
// # Index keys
//
// Key gives the canonical spelling of a value, equal for values eq calls equal. IndexKeys gives
// a column and the keys a row's value must have for the filter to match, from an eq or in at
// the filter's top level, so the router can find candidate subscriptions by one lookup.
//
// # SQL
//
// Filter.SQL spells the filter as a parameterized SQL condition with Eval's meaning, for
// reading the rows a subscription starts from: every value a parameter, text compared
// bytewise, timestamps by the millisecond, floats as the decimal they print as. It keeps
// exactly the rows Eval calls True, or, where SQL cannot say what Eval says, more rows, never
// fewer; the reader still asks Eval of each row.
package filter
