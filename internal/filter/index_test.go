package filter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

func TestIndexKeys(t *testing.T) {
	for _, tc := range []struct {
		filter string
		col    string
		keys   string // space-separated; "-" for none
	}{
		{`{"eq":["org_id","acme"]}`, "org_id", "acme"},
		{`{"eq":["qty",5.0]}`, "qty", "5"},
		{`{"eq":["id","9007199254740993"]}`, "id", "9007199254740993"},
		{`{"eq":["uid","A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"]}`, "uid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{`{"eq":["at","2024-01-06T10:30:00+02:00"]}`, "at", "2024-01-06T08:30:00.000Z"},
		{`{"eq":["local","2024-01-06T10:30:00"]}`, "local", "2024-01-06T10:30:00.000"},
		{`{"eq":["day","2024-01-06"]}`, "day", "2024-01-06"},
		{`{"eq":["flag",true]}`, "flag", "true"},
		{`{"eq":["code","AB  "]}`, "code", "AB"},
		{`{"eq":["status","open"]}`, "status", "open"},
		{`{"in":["qty",[3,1,2,1.0]]}`, "qty", "1 2 3"},
		{`{"in":["qty",[10,9]]}`, "qty", "10 9"}, // keys sort as strings
		{`{"in":["qty",[]]}`, "qty", ""},
		{`{"and":[{"gt":["qty",5]},{"eq":["org_id","acme"]}]}`, "org_id", "acme"},
		{`{"and":[{"in":["qty",[1]]},{"eq":["org_id","acme"]}]}`, "qty", "1"},
		{`{"and":[{"in":["qty",[1,2]]},{"eq":["org_id","acme"]}]}`, "org_id", "acme"},
		{`{"and":[{"eq":["org_id","acme"]},{"eq":["qty",1]}]}`, "org_id", "acme"},
		{`{"and":[{"gt":["qty",5]},{"and":[{"eq":["name","x"]}]}]}`, "name", "x"},
		{`{"or":[{"eq":["qty",1]},{"in":["qty",[2,1]]}]}`, "qty", "1 2"},
		{`{"or":[{"eq":["qty",1]},{"and":[{"eq":["qty",2]},{"gt":["small",0]}]}]}`, "qty", "1 2"},
		{`{"or":[{"eq":["qty",1]},{"eq":["small",2]}]}`, "-", "-"},
		{`{"or":[{"eq":["qty",1]},{"gt":["qty",2]}]}`, "-", "-"},
		{`{"or":[]}`, "-", "-"},
		{`{"and":[]}`, "-", "-"},
		{`{"neq":["org_id","acme"]}`, "-", "-"},
		{`{"not":{"eq":["org_id","acme"]}}`, "-", "-"},
		{`{"not":{"not":{"eq":["org_id","acme"]}}}`, "-", "-"},
		{`{"like":["org_id","acme"]}`, "-", "-"},
		{`{"is_null":"org_id"}`, "-", "-"},
		{`{"and":[{"gt":["qty",5]},{"lt":["qty",9]}]}`, "-", "-"},
	} {
		t.Run(tc.filter, func(t *testing.T) {
			col, keys, ok := mustParse(t, tc.filter).IndexKeys()
			if tc.col == "-" {
				if ok {
					t.Errorf("IndexKeys() = %s %q, want none", col, keys)
				}
				return
			}
			if !ok || col != tc.col || strings.Join(keys, " ") != tc.keys {
				t.Errorf("IndexKeys() = %s %q %v, want %s %q", col, keys, ok, tc.col, tc.keys)
			}
		})
	}
}

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		t        Type
		raw, key string
	}{
		{Number, `1`, "1"},
		{Number, `1.0`, "1"},
		{Number, `"1.00"`, "1"},
		{Number, `-0`, "0"},
		{Number, `"9007199254740993"`, "9007199254740993"},
		{Number, `9007199254740993`, "9007199254740993"},
		{Number, `"NaN"`, "NaN"},
		{Text, `"acme"`, "acme"},
		{Text, `"a\u00e9\n"`, "aé\n"},
		{Text, `""`, ""},
		{Char, `"AB   "`, "AB"},
		{Other, `"open"`, "open"},
		{Bool, `true`, "true"},
		{Bool, `false`, "false"},
		{UUID, `"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"`, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{Timestamp, `"2024-01-06T08:30:00.123Z"`, "2024-01-06T08:30:00.123Z"},
		{Timestamp, `"2024-01-06 10:30:00.1239+02"`, "2024-01-06T08:30:00.123Z"},
		{LocalTimestamp, `"2024-01-06T08:30:00.123"`, "2024-01-06T08:30:00.123"},
		{Date, `"2024-01-06"`, "2024-01-06"},
	} {
		key, ok := Key(tc.t, json.RawMessage(tc.raw))
		if !ok || key != tc.key {
			t.Errorf("Key(%s, %s) = %q, %v; want %q", tc.t, tc.raw, key, ok, tc.key)
		}
	}
	for _, tc := range []struct {
		t   Type
		raw string
	}{
		{Number, `null`}, {Text, `null`}, {Bool, `null`}, {Number, `"x"`}, {Text, `1`},
		{Bool, `"true"`}, {UUID, `"x"`}, {Unsupported, `{"a":1}`}, {Unsupported, `"a"`},
		{Text, `"unterminated`}, {Text, `"bad \q escape"`}, {Text, `"\u12"`},
	} {
		if key, ok := Key(tc.t, json.RawMessage(tc.raw)); ok {
			t.Errorf("Key(%s, %s) = %q, want not ok", tc.t, tc.raw, key)
		}
	}
}

