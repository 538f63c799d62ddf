package filter

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSQL(t *testing.T) {
	tests := []struct {
		filter string
		want   string
		args   []any
	}{
		{``, `TRUE`, nil},
		{`{"and":[]}`, `TRUE`, nil},
		{`{"or":[]}`, `FALSE`, nil},
		{`{"is_null":"doc"}`, `"doc" IS NULL`, nil},
		{`{"not_null":"tags"}`, `"tags" IS NOT NULL`, nil},
		{`{"in":["qty",[]]}`, `FALSE`, nil},
		// Numbers: integers against int8 keep the column's index; fractions and big values compare as
		// numeric; floats as the decimal they print as.
		{`{"eq":["qty",5]}`, `"qty" = $1::int8`, []any{"5"}},
		{`{"eq":["qty",1.0]}`, `"qty" = $1::int8`, []any{"1"}},
		{`{"lt":["qty",6.5]}`, `"qty" < $1::numeric`, []any{"6.5"}},
		{`{"eq":["id","9223372036854775808"]}`, `"id" = $1::numeric`, []any{"9223372036854775808"}},
		{`{"in":["small",[-3,0]]}`, `"small" IN ($1::int8, $2::int8)`, []any{"-3", "0"}},
		{`{"gte":["price","NaN"]}`, `"price" >= $1::numeric`, []any{"NaN"}},
		{`{"eq":["ratio",0.1]}`, `("ratio"::text)::numeric = $1::numeric`, []any{"0.1"}},
		// Text: eq and in plain where they keep rows, under COLLATE "C" under a not; ranges and like
		// always bytewise.
		{`{"eq":["org_id","acme"]}`, `"org_id" = $1::text`, []any{"acme"}},
		{`{"not":{"eq":["org_id","acme"]}}`, `(NOT "org_id" COLLATE "C" = $1::text)`, []any{"acme"}},
		{`{"neq":["org_id","acme"]}`, `"org_id" COLLATE "C" <> $1::text`, []any{"acme"}},
		{`{"not":{"neq":["org_id","acme"]}}`, `(NOT "org_id" <> $1::text)`, []any{"acme"}},
		{`{"in":["name",["Zoe","Zoë"]]}`, `"name" IN ($1::text, $2::text)`, []any{"Zoe", "Zoë"}},
		{`{"gt":["org_id","a"]}`, `"org_id" COLLATE "C" > $1::text`, []any{"a"}},
		{`{"like":["org_id","a\\%b_%"]}`, `"org_id" COLLATE "C" LIKE $1::text`, []any{`a\%b_%`}},
		{`{"eq":["code","AB  "]}`, `"code" = $1::bpchar`, []any{"AB"}},
		{`{"like":["code","AB%"]}`, `"code" COLLATE "C" LIKE $1::text`, []any{"AB%"}},
		{`{"eq":["status","open"]}`, `("status"::text) COLLATE "C" = $1::text`, []any{"open"}},
		{`{"not":{"not":{"eq":["org_id","x"]}}}`, `(NOT (NOT "org_id" = $1::text))`, []any{"x"}},
		// Values of other types, cast.
		{`{"eq":["flag",true]}`, `"flag" = $1::bool`, []any{"true"}},
		{`{"in":["uid",["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"]]}`, `"uid" IN ($1::uuid)`, []any{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}},
		{`{"lte":["day","2024-01-06"]}`, `"day" <= $1::date`, []any{"2024-01-06"}},
		// Timestamps by the millisecond a value truncates to.
		{`{"eq":["at","2024-01-06T10:30:00.1239+02:00"]}`,
			`("at" >= $1::timestamptz AND "at" < ($1::timestamptz + interval '1 millisecond'))`, []any{"2024-01-06T08:30:00.123Z"}},
		{`{"neq":["local","2024-01-06T08:30:00"]}`,
			`("local" < $1::timestamp OR "local" >= ($1::timestamp + interval '1 millisecond'))`, []any{"2024-01-06T08:30:00.000"}},
		{`{"lt":["at","2024-01-06T08:30:00Z"]}`, `"at" < $1::timestamptz`, []any{"2024-01-06T08:30:00.000Z"}},
		{`{"lte":["at","2024-01-06T08:30:00Z"]}`, `"at" < ($1::timestamptz + interval '1 millisecond')`, []any{"2024-01-06T08:30:00.000Z"}},
		{`{"gt":["at","2024-01-06T08:30:00Z"]}`, `"at" >= ($1::timestamptz + interval '1 millisecond')`, []any{"2024-01-06T08:30:00.000Z"}},
		{`{"gte":["at","2024-01-06T08:30:00Z"]}`, `"at" >= $1::timestamptz`, []any{"2024-01-06T08:30:00.000Z"}},
		{`{"lte":["at","infinity"]}`, `"at" <= $1::timestamptz`, []any{"infinity"}},
		{`{"in":["local",["-infinity","2024-01-06T08:30:00"]]}`,
			`("local" = $1::timestamp OR ("local" >= $2::timestamp AND "local" < ($2::timestamp + interval '1 millisecond')))`,
			[]any{"-infinity", "2024-01-06T08:30:00.000"}},
		{`{"and":[{"eq":["org_id","acme"]},{"or":[{"gt":["qty",5]},{"is_null":"qty"}]}]}`,
			`("org_id" = $1::text AND ("qty" > $2::int8 OR "qty" IS NULL))`, []any{"acme", "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			f := mustParse(t, tt.filter)
			var args []any
			got, exact := f.SQL(&args)
			if got != tt.want || !exact {
				t.Fatalf("SQL() = %s, exact %v\nwant     %s, exact", got, exact, tt.want)
			}
			if diff := cmp.Diff(tt.args, args); diff != "" {
				t.Fatalf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSQLNumbersOnFromExistingArgs(t *testing.T) {
	f := mustParse(t, `{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]}`)
	args := []any{"k1", "k2"}
	got, _ := f.SQL(&args)
	if want := `("org_id" = $3::text AND "qty" > $4::int8)`; got != want {
		t.Fatalf("SQL() = %s, want %s", got, want)
	}
	if len(args) != 4 || args[2] != "acme" || args[3] != "5" {
		t.Fatalf("args = %v", args)
	}
}

// TestSQLInexact: a comparison SQL cannot make is left out, as whatever keeps more rows where it
// stands.
func TestSQLInexact(t *testing.T) {
	tests := []struct{ filter, want string }{
		{`{"eq":["org_id","a\u0000"]}`, `TRUE`},
		{`{"not":{"eq":["org_id","a\u0000"]}}`, `(NOT FALSE)`},
		{`{"lt":["price",1e200000]}`, `TRUE`},
		{`{"not":{"in":["qty",[1,1e-20000]]}}`, `(NOT FALSE)`},
		{`{"and":[{"eq":["qty",1]},{"not":{"or":[{"like":["name","\u0000%"]}]}}]}`, `("qty" = $1::int8 AND (NOT (FALSE)))`},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			var args []any
			got, exact := mustParse(t, tt.filter).SQL(&args)
			if got != tt.want || exact {
				t.Fatalf("SQL() = %s, exact %v; want %s, inexact", got, exact, tt.want)
			}
		})
	}
}

// sqlToken is one token a rendered filter may hold besides its columns' quoted names: no value
// is ever spelt into the SQL.
var sqlToken = regexp.MustCompile(`^(\s+|\(|\)|,|AND|OR|NOT|IN|IS|NULL|TRUE|FALSE|LIKE|COLLATE "C"|=|<>|<=|>=|<|>|\+|::text|::numeric|` +
	`\$[1-9][0-9]*::(int8|numeric|text|bpchar|bool|uuid|date|timestamptz|timestamp)|::int8|interval '1 millisecond')`)

// FuzzSQL: every filter renders; its SQL holds nothing but the columns' names, operators,
// keywords and placeholders (so no value can reach the SQL text); the placeholders number the
// args added, from the ones already there; and it is exact unless a value cannot be a
// parameter (a NUL, a number beyond numeric).
func FuzzSQL(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s), []byte{})
	}
	f.Add([]byte{}, []byte("\x00\x02\x05\x05\x01\x03\x04"))
	f.Add([]byte{}, []byte("\x01\x03\x03\x00\x07\x01\x03\x02\x09\x02"))
	names := map[string]bool{}
	for _, c := range testCols {
		names[quoteIdent(c.Name)] = true
	}
	f.Fuzz(func(t *testing.T, raw, genBytes []byte) {
		if len(raw) == 0 {
			raw = []byte((&gen{genBytes}).filter(1))
		}
		flt, err := Parse(raw, testCols)
		if err != nil {
			return
		}
		args := []any{"before"}
		sql, exact := flt.SQL(&args)
		rest := sql
		used := map[int]bool{}
		for len(rest) > 0 {
			if rest[0] == '"' {
				end := strings.IndexByte(rest[1:], '"')
				if end < 0 || !names[rest[:end+2]] {
					t.Fatalf("SQL %s of %s: unknown identifier at %.30q", sql, raw, rest)
				}
				rest = rest[end+2:]
				continue
			}
			m := sqlToken.FindString(rest)
			if m == "" {
				t.Fatalf("SQL %s of %s: unexpected text at %.30q", sql, raw, rest)
			}
			if m[0] == '$' {
				n, _ := strconv.Atoi(m[1:strings.Index(m, "::")])
				used[n] = true
			}
			rest = rest[len(m):]
		}
		for n := 2; n <= len(args); n++ {
			if !used[n] {
				t.Fatalf("SQL %s of %s: arg $%d of %d unused", sql, raw, n, len(args))
			}
		}
		if used[1] || len(used) != len(args)-1 {
			t.Fatalf("SQL %s of %s: placeholders %v for %d args after the first", sql, raw, used, len(args)-1)
		}
		if strings.Count(sql, "(") != strings.Count(sql, ")") {
			t.Fatalf("SQL %s: unbalanced parentheses", sql)
		}
		for _, a := range args[1:] {
			if _, ok := a.(string); !ok {
				t.Fatalf("arg %v is a %T, not a string", a, a)
			}
		}
		if !exact && !strings.Contains(flt.String(), `\u0000`) && !strings.ContainsAny(flt.String(), "0123456789") {
			t.Fatalf("SQL of %s is inexact without a NUL or a number", flt.String())
		}
	})
}
