package filter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseMatchAll(t *testing.T) {
	for _, raw := range []string{"", "null", "  null\n", " "} {
		f, err := Parse(json.RawMessage(raw), testCols)
		if err != nil {
			t.Fatalf("Parse(%q): %v", raw, err)
		}
		if got := f.Eval(nil); got != True {
			t.Errorf("Parse(%q).Eval(nil) = %v, want true", raw, got)
		}
		if got := f.String(); got != "null" {
			t.Errorf("Parse(%q).String() = %s, want null", raw, got)
		}
		if _, _, ok := f.IndexKeys(); ok {
			t.Errorf("Parse(%q).IndexKeys() ok, want none", raw)
		}
	}
	var nilFilter *Filter
	if nilFilter.Eval(nil) != True || nilFilter.String() != "null" || nilFilter.Columns() != nil {
		t.Error("a nil *Filter does not behave as match-all")
	}
}

func TestParseCanonical(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"eq text", `{"eq":["org_id","acme"]}`, `{"eq":["org_id","acme"]}`},
		{"whitespace", ` { "eq" : [ "org_id" , "acme" ] } `, `{"eq":["org_id","acme"]}`},
		{"all comparisons", `{"and":[{"neq":["qty",1]},{"lt":["qty",2]},{"lte":["qty",3]},{"gt":["qty",4]},{"gte":["qty",5]}]}`,
			`{"and":[{"neq":["qty",1]},{"lt":["qty",2]},{"lte":["qty",3]},{"gt":["qty",4]},{"gte":["qty",5]}]}`},
		{"number spellings", `{"or":[{"eq":["price",1.50]},{"eq":["price",1e3]},{"eq":["price",-0.0]},{"eq":["price",0.0000001]},{"eq":["price",12345678901234567890123]}]}`,
			`{"or":[{"eq":["price",1.5]},{"eq":["price",1000]},{"eq":["price",0]},{"eq":["price",1e-7]},{"eq":["price",1.2345678901234567890123e+22]}]}`},
		{"int8 string", `{"eq":["id","9007199254740993"]}`, `{"eq":["id",9007199254740993]}`},
		{"numeric NaN", `{"gt":["price","NaN"]}`, `{"gt":["price","NaN"]}`},
		{"float infinity", `{"lt":["ratio","-Infinity"]}`, `{"lt":["ratio","-Infinity"]}`},
		{"in sorted and deduplicated", `{"in":["qty",[3,1,2,1.0,2e0]]}`, `{"in":["qty",[1,2,3]]}`},
		{"in empty", `{"in":["qty",[]]}`, `{"in":["qty",[]]}`},
		{"in text", `{"in":["org_id",["b","a","b"]]}`, `{"in":["org_id",["a","b"]]}`},
		{"uuid", `{"eq":["uid","{A0EEBC999C0B4EF8BB6D6BB9BD380A11}"]}`, `{"eq":["uid","a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]}`},
		{"timestamptz offset", `{"eq":["at","2024-01-06T10:30:00.1239+02:00"]}`, `{"eq":["at","2024-01-06T08:30:00.123Z"]}`},
		{"timestamptz infinity", `{"lt":["at","infinity"]}`, `{"lt":["at","infinity"]}`},
		{"timestamp", `{"gte":["local","2024-01-06T14:00:00"]}`, `{"gte":["local","2024-01-06T14:00:00.000"]}`},
		{"date", `{"lt":["day","2024-02-29"]}`, `{"lt":["day","2024-02-29"]}`},
		{"bool", `{"neq":["flag",false]}`, `{"neq":["flag",false]}`},
		{"char trims", `{"eq":["code","AB  "]}`, `{"eq":["code","AB"]}`},
		{"like kept", `{"like":["code","AB _\\%"]}`, `{"like":["code","AB _\\%"]}`},
		{"enum", `{"in":["status",["open","closed"]]}`, `{"in":["status",["closed","open"]]}`},
		{"null tests", `{"or":[{"is_null":"doc"},{"not_null":"tags"}]}`, `{"or":[{"is_null":"doc"},{"not_null":"tags"}]}`},
		{"not", `{"not":{"not":{"eq":["flag",true]}}}`, `{"not":{"not":{"eq":["flag",true]}}}`},
		{"empty and, or", `{"and":[{"and":[]},{"or":[]}]}`, `{"and":[{"and":[]},{"or":[]}]}`},
		{"escapes", `{"eq":["org_id","a\"b\\c\u00e9\n\u2028"]}`, `{"eq":["org_id","a\"b\\cé\n\u2028"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := mustParse(t, tc.in)
			if got := f.String(); got != tc.want {
				t.Errorf("String() = %s\nwant        %s", got, tc.want)
			}
			again := mustParse(t, f.String())
			if again.String() != f.String() {
				t.Errorf("re-parsed String() = %s, want %s", again.String(), f.String())
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	long := strings.Repeat("x", MaxLiteralBytes+1)
	deep := strings.Repeat(`{"not":`, MaxDepth) + `{"is_null":"qty"}` + strings.Repeat("}", MaxDepth)
	var wide strings.Builder
	wide.WriteString(`{"or":[`)
	for i := range MaxNodes / 2 {
		if i > 0 {
			wide.WriteString(",")
		}
		wide.WriteString(`{"eq":["qty",1]}`)
	}
	wide.WriteString("]}")
	var many strings.Builder
	many.WriteString(`{"in":["qty",[0`)
	for i := 1; i <= MaxInValues; i++ {
		many.WriteString(",1")
	}
	many.WriteString("]]}")

	for _, tc := range []struct {
		name, in string
		code     Code
		path     string
		detail   string // a substring of Detail
	}{
		// JSON and shape
		{"invalid JSON", `{"eq":["qty",1]`, CodeBadFilter, "", "ends early"},
		{"syntax error", `{"eq":["qty",1}]}`, CodeBadFilter, "eq", "not valid JSON"},
		{"garbage", `eq`, CodeBadFilter, "", "not valid JSON"},
		{"trailing", `{"eq":["qty",1]} {}`, CodeBadFilter, "", "goes on after its end"},
		{"too large", `{"eq":["org_id","` + strings.Repeat("x", MaxBytes) + `"]}`, CodeBadFilter, "", "bytes long"},
		{"not an object", `[{"eq":["qty",1]}]`, CodeBadFilter, "", "a filter is a JSON object"},
		{"string", `"qty"`, CodeBadFilter, "", "got the string"},
		{"empty object", `{}`, CodeBadFilter, "", "empty object"},
		{"unknown operator", `{"equals":["qty",1]}`, CodeBadFilter, "", `unknown operator "equals"`},
		{"unknown operator nested", `{"or":[{"eq":["qty",1]},{"not":{"EQ":["qty",1]}}]}`, CodeBadFilter, "or[1].not", "unknown operator"},
		{"long unknown operator", `{"` + strings.Repeat("x", 1000) + `":1}`, CodeBadFilter, "", `unknown operator "xxxx`},
		{"two operators", `{"eq":["qty",1],"gt":["qty",0]}`, CodeBadFilter, "", `holds "eq" and "gt"`},
		{"duplicate operator", `{"eq":["qty",1],"eq":["qty",2]}`, CodeBadFilter, "", `holds "eq" and "eq"`},

		// operands
		{"operands not an array", `{"eq":"qty"}`, CodeBadFilter, "eq", "takes an array of operands"},
		{"no operands", `{"eq":[]}`, CodeBadFilter, "eq", "got none"},
		{"column not a string", `{"eq":[1,1]}`, CodeBadFilter, "eq[0]", "column name first"},
		{"value missing", `{"gt":["qty"]}`, CodeBadFilter, "gt", "got only the column"},
		{"extra operand", `{"eq":["qty",1,2]}`, CodeBadFilter, "eq[2]", "got more"},
		{"in list missing", `{"in":["qty"]}`, CodeBadFilter, "in", "got only the column"},
		{"in not a list", `{"in":["org_id","a"]}`, CodeBadFilter, "in[1]", "in takes a list of values"},
		{"in extra", `{"in":["qty",[1],[2]]}`, CodeBadFilter, "in[2]", "got more"},
		{"is_null array", `{"is_null":["qty"]}`, CodeBadFilter, "is_null", "takes a column name"},
		{"not_null number", `{"not_null":1}`, CodeBadFilter, "not_null", "takes a column name"},
		{"and not array", `{"and":{"eq":["qty",1]}}`, CodeBadFilter, "and", "takes an array of operands"},
		{"and operand not object", `{"and":[{"eq":["qty",1]},"x"]}`, CodeBadFilter, "and[1]", "a filter is a JSON object"},
		{"not array", `{"not":[{"eq":["qty",1]}]}`, CodeBadFilter, "not", "got an array"},
		{"not null", `{"not":null}`, CodeBadFilter, "not", "got null"},

		// columns
		{"unknown column", `{"eq":["qyt",1]}`, CodeUnknownColumn, "eq[0]", `no column "qyt"`},
		{"unknown column nested", `{"and":[{"eq":["qty",1]},{"not":{"in":["nope",[1]]}}]}`, CodeUnknownColumn, "and[1].not.in[0]", `no column "nope"`},
		{"unknown column is_null", `{"is_null":"nope"}`, CodeUnknownColumn, "is_null", `no column "nope"`},
		{"column case", `{"eq":["QTY",1]}`, CodeUnknownColumn, "eq[0]", `no column "QTY"`},

		// operator versus type
		{"like on number", `{"like":["qty","1%"]}`, CodeBadFilter, "like", "like does not apply to column qty (int4)"},
		{"lt on bool", `{"lt":["flag",true]}`, CodeBadFilter, "lt", "does not apply to column flag (bool)"},
		{"gt on uuid", `{"gt":["uid","a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]}`, CodeBadFilter, "gt", "uuid"},
		{"gt on enum", `{"gt":["status","a"]}`, CodeBadFilter, "gt", "type oid 16385"},
		{"like on enum", `{"like":["status","a%"]}`, CodeBadFilter, "like", "does not apply"},
		{"eq on jsonb", `{"eq":["doc","{}"]}`, CodeBadFilter, "eq", "doc (jsonb)"},
		{"in on array", `{"in":["tags",["a"]]}`, CodeBadFilter, "in", "an array type"},
		{"like on timestamp", `{"like":["at","2024%"]}`, CodeBadFilter, "like", "does not apply"},

		// values
		{"null value", `{"eq":["qty",null]}`, CodeBadFilter, "eq[1]", "with null"},
		{"null in list", `{"in":["qty",[1,null]]}`, CodeBadFilter, "in[1][1]", "with null"},
		{"array value", `{"eq":["qty",[1]]}`, CodeBadFilter, "eq[1]", "with an array"},
		{"object value", `{"eq":["qty",{"a":1}]}`, CodeBadFilter, "eq[1]", "with an object"},
		{"string for int4", `{"gt":["qty","5"]}`, CodeBadFilter, "gt[1]", `gt compares qty (int4) with the string "5"`},
		{"string for int2", `{"eq":["small","5"]}`, CodeBadFilter, "eq[1]", "small (int2)"},
		{"non-numeric string for int8", `{"eq":["id","five"]}`, CodeBadFilter, "eq[1]", `the string "five"`},
		{"NaN for int8", `{"eq":["id","NaN"]}`, CodeBadFilter, "eq[1]", `the string "NaN"`},
		{"padded numeric string", `{"eq":["price"," 1"]}`, CodeBadFilter, "eq[1]", "price (numeric)"},
		{"bool for number", `{"eq":["qty",true]}`, CodeBadFilter, "eq[1]", "with true"},
		{"number for text", `{"eq":["org_id",5]}`, CodeBadFilter, "eq[1]", "with the number 5"},
		{"number for enum", `{"eq":["status",5]}`, CodeBadFilter, "eq[1]", "with the number 5"},
		{"string for bool", `{"eq":["flag","true"]}`, CodeBadFilter, "eq[1]", `the string "true"`},
		{"number for bool", `{"in":["flag",[true,0]]}`, CodeBadFilter, "in[1][1]", "the number 0"},
		{"bad uuid", `{"eq":["uid","a0eebc99-9c0b-4ef8-bb6d"]}`, CodeBadFilter, "eq[1]", "uid (uuid)"},
		{"uuid hyphen misplaced", `{"eq":["uid","a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11"]}`, CodeBadFilter, "eq[1]", "uid (uuid)"},
		{"timestamptz without offset", `{"gt":["at","2024-01-06T08:30:00"]}`, CodeBadFilter, "gt[1]", "at (timestamptz)"},
		{"timestamptz date only", `{"gt":["at","2024-01-06"]}`, CodeBadFilter, "gt[1]", "at (timestamptz)"},
		{"timestamptz before year 1 in UTC", `{"gt":["at","0001-01-01T00:30:00+01:00"]}`, CodeBadFilter, "gt[1]", "at (timestamptz)"},
		{"timestamp with offset", `{"gt":["local","2024-01-06T08:30:00Z"]}`, CodeBadFilter, "gt[1]", "local (timestamp)"},
		{"timestamp number", `{"gt":["local",1704529800]}`, CodeBadFilter, "gt[1]", "the number"},
		{"date with time", `{"eq":["day","2024-01-06T00:00:00Z"]}`, CodeBadFilter, "eq[1]", "day (date)"},
		{"date not a day", `{"eq":["day","2023-02-29"]}`, CodeBadFilter, "eq[1]", "day (date)"},
		{"like not a string", `{"like":["org_id",5]}`, CodeBadFilter, "like[1]", "takes a pattern string"},
		{"like trailing backslash", `{"like":["org_id","ab\\"]}`, CodeBadFilter, "like[1]", "ends with a backslash"},

		// bounds
		{"too deep", deep, CodeBadFilter, strings.TrimSuffix(strings.Repeat("not.", MaxDepth), "."), "deeper than 16"},
		{"too many nodes", wide.String(), CodeBadFilter, "or[127].eq[1]", "more than 256"},
		{"too many in values", many.String(), CodeBadFilter, "in[1][100]", "at most 100 values"},
		{"value too long", `{"eq":["org_id","` + long + `"]}`, CodeBadFilter, "eq[1]", "1025 bytes long"},
		{"number too long", `{"eq":["price",1` + strings.Repeat("0", MaxLiteralBytes) + `]}`, CodeBadFilter, "eq[1]", "characters long"},
		{"pattern too long", `{"like":["org_id","` + strings.Repeat("%", MaxPatternBytes+1) + `"]}`, CodeBadFilter, "like[1]", "257 bytes long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(json.RawMessage(tc.in), testCols)
			if err == nil {
				t.Fatalf("Parse(%.80s) = %s, want an error", tc.in, f)
			}
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Parse error %T %v, want *Error", err, err)
			}
			if fe.Code != tc.code || fe.Path != tc.path {
				t.Errorf("Code, Path = %s, %q; want %s, %q (%v)", fe.Code, fe.Path, tc.code, tc.path, err)
			}
			if !strings.Contains(fe.Detail, tc.detail) {
				t.Errorf("Detail = %q, want it to contain %q", fe.Detail, tc.detail)
			}
			if fe.Fix == "" {
				t.Errorf("no Fix for %v", err)
			}
			sentinel := ErrBadFilter
			if tc.code == CodeUnknownColumn {
				sentinel = ErrUnknownColumn
			}
			if !errors.Is(err, sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, sentinel)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"and":[{"eq":["org_id","acme"]},{"gt":["qty","5"]}]}`,
			`filter at and[1].gt[1]: gt compares qty (int4) with the string "5" (fix: write the value as a JSON number: 5)`},
		{`{"eq":["qyt",1]}`,
			`filter at eq[0]: the table has no column "qyt" (fix: did you mean "qty"? the table's columns are: id, org_id, qty, price, ratio, name, code, flag, at, local, day, uid, status, doc, tags, small)`},
		{`{"eq":["Org_ID","x"]}`, `did you mean "org_id"?`},
		{`{"eq":["flag","true"]}`, `(fix: write true without quotes)`},
		{`{"eq":["org_id",5]}`, `(fix: write the value as a JSON string: "5")`},
		{`{"eq":["qty",[1,2]]}`, `use {"in":["qty",[...]]}`},
		{`{"EQ":["qty",1]}`, `(fix: operators are lowercase: eq)`},
		{`{"eq":["qty",null]}`, `{"is_null":"qty"}`},
		// NaN and the infinities are no JSON number, and an integer column never holds them.
		{`{"eq":["qty","NaN"]}`, `(fix: an int4 is never NaN; write a JSON number, like 5)`},
		{`{"in":["small",["-Infinity"]]}`, `(fix: an int2 is never -Infinity; write a JSON number, like 5)`},
		{`{"eq":["id","Infinity"]}`, `(fix: an int8 is never Infinity; write a JSON number, like 5)`},
		{`{"eq":["price","nan"]}`, `(fix: write a JSON number, like 5, or one of the strings "NaN", "Infinity" and "-Infinity")`},
		{`{"eq":["qty","nan"]}`, `(fix: write a JSON number, like 5)`},
		{`{"eq":["tags","x"]}`, `(fix: column tags (an array type) takes only is_null and not_null; filter on another column)`},
		{`{"eq":["at","Infinity"]}`, `or "infinity" or "-infinity")`},
		{`{"eq":["local","x"]}`, `or "infinity" or "-infinity": the column holds wall-clock times)`},
	} {
		_, err := Parse(json.RawMessage(tc.in), testCols)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v\nwant it to contain %s", tc.in, err, tc.want)
		}
	}
}

func TestErrorUnwrap(t *testing.T) {
	_, err := Parse(json.RawMessage(`{"eq":["qty",1}]}`), testCols)
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		t.Errorf("Parse of invalid JSON: %v does not wrap a *json.SyntaxError", err)
	}
	if errors.Is(err, ErrUnknownColumn) {
		t.Errorf("errors.Is(%v, ErrUnknownColumn) = true", err)
	}
}

func TestErrorQuoteCut(t *testing.T) {
	name := strings.Repeat("é", 100)
	_, err := Parse(json.RawMessage(`{"eq":["`+name+`",1]}`), testCols)
	if err == nil || len(err.Error()) > 400 {
		t.Fatalf("Parse with a long unknown column: %v, want a short error", err)
	}
	if !strings.Contains(err.Error(), `..."`) && !strings.Contains(err.Error(), `"...`) {
		t.Errorf("error %v does not cut the long name", err)
	}
}

func TestColumns(t *testing.T) {
	f := mustParse(t, `{"and":[{"eq":["qty",1]},{"or":[{"is_null":"at"},{"not":{"like":["org_id","a%"]}}]},{"gt":["qty",0]}]}`)
	got := f.Columns()
	want := []string{"at", "org_id", "qty"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Columns() = %v, want %v", got, want)
	}
	got[0] = "changed"
	if f.Columns()[0] != "at" {
		t.Error("Columns() returned the filter's own slice")
	}
}
