package filter

import (
	"strconv"
)

// Type is a column's comparison category: which operators apply to its values and how they
// compare. TypeOf derives it from the column's type OID.
type Type uint8

// The categories. The zero Type is Unsupported, so a column of no known category admits only
// the null tests.
const (
	// Unsupported: json, jsonb and arrays of built-in types. Their values are JSON documents,
	// whose equality is not what the text of a literal says, so only is_null and not_null apply.
	Unsupported Type = iota
	// Number: int2, int4, int8, oid, numeric, float4, float8. Compared by exact decimal value.
	Number
	// Text: text, varchar, name and "char". Compared bytewise (the C collation).
	Text
	// Char: bpchar, that is char(n). As Text, except that trailing spaces do not count in
	// comparisons, as in Postgres; like sees the padded value.
	Char
	// Bool: bool. eq, neq and in.
	Bool
	// Timestamp: timestamptz. Compared as instants, to the millisecond.
	Timestamp
	// LocalTimestamp: timestamp without time zone. Compared as wall-clock times, to the
	// millisecond.
	LocalTimestamp
	// Date: date. Compared as calendar days.
	Date
	// UUID: uuid. eq, neq and in, whatever the case and hyphens of the literal.
	UUID
	// Other: every type Herald sends as the text Postgres prints and has no rule for here: enums,
	// domains and composite types unknown to pgvalue, time, timetz, interval, inet, bytea, money,
	// ranges, .... eq, neq and in compare that text exactly, bytewise.
	Other
)

var typeNames = [...]string{
	Unsupported:    "unsupported",
	Number:         "number",
	Text:           "text",
	Char:           "char",
	Bool:           "bool",
	Timestamp:      "timestamp",
	LocalTimestamp: "local_timestamp",
	Date:           "date",
	UUID:           "uuid",
	Other:          "other",
}

// String returns the category's name.
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// Column is one column of the table a filter is checked against.
type Column struct {
	Name string
	// OID is the type OID Herald decodes the column's values with: for a domain, its base
	// type's (pgvalue.OIDByName).
	OID uint32
}

// TypeOf returns the comparison category of a column of type oid, by pgvalue's mapping of that
// type to JSON.
func TypeOf(oid uint32) Type {
	switch oid {
	case int2OID, int4OID, int8OID, oidOID,
		numericOID, float4OID, float8OID:
		return Number
	case textOID, varcharOID, nameOID, charOID:
		return Text
	case bpcharOID:
		return Char
	case boolOID:
		return Bool
	case timestamptzOID:
		return Timestamp
	case timestampOID:
		return LocalTimestamp
	case dateOID:
		return Date
	case uuidOID:
		return UUID
	case jsonOID, jsonbOID:
		return Unsupported
	}
	if _, ok := builtinArrays[oid]; ok {
		return Unsupported
	}
	return Other
}

// builtinArrays holds the array types pgvalue decodes into JSON arrays: the typarray of every
// pg_catalog base, range and multirange type (pg_type.dat; fixed across Postgres versions).
// TestArraysMatchPgvalue checks the set against pgvalue itself.
var builtinArrays = map[uint32]struct{}{
	1000: {}, 1001: {}, 1002: {}, 1003: {}, 1016: {}, 1005: {}, 1007: {}, 1008: {}, 1009: {},
	1028: {}, 1010: {}, 1011: {}, 1012: {}, 199: {}, 143: {}, 1017: {}, 1018: {}, 1019: {},
	1020: {}, 1027: {}, 629: {}, 651: {}, 1021: {}, 1022: {}, 719: {}, 775: {}, 791: {},
	1040: {}, 1041: {}, 1034: {}, 1014: {}, 1015: {}, 1182: {}, 1183: {}, 1115: {}, 1185: {},
	1187: {}, 1270: {}, 1561: {}, 1563: {}, 1231: {}, 2201: {}, 2207: {}, 2208: {}, 2209: {},
	2210: {}, 2211: {}, 2951: {}, 2949: {}, 3221: {}, 3643: {}, 3645: {}, 3644: {}, 3735: {},
	3770: {}, 3807: {}, 3905: {}, 3907: {}, 3909: {}, 3911: {}, 3913: {}, 3927: {}, 4073: {},
	4090: {}, 4097: {}, 4192: {}, 6150: {}, 6151: {}, 6152: {}, 6153: {}, 6155: {}, 6157: {},
	5039: {}, 271: {},
}

// oidNames names the types a message may mention; others print as their OID.
var oidNames = map[uint32]string{
	boolOID: "bool", byteaOID: "bytea", charOID: `"char"`,
	nameOID: "name", int8OID: "int8", int2OID: "int2",
	int4OID: "int4", textOID: "text", oidOID: "oid",
	jsonOID: "json", float4OID: "float4", float8OID: "float8",
	bpcharOID: "bpchar", varcharOID: "varchar", dateOID: "date",
	timeOID: "time", timestampOID: "timestamp",
	timestamptzOID: "timestamptz", intervalOID: "interval",
	timetzOID: "timetz", numericOID: "numeric", uuidOID: "uuid",
	jsonbOID: "jsonb",
}

func oidName(oid uint32) string {
	if n, ok := oidNames[oid]; ok {
		return n
	}
	if _, ok := builtinArrays[oid]; ok {
		return "an array type"
	}
	return "type oid " + strconv.FormatUint(uint64(oid), 10)
}

// op is a filter operator.
type op uint8

const (
	opEq op = iota
	opNeq
	opLt
	opLte
	opGt
	opGte
	opIn
	opLike
	opIsNull
	opNotNull
	opAnd
	opOr
	opNot
	numOps
)

// opNames spells each operator as the grammar does. TestDocumentsEveryOperator checks that
// docs/FILTERS.md documents each.
var opNames = [numOps]string{
	opEq: "eq", opNeq: "neq", opLt: "lt", opLte: "lte", opGt: "gt", opGte: "gte",
	opIn: "in", opLike: "like", opIsNull: "is_null", opNotNull: "not_null",
	opAnd: "and", opOr: "or", opNot: "not",
}

func (o op) String() string { return opNames[o] }

func lookupOp(s string) (op, bool) {
	for i, n := range opNames {
		if n == s {
			return op(i), true
		}
	}
	return 0, false
}

// ordered reports whether values of t have an order the comparison operators may use.
func (t Type) ordered() bool {
	switch t {
	case Number, Text, Char, Timestamp, LocalTimestamp, Date:
		return true
	}
	return false
}

// allows reports whether o applies to a column of type t.
func (t Type) allows(o op) bool {
	switch o {
	case opIsNull, opNotNull:
		return true
	case opEq, opNeq, opIn:
		return t != Unsupported
	case opLt, opLte, opGt, opGte:
		return t.ordered()
	case opLike:
		return t == Text || t == Char
	}
	return false
}

// allowedOps lists the column operators t admits, for a message.
func (t Type) allowedOps() string {
	var s string
	for o := opEq; o <= opNotNull; o++ {
		if t.allows(o) {
			if s != "" {
				s += ", "
			}
			s += o.String()
		}
	}
	return s
}