func TestTypeOf(t *testing.T) {
	for oid, want := range map[uint32]Type{
		pgvalue.Int2OID: Number, pgvalue.Int4OID: Number, pgvalue.Int8OID: Number,
		pgvalue.OIDOID: Number, pgvalue.NumericOID: Number, pgvalue.Float4OID: Number,
		pgvalue.Float8OID: Number, pgvalue.TextOID: Text, pgvalue.VarcharOID: Text,
		pgvalue.NameOID: Text, pgvalue.CharOID: Text, pgvalue.BPCharOID: Char,
		pgvalue.BoolOID: Bool, pgvalue.TimestamptzOID: Timestamp,
		pgvalue.TimestampOID: LocalTimestamp, pgvalue.DateOID: Date, pgvalue.UUIDOID: UUID,
		pgvalue.JSONOID: Unsupported, pgvalue.JSONBOID: Unsupported,
		pgvalue.Int4ArrayOID: Unsupported, pgvalue.TimeOID: Other, pgvalue.IntervalOID: Other,
		pgvalue.ByteaOID: Other, 869 /* inet */ : Other, enumOID: Other,
	} {
		if got := TypeOf(oid); got != want {
			t.Errorf("TypeOf(%d) = %v, want %v", oid, got, want)
		}
	}
}

// TestArraysMatchPgvalue checks that the array types TypeOf calls Unsupported are exactly
// those pgvalue turns into JSON arrays.
func TestArraysMatchPgvalue(t *testing.T) {
	for oid := uint32(0); oid < 20000; oid++ {
		isArray := string(pgvalue.JSON(oid, []byte("{}"))) == "[]"
		_, listed := builtinArrays[oid]
		if isArray != listed {
			t.Errorf("oid %d: pgvalue decodes it as an array: %v; listed in builtinArrays: %v", oid, isArray, listed)
		}
	}
}

// TestTypeNames: every Type has a name of its own.
func TestTypeNames(t *testing.T) {
	seen := map[string]bool{}
	for typ := Unsupported; typ <= Other; typ++ {
		name := typ.String()
		if name == "" || seen[name] || strings.HasPrefix(name, "type(") {
			t.Errorf("Type %d has name %q", typ, name)
		}
		seen[name] = true
	}
	if got := Type(200).String(); got != "type(200)" {
		t.Errorf("Type(200).String() = %q", got)
	}
}

// TestOIDsMatchPgvalue: the filter's copy of the built-in type OIDs is pgvalue's.
func TestOIDsMatchPgvalue(t *testing.T) {
	for _, c := range []struct{ mine, theirs uint32 }{
		{boolOID, pgvalue.BoolOID}, {byteaOID, pgvalue.ByteaOID}, {charOID, pgvalue.CharOID},
		{nameOID, pgvalue.NameOID}, {int8OID, pgvalue.Int8OID}, {int2OID, pgvalue.Int2OID},
		{int4OID, pgvalue.Int4OID}, {textOID, pgvalue.TextOID}, {oidOID, pgvalue.OIDOID},
		{jsonOID, pgvalue.JSONOID}, {float4OID, pgvalue.Float4OID}, {float8OID, pgvalue.Float8OID},
		{bpcharOID, pgvalue.BPCharOID}, {varcharOID, pgvalue.VarcharOID}, {dateOID, pgvalue.DateOID},
		{timeOID, pgvalue.TimeOID}, {timestampOID, pgvalue.TimestampOID}, {timestamptzOID, pgvalue.TimestamptzOID},
		{intervalOID, pgvalue.IntervalOID}, {timetzOID, pgvalue.TimetzOID}, {numericOID, pgvalue.NumericOID},
		{uuidOID, pgvalue.UUIDOID}, {jsonbOID, pgvalue.JSONBOID},
	} {
		if c.mine != c.theirs {
			t.Errorf("filter has OID %d where pgvalue has %d", c.mine, c.theirs)
		}
	}
}
