package pgvalue

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// jsonCase is one text value, its type, and the JSON it must become.
type jsonCase struct {
	name string
	oid  uint32
	text string
	want string
}

func runJSONCases(t *testing.T, cases []jsonCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := AppendJSON(nil, tc.oid, []byte(tc.text))
			if string(got) != tc.want {
				t.Errorf("AppendJSON(%d, %q) = %s, want %s", tc.oid, tc.text, got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("AppendJSON(%d, %q) = %s, which is not valid JSON", tc.oid, tc.text, got)
			}
		})
	}
}

func TestIntegers(t *testing.T) { runJSONCases(t, integerCases) }

var integerCases = []jsonCase{
	{"int2 zero", Int2OID, "0", `0`},
	{"int2 max", Int2OID, "32767", `32767`},
	{"int2 min", Int2OID, "-32768", `-32768`},
	{"int2 above max", Int2OID, "32768", `"32768"`},
	{"int2 below min", Int2OID, "-32769", `"-32769"`},
	{"int4 max", Int4OID, "2147483647", `2147483647`},
	{"int4 min", Int4OID, "-2147483648", `-2147483648`},
	{"int4 above max", Int4OID, "2147483648", `"2147483648"`},
	{"int4 negative", Int4OID, "-42", `-42`},
	{"oid max", OIDOID, "4294967295", `4294967295`},
	{"oid above max", OIDOID, "4294967296", `"4294967296"`},
	{"oid negative", OIDOID, "-1", `"-1"`},
	{"int8 small", Int8OID, "42", `42`},
	{"int8 2^53", Int8OID, "9007199254740992", `9007199254740992`},
	{"int8 -2^53", Int8OID, "-9007199254740992", `-9007199254740992`},
	{"int8 2^53+1", Int8OID, "9007199254740993", `"9007199254740993"`},
	{"int8 -2^53-1", Int8OID, "-9007199254740993", `"-9007199254740993"`},
	{"int8 max", Int8OID, "9223372036854775807", `"9223372036854775807"`},
	{"int8 min", Int8OID, "-9223372036854775808", `"-9223372036854775808"`},
	{"int8 past uint64", Int8OID, "99999999999999999999999", `"99999999999999999999999"`},
	{"int8 2^64+5 must not wrap to 5", Int8OID, "18446744073709551621", `"18446744073709551621"`},
	{"leading zero", Int4OID, "007", `"007"`},
	{"plus sign", Int4OID, "+1", `"+1"`},
	{"fraction", Int4OID, "1.0", `"1.0"`},
	{"space", Int4OID, " 1", `" 1"`},
	{"lone minus", Int4OID, "-", `"-"`},
	{"empty", Int4OID, "", `""`},
}

func TestNumeric(t *testing.T) { runJSONCases(t, numericCases) }

