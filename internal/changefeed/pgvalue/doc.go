// Package pgvalue turns one Postgres text-format value and its type OID into a JSON value.
//
// It is pure: no I/O, no goroutines, no state but a read-only type catalogue. It reads the text a
// walsender writes under timezone=UTC, datestyle=ISO, intervalstyle=postgres, bytea_output=hex
// and extra_float_digits=3, and it never fails: text it cannot read as its type becomes a JSON
// string of that text, so a value may stay unconverted but is never lost. SQL NULL and unchanged
// TOAST columns have no text and are the caller's to spell.
//
// # Mapping
//
//	type                        JSON                                       example
//	int2, int4, oid             number                                     42
//	int8                        number when |v| <= 2^53, else string       42, "9007199254740993"
//	numeric                     number in Postgres's own digits when a     1.10, "0.1000000000000000055"
//	                            float64 reads back that value, else
//	                            string; NaN and ±Infinity are strings      "NaN"
//	float4, float8              number; NaN, Infinity, -Infinity are       1.5e-07, -0, "NaN"
//	                            strings
//	bool                        true, false
//	json                        the JSON as written, white space between   {"a":[1,2.50]}
//	                            tokens dropped
//	jsonb                       the JSON as Postgres wrote it              {"a": [1, 2.50]}
//	bytea                       string of the hex text, lowercase          "\\x0a0b"
//	timestamptz                 string: RFC 3339 UTC, milliseconds         "2024-01-06T08:30:00.123Z"
//	timestamp                   string: RFC 3339 without zone, millis      "2024-01-06T14:00:00.123"
//	date, time, timetz,         string of the text                         "2024-01-06", "1 day 02:00:00"
//	interval, uuid, text,
//	varchar, bpchar, name,
//	money, inet, ranges, ...
//	arrays of built-in types    nested arrays, elements by their type      [[1,2],[3,4]], ["a",null]
//	any other OID               string of the text                         "happy"
//
// # Why
//
// Numbers. A JSON number reaches most clients as a float64, and in JavaScript as nothing else.
// A value is a number only when that reader gets the database's value back; otherwise it is a
// string, and the client picks its own decimal or big-integer type. For int8 the bound is 2^53,
// beyond which integers are no longer exact. For numeric the test is exact, on digits rather than
// floats: the text must be the shortest decimal of the float64 it parses to, trailing zeros aside.
// So 0.1 and 1.10 are numbers (a client prints them back as 0.1 and 1.1), while 0.1 written out
// to 19 places is a string, because the float64 it rounds to prints as 0.1. The number keeps
// Postgres's own digits, scale included, for a client that reads JSON numbers as decimals.
// NaN, Infinity and -0: JSON has no spelling for the first two, so they are strings; -0 is a
// valid JSON number and stays one.
//
// Time. A timestamptz's text carries whatever offset its zone had at that instant, including a
// local-mean-time offset with seconds (-04:56:02) that many parsers misread or reject, so it is
// normalised to one spelling that Date.parse and time.Parse both read: UTC, RFC 3339, always
// three fraction digits. Milliseconds, because that is what a JavaScript Date holds. Truncated,
// not rounded: rounding can carry 23:59:59.9995 into the next day or year, while truncation
// leaves every field but the fraction as Postgres printed it. A timestamp gets no Z: it is a wall
// clock, not an instant. infinity, -infinity, BC values and years past 9999 have no RFC 3339
// spelling and stay text, which keeps them lossless and tells them apart from any instant. date
// and time stay text: a calendar day or a clock reading has no zone to normalise.
//
// bytea. Kept as Postgres's \x hex text rather than re-encoded as base64: it is the spelling
// psql shows and Postgres reads back as a bytea literal, so a client can write the value back as
// it came, and passing it on costs a validation but no decode or re-encode. Hex letters are
// lowered so one value has one spelling.
//
// Arrays. Array text is parsed, not passed on, because its quoting rules are Postgres's own.
// An unquoted NULL is null; a quoted "NULL" is the string NULL. A multi-dimensional array keeps
// its shape as nested JSON arrays. A dimension decoration such as [0:1]={7,8} is checked against
// the shape and then dropped: lower bounds are not kept, and every JSON array starts at index 0.
// Only a jsonb or json element reads as JSON null without being SQL NULL, as the top-level value
// does; JSON cannot tell the two apart.
//
// Domains and types announced by a pgoutput Type message: OIDByName maps a pg_catalog type name
// to its OID, so a domain, which a Type message names by its base type, decodes as that type.
package pgvalue
