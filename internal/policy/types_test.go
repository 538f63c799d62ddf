package policy

import (
	"testing"

	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

// TestOIDsMatchPgvalue: the policy's integer OIDs are pgvalue's.
func TestOIDsMatchPgvalue(t *testing.T) {
	for _, c := range []struct{ mine, theirs uint32 }{
		{int8OID, pgvalue.Int8OID}, {int2OID, pgvalue.Int2OID}, {int4OID, pgvalue.Int4OID}, {oidOID, pgvalue.OIDOID},
	} {
		if c.mine != c.theirs {
			t.Errorf("policy has OID %d where pgvalue has %d", c.mine, c.theirs)
		}
	}
}

func TestKinds(t *testing.T) {
	tests := []struct {
		typ  string
		want kind
	}{
		{"int2", kindInt}, {"int4", kindInt}, {"int8", kindInt}, {"oid", kindInt},
		{"numeric", kindDouble}, {"float4", kindDouble}, {"float8", kindDouble},
		{"text", kindString}, {"varchar", kindString}, {"uuid", kindString}, {"interval", kindString}, {"bytea", kindString},
		{"bpchar", kindChar}, {"bool", kindBool},
		{"timestamptz", kindTimestamp}, {"timestamp", kindTimestamp}, {"date", kindTimestamp},
		{"json", kindDyn}, {"jsonb", kindDyn}, {"_int4", kindDyn}, {"_text", kindDyn},
	}
	for _, tc := range tests {
		oid, ok := pgvalue.OIDByName(tc.typ)
		if !ok {
			t.Fatalf("pgvalue knows no type %s", tc.typ)
		}
		if got := kindOf(oid); got != tc.want {
			t.Errorf("kindOf(%s) = %d, want %d", tc.typ, got, tc.want)
		}
	}
}

func TestDecodeValues(t *testing.T) {
	tests := []struct {
		k    kind
		raw  string
		want string // the CEL value's Go form, or "error"
	}{
		{kindInt, `42`, "42"},
		{kindInt, `"9007199254740993"`, "9007199254740993"},
		{kindInt, `4.5`, "error"},
		{kindDouble, `19.99`, "19.99"},
		{kindDouble, `"NaN"`, "NaN"},
		{kindDouble, `"-Infinity"`, "-Inf"},
		{kindDouble, `"0.1000000000000000055"`, "0.1"},
		{kindString, `"a\"b"`, `a"b`},
		{kindChar, `"AB  "`, "AB"},
		{kindBool, `true`, "true"},
		{kindTimestamp, `"2024-01-06T08:30:00.123Z"`, "2024-01-06 08:30:00.123 +0000 UTC"},
		{kindTimestamp, `"2024-01-06T14:00:00.123"`, "2024-01-06 14:00:00.123 +0000 UTC"},
		{kindTimestamp, `"2024-01-06"`, "2024-01-06 00:00:00 +0000 UTC"},
		{kindTimestamp, `"infinity"`, "error"},
		{kindDyn, `[1,"a"]`, "[1 a]"},
		{kindInt, `null`, "NULL_VALUE"},
	}
	for _, tc := range tests {
		v := decodeValue(tc.k, "c", []byte(tc.raw))
		got := "error"
		if !isErr(v) {
			got = fmtVal(v)
		}
		if got != tc.want {
			t.Errorf("decodeValue(%d, %s) = %s, want %s", tc.k, tc.raw, got, tc.want)
		}
	}
}