var numericCases = []jsonCase{
	{"keeps scale", NumericOID, "1.10", `1.10`},
	{"integer", NumericOID, "100", `100`},
	{"negative", NumericOID, "-1.5", `-1.5`},
	{"zero", NumericOID, "0", `0`},
	{"zero with scale", NumericOID, "0.000", `0.000`},
	{"tenth", NumericOID, "0.1", `0.1`},
	{"negative tenth", NumericOID, "-0.1", `-0.1`},
	{"17 digits, shortest", NumericOID, "0.30000000000000004", `0.30000000000000004`},
	{"1 + ulp", NumericOID, "1.0000000000000002", `1.0000000000000002`},
	{"2^53", NumericOID, "9007199254740992", `9007199254740992`},
	{"2^53+1", NumericOID, "9007199254740993", `"9007199254740993"`},
	{"1e30", NumericOID, "1" + strings.Repeat("0", 30), "1" + strings.Repeat("0", 30)},
	{"max float64", NumericOID, "17976931348623157" + strings.Repeat("0", 292), "17976931348623157" + strings.Repeat("0", 292)},
	{"smallest subnormal", NumericOID, "0." + strings.Repeat("0", 323) + "5", "0." + strings.Repeat("0", 323) + "5"},
	{"15 digits", NumericOID, "1234567890.12345", `1234567890.12345`},
	{"16 digits, shortest", NumericOID, "0.1234567890123456", `0.1234567890123456`},
	{"1e308, past the 15-digit range", NumericOID, "1" + strings.Repeat("0", 308), "1" + strings.Repeat("0", 308)},
	{"1e-307", NumericOID, "0." + strings.Repeat("0", 306) + "1", "0." + strings.Repeat("0", 306) + "1"},
	{"15 digits past float64", NumericOID, strings.Repeat("9", 15) + strings.Repeat("0", 294), `"` + strings.Repeat("9", 15) + strings.Repeat("0", 294) + `"`},
	{"15 digits, subnormal", NumericOID, "0." + strings.Repeat("0", 319) + "123456789012345", `"0.` + strings.Repeat("0", 319) + `123456789012345"`},
	{"1e-308, subnormal", NumericOID, "0." + strings.Repeat("0", 307) + "1", "0." + strings.Repeat("0", 307) + "1"},
	{"1 + 1e-16 reads as 1", NumericOID, "1.0000000000000001", `"1.0000000000000001"`},
	{"18 significant digits", NumericOID, "1.00000000000000011", `"1.00000000000000011"`},
	{"exact value of 0.1", NumericOID, "0.1000000000000000055511151231257827021181583404541015625", `"0.1000000000000000055511151231257827021181583404541015625"`},
	{"0.1 to 19 places", NumericOID, "0.1000000000000000055", `"0.1000000000000000055"`},
	{"30 digits", NumericOID, "123456789012345678901234567890", `"123456789012345678901234567890"`},
	{"overflows float64", NumericOID, "1" + strings.Repeat("0", 400), `"1` + strings.Repeat("0", 400) + `"`},
	{"underflows float64", NumericOID, "0." + strings.Repeat("0", 400) + "1", `"0.` + strings.Repeat("0", 400) + `1"`},
	{"NaN", NumericOID, "NaN", `"NaN"`},
	{"Infinity", NumericOID, "Infinity", `"Infinity"`},
	{"-Infinity", NumericOID, "-Infinity", `"-Infinity"`},
	{"exponent", NumericOID, "1e5", `"1e5"`},
	{"leading zero", NumericOID, "01.5", `"01.5"`},
	{"bare fraction", NumericOID, ".5", `".5"`},
	{"trailing point", NumericOID, "1.", `"1."`},
	{"plus sign", NumericOID, "+1", `"+1"`},
	{"empty", NumericOID, "", `""`},
}

func TestFloat(t *testing.T) { runJSONCases(t, floatCases) }

var floatCases = []jsonCase{
	{"float8", Float8OID, "1.5", `1.5`},
	{"float8 exponent", Float8OID, "1e+100", `1e+100`},
	{"float8 negative exponent", Float8OID, "1.5e-07", `1.5e-07`},
	{"float8 17 digits", Float8OID, "1.2345678901234568e+17", `1.2345678901234568e+17`},
	{"negative zero", Float8OID, "-0", `-0`},
	{"float4", Float4OID, "0.1", `0.1`},
	{"float4 max", Float4OID, "3.4028235e+38", `3.4028235e+38`},
	{"NaN", Float8OID, "NaN", `"NaN"`},
	{"Infinity", Float8OID, "Infinity", `"Infinity"`},
	{"-Infinity", Float4OID, "-Infinity", `"-Infinity"`},
	{"dangling exponent", Float8OID, "1e", `"1e"`},
	{"bare fraction", Float8OID, ".5", `".5"`},
	{"word", Float8OID, "abc", `"abc"`},
	{"empty", Float8OID, "", `""`},
}

func TestBool(t *testing.T) { runJSONCases(t, boolCases) }

var boolCases = []jsonCase{
	{"t", BoolOID, "t", `true`},
	{"f", BoolOID, "f", `false`},
	{"true spelled out", BoolOID, "true", `"true"`},
	{"empty", BoolOID, "", `""`},
}

func TestRawJSON(t *testing.T) { runJSONCases(t, rawJSONCases) }

var rawJSONCases = []jsonCase{
	{"jsonb object", JSONBOID, `{"a": [1, 2.50], "b": null}`, `{"a": [1, 2.50], "b": null}`},
	{"jsonb big number keeps digits", JSONBOID, `12345678901234567890.123`, `12345678901234567890.123`},
	{"jsonb null", JSONBOID, `null`, `null`},
	{"jsonb string", JSONBOID, `"x"`, `"x"`},
	{"json keeps key order, drops white space", JSONOID, "{ \"b\":1,\n \"a\":2 }", `{"b":1,"a":2}`},
	{"json line breaks around a value", JSONOID, "\r\n\"x y\"\r\n", `"x y"`},
	{"json line breaks in an array", JSONOID, "[1,\r\n\t2, \"a \\\" b\"]\n", `[1,2,"a \" b"]`},
	{"json escaped line break stays", JSONOID, `{"s": "a\nb"}`, `{"s":"a\nb"}`},
	{"json raw control character in a string", JSONOID, "\"a\nb\"", `"\"a\nb\""`},
	{"jsonb keeps Postgres's spelling", JSONBOID, `{"a": 1}`, `{"a": 1}`},
	{"json duplicate keys", JSONOID, `{"a":1,"a":2}`, `{"a":1,"a":2}`},
	{"invalid", JSONOID, `{a}`, `"{a}"`},
	{"invalid UTF-8", JSONOID, "\"\xff\"", `"\"\ufffd\""`},
	{"empty", JSONBOID, "", `""`},
}

