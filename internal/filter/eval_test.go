package filter

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// comparison is a row value, a literal, and how the value orders against it.
type comparison struct {
	col, value, literal string
	cmp                 int // -1, 0, +1; for unordered types, 0 or 1 (different)
}

var comparisons = []comparison{
	// Number: int4, int8 as string or number, numeric, float8.
	{"qty", `7`, `7`, 0},
	{"qty", `7`, `5`, 1},
	{"qty", `7`, `8`, -1},
	{"qty", `7`, `7.0`, 0},
	{"qty", `7`, `6.99`, 1},
	{"qty", `7`, `7.01`, -1},
	{"qty", `-7`, `-6`, -1},
	{"qty", `0`, `-0`, 0},
	{"small", `-3`, `-3e0`, 0},
	{"id", `"9007199254740993"`, `9007199254740992`, 1},
	{"id", `"9007199254740993"`, `"9007199254740993"`, 0},
	{"id", `"9007199254740993"`, `9007199254740993`, 0},
	{"id", `9007199254740992`, `"9007199254740993"`, -1},
	{"id", `"-9223372036854775808"`, `"-9223372036854775807"`, -1},
	{"id", `"9223372036854775807"`, `9.223372036854775807e18`, 0},
	{"price", `"0.1000000000000000055"`, `0.1`, 1},
	{"price", `"0.1000000000000000055"`, `"0.1000000000000000055"`, 0},
	{"price", `1.10`, `1.1`, 0},
	{"price", `12.5`, `12.49999999999999999999`, 1},
	{"price", `100`, `1e2`, 0},
	{"price", `1e-7`, `0.0000001`, 0},
	{"price", `"123456789012345678901234567890.5"`, `1.234567890123456789012345678905e29`, 0},
	{"price", `"123456789012345678901234567890.5"`, `1.2345678901234567890123456789e29`, 1},
	{"price", `-0.5`, `-0.49`, -1},
	{"price", `"NaN"`, `"NaN"`, 0},
	{"price", `"NaN"`, `"Infinity"`, 1},
	{"price", `"Infinity"`, `1e308`, 1},
	{"price", `-1e308`, `"-Infinity"`, 1},
	{"price", `"-Infinity"`, `"-Infinity"`, 0},
	{"ratio", `1.5e-07`, `0.00000015`, 0},
	{"ratio", `-0`, `0`, 0},
	{"ratio", `"NaN"`, `1`, 1},

	// Text, bytewise.
	{"org_id", `"acme"`, `"acme"`, 0},
	{"org_id", `"acme"`, `"acm"`, 1},
	{"org_id", `"acme"`, `"acmf"`, -1},
	{"org_id", `"B"`, `"a"`, -1},
	{"org_id", `"é"`, `"z"`, 1},
	{"org_id", `"\u00e9"`, `"é"`, 0},
	{"org_id", `"a\"b\\c\n"`, `"a\"b\\c\n"`, 0},
	{"org_id", `"\ud83d\ude00"`, `"😀"`, 0},
	{"org_id", `""`, `""`, 0},
	{"org_id", `""`, `"a"`, -1},
	{"org_id", `"ab "`, `"ab"`, 1},
	{"name", `"Zoë"`, `"Zoe"`, 1},

	// Char: trailing spaces do not count.
	{"code", `"AB   "`, `"AB"`, 0},
	{"code", `"AB   "`, `"AB "`, 0},
	{"code", `"AB   "`, `"AB!"`, -1},
	{"code", `"AB   "`, `"AA"`, 1},
	{"code", `" A"`, `"A"`, -1},

	// Timestamps, to the millisecond.
	{"at", `"2024-01-06T08:30:00.123Z"`, `"2024-01-06T08:30:00.123Z"`, 0},
	{"at", `"2024-01-06T08:30:00.123Z"`, `"2024-01-06T10:30:00.123+02:00"`, 0},
	{"at", `"2024-01-06T08:30:00.123Z"`, `"2024-01-06T03:00:00.123-05:30"`, 0},
	{"at", `"2024-01-06T08:30:00.123Z"`, `"2024-01-06T08:30:00.1239Z"`, 0},
	{"at", `"2024-01-06T08:30:00.123Z"`, `"2024-01-06T08:30:00.124Z"`, -1},
	{"at", `"2024-01-06T08:30:00.123Z"`, `"2024-01-06T08:30:00Z"`, 1},
	{"at", `"2024-01-06T00:30:00.000Z"`, `"2024-01-06T01:00:00+01:00"`, 1}, // 00:00Z, though its text sorts after
	{"at", `"infinity"`, `"9999-12-31T23:59:59.999Z"`, 1},
	{"at", `"infinity"`, `"infinity"`, 0},
	{"at", `"-infinity"`, `"0001-01-01T00:00:00Z"`, -1},
	{"at", `"-infinity"`, `"infinity"`, -1},
	{"at", `"0044-03-15 12:00:00+00 BC"`, `"0001-01-01T00:00:00Z"`, -1},
	{"at", `"10000-01-01 00:00:00+00"`, `"9999-12-31T23:59:59.999Z"`, 1},
	{"at", `"2024-01-06 08:30:00.123+00"`, `"2024-01-06T08:30:00.123Z"`, 0},
	{"local", `"2024-01-06T14:00:00.000"`, `"2024-01-06T14:00:00"`, 0},
	{"local", `"2024-01-06T14:00:00.000"`, `"2024-01-06T13:59:59.999"`, 1},
	{"local", `"10000-01-01 01:02:03.4567"`, `"9999-01-01T00:00:00"`, 1},
	{"local", `"0044-03-15 12:00:00 BC"`, `"0001-01-01T00:00:00"`, -1},
	{"local", `"-infinity"`, `"-infinity"`, 0},

	// Dates.
	{"day", `"2024-01-06"`, `"2024-01-06"`, 0},
	{"day", `"2024-01-06"`, `"2024-01-07"`, -1},
	{"day", `"2024-03-01"`, `"2024-02-29"`, 1},
	{"day", `"0044-03-15 BC"`, `"0001-01-01"`, -1},
	{"day", `"0001-12-31 BC"`, `"0001-01-01"`, -1},
	{"day", `"10000-01-01"`, `"9999-12-31"`, 1},
	{"day", `"infinity"`, `"9999-12-31"`, 1},
	{"day", `"-infinity"`, `"-infinity"`, 0},

	// Unordered types: 0 is equal, 1 different.
	{"flag", `true`, `true`, 0},
	{"flag", `true`, `false`, 1},
	{"flag", `false`, `false`, 0},
	{"uid", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, `"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"`, 0},
	{"uid", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, `"{a0eebc999c0b4ef8bb6d6bb9bd380a11}"`, 0},
	{"uid", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, `"a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11"`, 0},
	{"uid", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12"`, 1},
	{"status", `"open"`, `"open"`, 0},
	{"status", `"open"`, `"Open"`, 1},
	{"status", `"1 day"`, `"24:00:00"`, 1},
}

var comparisonOps = []struct {
	op   string
	want func(cmp int) bool
}{
	{"eq", func(c int) bool { return c == 0 }},
	{"neq", func(c int) bool { return c != 0 }},
	{"lt", func(c int) bool { return c < 0 }},
	{"lte", func(c int) bool { return c <= 0 }},
	{"gt", func(c int) bool { return c > 0 }},
	{"gte", func(c int) bool { return c >= 0 }},
}

func boolResult(b bool) Result {
	if b {
		return True
	}
	return False
}

// TestEvalComparisons evaluates every comparison operator on every type, on a value, on NULL
// and on an absent column, and checks Key agrees with eq.
func TestEvalComparisons(t *testing.T) {
	for _, c := range comparisons {
		typ := columnType(t, c.col)
		for _, o := range comparisonOps {
			if !typ.allows(mustOp(o.op)) {
				continue
			}
			src := fmt.Sprintf(`{%q:[%q,%s]}`, o.op, c.col, c.literal)
			t.Run(src+" on "+c.value, func(t *testing.T) {
				f := mustParse(t, src)
				r := row(t, `{"other":1,`+fmt.Sprintf("%q:%s", c.col, c.value)+`}`)
				if got, want := f.Eval(r), boolResult(o.want(c.cmp)); got != want {
					t.Errorf("Eval(%s) = %v, want %v", c.value, got, want)
				}
				if got := f.Eval(row(t, fmt.Sprintf(`{%q:null}`, c.col))); got != False {
					t.Errorf("Eval(null) = %v, want false", got)
				}
				if got := f.Eval(row(t, `{"other":1}`)); got != Unknown {
					t.Errorf("Eval(absent) = %v, want unknown", got)
				}
				if got := f.Eval(nil); got != Unknown {
					t.Errorf("Eval(nil row) = %v, want unknown", got)
				}
			})
		}
		t.Run(fmt.Sprintf("in and Key %s %s %s", c.col, c.value, c.literal), func(t *testing.T) {
			in := mustParse(t, fmt.Sprintf(`{"in":[%q,[%s]]}`, c.col, c.literal))
			r := row(t, fmt.Sprintf(`{%q:%s}`, c.col, c.value))
			if got, want := in.Eval(r), boolResult(c.cmp == 0); got != want {
				t.Errorf("in: Eval = %v, want %v", got, want)
			}
			rowKey, ok := Key(typ, json.RawMessage(c.value))
			if !ok {
				t.Fatalf("Key(%s, %s) not ok", typ, c.value)
			}
			_, keys, ok := in.IndexKeys()
			if !ok || len(keys) != 1 {
				t.Fatalf("IndexKeys() = %v, %v", keys, ok)
			}
			if (rowKey == keys[0]) != (c.cmp == 0) {
				t.Errorf("Key(row) = %q, key of literal %q; want equal exactly when the values are", rowKey, keys[0])
			}
		})
	}
}

func columnType(t testing.TB, name string) Type {
	for _, c := range testCols {
		if c.Name == name {
			return TypeOf(c.OID)
		}
	}
	t.Fatalf("no test column %q", name)
	return 0
}

func mustOp(s string) op {
	o, ok := lookupOp(s)
	if !ok {
		panic(s)
	}
	return o
}

func TestEvalIn(t *testing.T) {
	for _, tc := range []struct {
		filter, row string
		want        Result
	}{
		{`{"in":["qty",[1,2,3]]}`, `{"qty":2}`, True},
		{`{"in":["qty",[1,2,3]]}`, `{"qty":2.0}`, True},
		{`{"in":["qty",[1,2,3]]}`, `{"qty":4}`, False},
		{`{"in":["qty",[1,2,3]]}`, `{"qty":null}`, False},
		{`{"in":["qty",[1,2,3]]}`, `{}`, Unknown},
		{`{"not":{"in":["qty",[1,2,3]]}}`, `{"qty":null}`, False},
		{`{"not":{"in":["qty",[1,2,3]]}}`, `{"qty":4}`, True},
		{`{"in":["qty",[]]}`, `{"qty":4}`, False},
		{`{"in":["qty",[]]}`, `{"qty":null}`, False},
		{`{"in":["qty",[]]}`, `{}`, False},
		{`{"not":{"in":["qty",[]]}}`, `{"qty":null}`, True},
		{`{"in":["org_id",["b","a","c","a"]]}`, `{"org_id":"c"}`, True},
		{`{"in":["org_id",["b","a","c"]]}`, `{"org_id":"d"}`, False},
		{`{"in":["flag",[true]]}`, `{"flag":false}`, False},
		{`{"in":["flag",[false,true]]}`, `{"flag":false}`, True},
		{`{"in":["uid",["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"]]}`, `{"uid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}`, True},
		{`{"in":["status",["open","closed"]]}`, `{"status":"closed"}`, True},
		{`{"in":["price",["NaN",1]]}`, `{"price":"NaN"}`, True},
		{`{"in":["code",["AB","CD  "]]}`, `{"code":"CD   "}`, True},
		{`{"in":["day",["2024-01-01","infinity"]]}`, `{"day":"infinity"}`, True},
	} {
		t.Run(tc.filter+" on "+tc.row, func(t *testing.T) {
			if got := mustParse(t, tc.filter).Eval(row(t, tc.row)); got != tc.want {
				t.Errorf("Eval = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEvalNullTests(t *testing.T) {
	for _, col := range testCols {
		for _, tc := range []struct {
			op, value string
			want      Result
		}{
			{"is_null", "null", True},
			{"is_null", `"x"`, False},
			{"is_null", "", Unknown},
			{"not_null", "null", False},
			{"not_null", `"x"`, True},
			{"not_null", "", Unknown},
		} {
			r := change.Row{{Name: "other", Value: json.RawMessage("1")}}
			if tc.value != "" {
				r = append(r, change.Column{Name: col.Name, Value: json.RawMessage(tc.value)})
			}
			f := mustParse(t, fmt.Sprintf(`{%q:%q}`, tc.op, col.Name))
			if got := f.Eval(r); got != tc.want {
				t.Errorf("%s on %s = %s: Eval = %v, want %v", f, col.Name, tc.value, got, tc.want)
			}
		}
	}
	// A value the filter does not read the type of is still not null.
	f := mustParse(t, `{"not_null":"doc"}`)
	if got := f.Eval(row(t, `{"doc":{"a":[1,null]}}`)); got != True {
		t.Errorf("not_null on a jsonb object = %v, want true", got)
	}
}

// TestEvalLogic checks and, or and not over every pair of truth values: SQL true, false and
// NULL, and an absent column, which could be any of them.
func TestEvalLogic(t *testing.T) {
	// On the row below: T is true, F false, N a comparison with NULL, M a comparison with an
	// absent column, M2 another absent column.
	leaves := map[string]string{
		"T":  `{"eq":["qty",7]}`,
		"F":  `{"eq":["qty",8]}`,
		"N":  `{"eq":["price",1]}`,
		"M":  `{"eq":["ratio",1]}`,
		"M2": `{"eq":["small",1]}`,
	}
	r := row(t, `{"qty":7,"price":null}`)
	for _, tc := range []struct {
		expr string
		want Result
	}{
		{"T", True}, {"F", False}, {"N", False}, {"M", Unknown},
		{"not T", False}, {"not F", True}, {"not N", False}, {"not M", Unknown},

		{"T and T", True}, {"T and F", False}, {"T and N", False}, {"T and M", Unknown},
		{"F and T", False}, {"F and F", False}, {"F and N", False}, {"F and M", False},
		{"N and T", False}, {"N and F", False}, {"N and N", False}, {"N and M", False},
		{"M and T", Unknown}, {"M and F", False}, {"M and N", False}, {"M and M2", Unknown},

		{"T or T", True}, {"T or F", True}, {"T or N", True}, {"T or M", True},
		{"F or T", True}, {"F or F", False}, {"F or N", False}, {"F or M", Unknown},
		{"N or T", True}, {"N or F", False}, {"N or N", False}, {"N or M", Unknown},
		{"M or T", True}, {"M or F", Unknown}, {"M or N", Unknown}, {"M or M2", Unknown},

		// NOT of NULL stays NULL, so these differ from what two-valued logic would say.
		{"not (T and N)", False}, {"not (F or N)", False}, {"not (N and M)", Unknown},
		{"not (N or M)", False}, {"not (F and M)", True}, {"not (T or M)", False},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			src := logicFilter(tc.expr, leaves)
			if got := mustParse(t, src).Eval(r); got != tc.want {
				t.Errorf("%s = %s: Eval = %v, want %v", tc.expr, src, got, tc.want)
			}
		})
	}
}

// logicFilter spells "A", "not A", "A and B", "A or B", "not (A op B)" as a filter.
func logicFilter(expr string, leaves map[string]string) string {
	var a, op, b string
	if n, _ := fmt.Sscanf(expr, "not (%s %s %s", &a, &op, &b); n == 3 {
		b = b[:len(b)-1]
		return fmt.Sprintf(`{"not":{%q:[%s,%s]}}`, op, leaves[a], leaves[b])
	}
	if n, _ := fmt.Sscanf(expr, "not %s", &a); n == 1 {
		return fmt.Sprintf(`{"not":%s}`, leaves[a])
	}
	if n, _ := fmt.Sscanf(expr, "%s %s %s", &a, &op, &b); n == 3 {
		return fmt.Sprintf(`{%q:[%s,%s]}`, op, leaves[a], leaves[b])
	}
	return leaves[expr]
}

func TestEvalEmptyConnectives(t *testing.T) {
	r := row(t, `{"qty":1}`)
	for src, want := range map[string]Result{
		`{"and":[]}`:          True,
		`{"or":[]}`:           False,
		`{"not":{"or":[]}}`:   True,
		`{"not":{"and":[]}}`:  False,
		`{"and":[{"or":[]}]}`: False,
	} {
		if got := mustParse(t, src).Eval(r); got != want {
			t.Errorf("%s: Eval = %v, want %v", src, got, want)
		}
	}
}

// TestEvalUnreadable: a value that is not of its column's type (the column's type changed under
// the subscription) cannot be compared, but it is not NULL either.
func TestEvalUnreadable(t *testing.T) {
	for _, tc := range []struct {
		filter, row string
		want        Result
	}{
		{`{"eq":["qty",1]}`, `{"qty":"one"}`, Unknown},
		{`{"not":{"eq":["qty",1]}}`, `{"qty":"one"}`, Unknown},
		{`{"eq":["org_id","a"]}`, `{"org_id":1}`, Unknown},
		{`{"eq":["flag",true]}`, `{"flag":"t"}`, Unknown},
		{`{"eq":["uid","a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]}`, `{"uid":"nope"}`, Unknown},
		{`{"lt":["at","2024-01-01T00:00:00Z"]}`, `{"at":"2024-13-01T00:00:00.000Z"}`, Unknown},
		{`{"lt":["day","2024-01-01"]}`, `{"day":"2023-02-29"}`, Unknown},
		{`{"and":[{"eq":["qty",1]},{"eq":["org_id","a"]}]}`, `{"qty":"one","org_id":"b"}`, False},
		{`{"not_null":"qty"}`, `{"qty":"one"}`, True},
		{`{"is_null":"qty"}`, `{"qty":"one"}`, False},
	} {
		if got := mustParse(t, tc.filter).Eval(row(t, tc.row)); got != tc.want {
			t.Errorf("%s on %s: Eval = %v, want %v", tc.filter, tc.row, got, tc.want)
		}
	}
}

// TestEvalRowOrder: the column hint is only a hint.
func TestEvalRowOrder(t *testing.T) {
	f := mustParse(t, `{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]}`)
	for _, r := range []string{
		`{"id":1,"org_id":"acme","qty":7}`,
		`{"qty":7,"org_id":"acme"}`,
		`{"org_id":"acme","x":1,"y":2,"z":3,"qty":7}`,
	} {
		if got := f.Eval(row(t, r)); got != True {
			t.Errorf("Eval(%s) = %v, want true", r, got)
		}
	}
}

func TestResultString(t *testing.T) {
	for r, want := range map[Result]string{True: "true", False: "false", Unknown: "unknown"} {
		if r.String() != want {
			t.Errorf("%d.String() = %s, want %s", r, r, want)
		}
	}
}

// TestEvalConcurrent: a Filter is shared by every subscriber with the same filter, and
// evaluated from many goroutines at once. Run with -race.
func TestEvalConcurrent(t *testing.T) {
	f := mustParse(t, `{"or":[{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]},{"like":["name","a_%"]},{"in":["uid",["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"]]}]}`)
	rows := []change.Row{
		row(t, `{"org_id":"acme","qty":7}`),
		row(t, `{"org_id":"acme","qty":1,"name":"abc"}`),
		row(t, `{"org_id":"x","qty":1,"name":"b","uid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}`),
		row(t, `{"org_id":"x","qty":1,"name":"b","uid":"00000000-0000-0000-0000-000000000000"}`),
	}
	want := []Result{True, True, True, False}
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 1000 {
				for i, r := range rows {
					if got := f.Eval(r); got != want[i] {
						t.Errorf("Eval(row %d) = %v, want %v", i, got, want[i])
						return
					}
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}