func TestBytea(t *testing.T) { runJSONCases(t, byteaCases) }

var byteaCases = []jsonCase{
	{"hex", ByteaOID, `\x0a0b`, `"\\x0a0b"`},
	{"upper hex is lowered", ByteaOID, `\xDEADbeef`, `"\\xdeadbeef"`},
	{"empty value", ByteaOID, `\x`, `"\\x"`},
	{"odd length", ByteaOID, `\x0a0`, `"\\x0a0"`},
	{"odd length upper stays", ByteaOID, `\xABC`, `"\\xABC"`},
	{"not hex", ByteaOID, `\xzz`, `"\\xzz"`},
	{"escape format", ByteaOID, `abc\000`, `"abc\\000"`},
	{"empty text", ByteaOID, ``, `""`},
}

func TestStrings(t *testing.T) { runJSONCases(t, stringCases) }

var stringCases = []jsonCase{
	{"text", TextOID, "hello", `"hello"`},
	{"text escapes", TextOID, "a\"b\\c\nd\x01", `"a\"b\\c\nd\u0001"`},
	{"text invalid UTF-8", TextOID, "a\xffb", `"a\ufffdb"`},
	{"text U+2028", TextOID, "a\u2028b", `"a\u2028b"`},
	{"text long", TextOID, strings.Repeat("x", 100), `"` + strings.Repeat("x", 100) + `"`},
	{"empty text", TextOID, "", `""`},
	{"varchar", VarcharOID, "v", `"v"`},
	{"bpchar keeps padding", BPCharOID, "ab  ", `"ab  "`},
	{"name", NameOID, "pg_class", `"pg_class"`},
	{"char", CharOID, "r", `"r"`},
	{"uuid", UUIDOID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
	{"interval", IntervalOID, "1 day 02:00:00", `"1 day 02:00:00"`},
	{"timetz", TimetzOID, "10:00:00+05:30", `"10:00:00+05:30"`},
	{"time", TimeOID, "14:00:00.123456", `"14:00:00.123456"`},
	{"date", DateOID, "2024-01-06", `"2024-01-06"`},
	{"date BC", DateOID, "0044-03-15 BC", `"0044-03-15 BC"`},
	{"date infinity", DateOID, "infinity", `"infinity"`},
	{"date -infinity", DateOID, "-infinity", `"-infinity"`},
	{"date five-digit year", DateOID, "12345-01-01", `"12345-01-01"`},
	{"money", 790, "$1,234.56", `"$1,234.56"`},
	{"inet", 869, "10.0.0.1/8", `"10.0.0.1/8"`},
	{"int4range", 3904, "[1,5)", `"[1,5)"`},
	{"enum, unknown OID", 16452, "happy", `"happy"`},
	{"OID 0", 0, "x", `"x"`},
	{"max OID", 1<<32 - 1, "x", `"x"`},
}

func TestAppendJSONAppends(t *testing.T) {
	for _, tc := range []jsonCase{
		{"number", Int4OID, "42", `42`},
		{"string", TextOID, "x", `"x"`},
		{"timestamptz", TimestamptzOID, "2024-01-06 14:00:00+00", `"2024-01-06T14:00:00.000Z"`},
		{"array", Int4ArrayOID, "{1,2}", `[1,2]`},
		{"malformed array keeps the prefix", Int4ArrayOID, "{1,2", `"{1,2"`},
		{"malformed nested array keeps the prefix", Int4ArrayOID, "{{1,2},{3}}", `"{{1,2},{3}}"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const prefix = `{"col":`
			got := AppendJSON([]byte(prefix), tc.oid, []byte(tc.text))
			if want := prefix + tc.want; string(got) != want {
				t.Errorf("AppendJSON(%q, %d, %q) = %s, want %s", prefix, tc.oid, tc.text, got, want)
			}
			if j := JSON(tc.oid, []byte(tc.text)); string(j) != tc.want {
				t.Errorf("JSON(%d, %q) = %s, want %s", tc.oid, tc.text, j, tc.want)
			}
		})
	}
}

func TestOIDByName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		want   uint32
		wantOK bool
	}{
		{"int4", Int4OID, true},
		{"_int4", Int4ArrayOID, true},
		{"int8", Int8OID, true},
		{"timestamptz", TimestamptzOID, true},
		{"_timestamptz", TimestamptzArrayOID, true},
		{"bool", BoolOID, true},
		{"jsonb", JSONBOID, true},
		{"_json", JSONArrayOID, true},
		{"numeric", NumericOID, true},
		{"bpchar", BPCharOID, true},
		{"_box", BoxArrayOID, true},
		{"inet", 869, true},
		{"xid8", 5069, true},
		{"_xid8", 271, true},
		{"SQL spelling", 0, false},
		{"integer", 0, false},
		{"timestamp with time zone", 0, false},
		{"INT4", 0, false},
		{"mood", 0, false},
		{"_", 0, false},
		{"", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := OIDByName(tc.name)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("OIDByName(%q) = %d, %v, want %d, %v", tc.name, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestCatalogueConsistent checks that every row of the catalogue is reachable both ways, so a
// typo in a name or a swapped OID pair shows up without a server.
func TestCatalogueConsistent(t *testing.T) {
	seen := map[uint32]string{}
	for _, b := range builtins {
		for _, o := range []struct {
			name string
			oid  uint32
		}{{b.name, b.oid}, {"_" + b.name, b.array}} {
			if other, dup := seen[o.oid]; dup {
				t.Errorf("OID %d is both %s and %s", o.oid, other, o.name)
			}
			seen[o.oid] = o.name
			if got, ok := OIDByName(o.name); !ok || got != o.oid {
				t.Errorf("OIDByName(%q) = %d, %v, want %d, true", o.name, got, ok, o.oid)
			}
		}
		elem, delim, ok := arrayElem(b.array)
		wantDelim := byte(',')
		if b.name == "box" {
			wantDelim = ';'
		}
		if !ok || elem != b.oid || delim != wantDelim {
			t.Errorf("arrayElem(%d) = %d, %q, %v, want %d, %q, true", b.array, elem, delim, ok, b.oid, wantDelim)
		}
		if _, _, ok := arrayElem(b.oid); ok {
			t.Errorf("arrayElem(%d) says %s is an array", b.oid, b.name)
		}
	}
}

// TestNoAllocations holds the common scalar paths, and arrays of them, to zero allocations when
// dst has room.
func TestNoAllocations(t *testing.T) {
	for _, tc := range []struct {
		name string
		oid  uint32
		text string
	}{
		{"int4", Int4OID, "123456"},
		{"int8", Int8OID, "9007199254740993"},
		{"numeric", NumericOID, "12345.678"},
		{"float8", Float8OID, "1.2345678901234568e+17"},
		{"bool", BoolOID, "t"},
		{"text", TextOID, strings.Repeat("long text ", 20)},
		{"uuid", UUIDOID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{"bytea", ByteaOID, `\xDEADBEEF`},
		{"timestamptz UTC", TimestamptzOID, "2024-01-06 14:00:00.123456+00"},
		{"timestamptz offset", TimestamptzOID, "1883-11-18 07:03:58-04:56:02"},
		{"timestamp", TimestampOID, "2024-01-06 14:00:00.123456"},
		{"int4 array", Int4ArrayOID, "{{1,2},{3,NULL}}"},
		{"text array with escapes", TextArrayOID, `{"a,b","c\"d",NULL,plain}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := []byte(tc.text)
			dst := make([]byte, 0, 1024)
			if n := testing.AllocsPerRun(100, func() { AppendJSON(dst, tc.oid, text) }); n != 0 {
				t.Errorf("AppendJSON(%d, %q) makes %v allocations, want 0", tc.oid, tc.text, n)
			}
		})
	}
}

// TestSafeDigitsAreShortest checks the shortcut numericRoundTrips takes: a decimal of at most
// safeDigits significant digits, between 10^safeMinExp and 10^(safeMaxExp+1), is the shortest
// decimal of the float64 it reads as.
func TestSafeDigitsAreShortest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(sig string, exp int) {
		t.Helper()
		if !isShortestFloat64([]byte(sig), exp) {
			t.Errorf("%s.%se%d is not the shortest decimal of its float64", sig[:1], sig[1:], exp)
		}
	}
	for exp := safeMinExp; exp <= safeMaxExp; exp++ {
		check("1", exp)
		check("999999999999999", exp)
		check("100000000000001", exp)
		for range 30 {
			sig := strconv.FormatUint(rng.Uint64N(9e14)+1e14, 10) // 15 digits
			sig = strings.TrimRight(sig[:1+rng.IntN(safeDigits)], "0")
			check(sig, exp)
		}
	}
	// The check itself can say no.
	if isShortestFloat64([]byte("9007199254740993"), 15) {
		t.Errorf("9.007199254740993e15 (2^53+1) says it is the shortest decimal of a float64")
	}
}
