package filter

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

var parseSeeds = []string{
	``, `null`, `{}`, `[]`, `1`, `"x"`,
	`{"eq":["org_id","acme"]}`,
	`{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]}`,
	`{"or":[{"in":["qty",[1,2,3]]},{"not":{"is_null":"at"}}]}`,
	`{"like":["name","a\\%b_%"]}`,
	`{"eq":["id","9007199254740993"]}`,
	`{"gte":["price","NaN"]}`,
	`{"lt":["at","2024-01-06T10:30:00.1239+02:00"]}`,
	`{"eq":["local","2024-01-06T10:30:00"]}`,
	`{"neq":["day","infinity"]}`,
	`{"in":["uid",["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"]]}`,
	`{"eq":["code","AB  "]}`,
	`{"in":["status",["open","closed"]]}`,
	`{"not_null":"doc"}`,
	`{"eq":["flag",true],"gt":["qty",1]}`,
	`{"eq":["qty","5"]}`,
	`{"eq":["qyt",5]}`,
	`{"not":{"not":{"not":{"and":[]}}}}`,
	`{"eq":["org_id","\u00e9\ud83d\ude00\n"]}`,
	`{"eq":["price",1e99999]}`,
}

// FuzzParse: Parse never panics; a refusal is a well-formed *Error; an accepted filter's
// String() is valid JSON that parses to the same filter.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	rows := []change.Row{
		row(f, `{"id":"9007199254740993","org_id":"acme","qty":7,"price":"NaN","name":"abc","code":"AB   ","flag":true,"at":"2024-01-06T08:30:00.123Z","local":"2024-01-06T10:30:00.000","day":"2024-01-06","uid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","status":"open","doc":null,"small":1}`),
		row(f, `{"qty":null,"org_id":""}`),
		nil,
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		flt, err := Parse(raw, testCols)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			if !slices.Contains(Codes(), fe.Code) || fe.Detail == "" || fe.Fix == "" {
				t.Fatalf("malformed error %#v", fe)
			}
			if len(fe.Error()) > 1024 { // it goes into an error frame's message
				t.Fatalf("error of %d bytes: %.200s", len(fe.Error()), fe.Error())
			}
			return
		}
		s := flt.String()
		if !json.Valid([]byte(s)) {
			t.Fatalf("String() = %s is not valid JSON", s)
		}
		again, err := Parse(json.RawMessage(s), testCols)
		if err != nil {
			t.Fatalf("String() = %s does not parse: %v", s, err)
		}
		if again.String() != s {
			t.Fatalf("String() of re-parsed %s = %s", s, again.String())
		}
		c1, k1, ok1 := flt.IndexKeys()
		c2, k2, ok2 := again.IndexKeys()
		if c1 != c2 || ok1 != ok2 || !slices.Equal(k1, k2) {
			t.Fatalf("IndexKeys differ after re-parse: %s %q %v vs %s %q %v", c1, k1, ok1, c2, k2, ok2)
		}
		for _, r := range rows {
			if a, b := flt.Eval(r), again.Eval(r); a != b {
				t.Fatalf("Eval differs after re-parse of %s: %v vs %v", s, a, b)
			}
		}
	})
}

// fuzzColumn is a column of testCols with row values (some not of the column's type, as after a
// type change) and literals to build filters from.
type fuzzColumn struct {
	name     string
	values   []string
	literals []string
}

var fuzzColumns = []fuzzColumn{
	{"qty", []string{`0`, `1`, `-1`, `5`, `7`, `2147483647`, `"x"`},
		[]string{`0`, `1`, `1.0`, `5`, `7`, `6.5`, `-1`, `-0`, `1e0`}},
	{"id", []string{`1`, `"9007199254740993"`, `9007199254740992`, `-5`, `"-9223372036854775808"`},
		[]string{`1`, `"9007199254740993"`, `9007199254740993`, `9007199254740992`, `"-9223372036854775808"`}},
	{"price", []string{`0.1`, `"0.1000000000000000055"`, `1.10`, `"NaN"`, `"Infinity"`, `"-Infinity"`, `100`, `0`},
		[]string{`0.1`, `1.1`, `"NaN"`, `1e2`, `"-Infinity"`, `"0.1000000000000000055"`, `0`}},
	{"ratio", []string{`0.1`, `1.5e-07`, `-0`, `"NaN"`, `"Infinity"`, `1e308`},
		[]string{`0.1`, `1.5e-7`, `0`, `"NaN"`, `"-Infinity"`, `0.10000000000000001`}},
	{"small", []string{`-3`, `0`}, []string{`-3`, `0`, `-2.5`}},
	{"name", []string{`"Zoë"`, `"Zoe"`, `"zoë"`}, []string{`"Zoë"`, `"Zoe"`, `"Z"`}},
	{"org_id", []string{`"acme"`, `"a"`, `""`, `"é"`, `"a%b"`, `"A"`, `"a\u0000"`, `"acme\\"`, `5`},
		[]string{`"acme"`, `"a"`, `""`, `"A"`, `"é"`, `"a%b"`}},
	{"code", []string{`"AB   "`, `"A    "`, `"     "`, `"AB!  "`},
		[]string{`"AB"`, `"A "`, `""`, `"AB!"`}},
	{"flag", []string{`true`, `false`, `1`}, []string{`true`, `false`}},
	{"at", []string{`"2024-01-06T08:30:00.123Z"`, `"2024-01-06T08:30:00.000Z"`, `"infinity"`, `"-infinity"`, `"0044-03-15 12:00:00+00 BC"`, `"10000-01-01 00:00:00+00"`, `"garbage"`},
		[]string{`"2024-01-06T08:30:00.123Z"`, `"2024-01-06T10:30:00.123+02:00"`, `"infinity"`, `"2024-01-06T08:30:00Z"`, `"0001-01-01T00:00:00Z"`}},
	{"local", []string{`"2024-01-06T08:30:00.123"`, `"0044-03-15 12:00:00 BC"`, `"-infinity"`},
		[]string{`"2024-01-06T08:30:00.123"`, `"2024-01-06T08:30:00"`, `"-infinity"`}},
	{"day", []string{`"2024-01-06"`, `"2024-01-07"`, `"infinity"`, `"0044-03-15 BC"`},
		[]string{`"2024-01-06"`, `"2024-01-07"`, `"infinity"`, `"0001-01-01"`}},
	{"uid", []string{`"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, `"00000000-0000-0000-0000-000000000000"`},
		[]string{`"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"`, `"00000000000000000000000000000000"`}},
	{"status", []string{`"open"`, `"closed"`}, []string{`"open"`, `"closed"`, `"Open"`}},
	{"doc", []string{`{"a":1}`, `[]`, `"s"`}, nil},
}

var likePatterns = []string{`"a%"`, `"%m%"`, `"_"`, `"a\\%b"`, `"%"`, `"acme"`, `"a_m_"`, `"%_%"`, `"AB%"`, `""`}

// gen draws choices from fuzz bytes; when they run out, every choice is the first.
type gen struct{ data []byte }

func (g *gen) next(n int) int {
	if len(g.data) == 0 || n <= 1 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return int(b) % n
}

func (g *gen) filter(depth int) string {
	if depth < 4 {
		switch g.next(8) {
		case 0, 1:
			op := []string{"and", "or"}[g.next(2)]
			kids := make([]string, g.next(4))
			for i := range kids {
				kids[i] = g.filter(depth + 1)
			}
			return fmt.Sprintf(`{%q:[%s]}`, op, strings.Join(kids, ","))
		case 2:
			return `{"not":` + g.filter(depth+1) + `}`
		}
	}
	c := fuzzColumns[g.next(len(fuzzColumns))]
	typ := columnTypeOf(c.name)
	var ops []op
	for o := opEq; o <= opNotNull; o++ {
		if typ.allows(o) {
			ops = append(ops, o)
		}
	}
	o := ops[g.next(len(ops))]
	switch o {
	case opIsNull, opNotNull:
		return fmt.Sprintf(`{%q:%q}`, o, c.name)
	case opLike:
		return fmt.Sprintf(`{"like":[%q,%s]}`, c.name, likePatterns[g.next(len(likePatterns))])
	case opIn:
		vals := make([]string, g.next(4))
		for i := range vals {
			vals[i] = c.literals[g.next(len(c.literals))]
		}
		return fmt.Sprintf(`{"in":[%q,[%s]]}`, c.name, strings.Join(vals, ","))
	}
	return fmt.Sprintf(`{%q:[%q,%s]}`, o, c.name, c.literals[g.next(len(c.literals))])
}

// row draws a row image: each column absent, null or one of its values. absent lists the
// columns left out.
func (g *gen) row() (r change.Row, absent []fuzzColumn) {
	for _, c := range fuzzColumns {
		switch k := g.next(len(c.values) + 2); k {
		case 0:
			absent = append(absent, c)
		case 1:
			r = append(r, change.Column{Name: c.name, Value: json.RawMessage("null")})
		default:
			r = append(r, change.Column{Name: c.name, Value: json.RawMessage(c.values[k-2])})
		}
	}
	return r, absent
}

func columnTypeOf(name string) Type {
	for _, c := range testCols {
		if c.Name == name {
			return TypeOf(c.OID)
		}
	}
	panic(name)
}

// FuzzEval builds a filter and a row from the fuzz bytes and checks:
//   - IndexKeys is sound: when the row matches, its key for the index column is one of the
//     filter's keys;
//   - Unknown is sound: when Eval gives True or False on a row with absent columns, it gives
//     the same whatever values fill them.
func FuzzEval(f *testing.F) {
	for _, s := range []string{"", "\x00", "\x03\x01\x02", "\x00\x02\x05\x05\x01\x03\x04", "\x01\x03\x03\x00\x07\x01\x03\x02\x09\x02"} {
		f.Add([]byte(s), []byte(s))
	}
	f.Fuzz(func(t *testing.T, filterBytes, rowBytes []byte) {
		fg := &gen{filterBytes}
		src := fg.filter(1)
		flt, err := Parse(json.RawMessage(src), testCols)
		if err != nil {
			t.Fatalf("generated filter %s refused: %v", src, err)
		}
		rg := &gen{rowBytes}
		r, absent := rg.row()
		got := flt.Eval(r)

		if col, keys, ok := flt.IndexKeys(); ok && got == True {
			v, present := r.Get(col)
			if !present {
				t.Fatalf("%s matches %s with index column %s absent", src, rowString(r), col)
			}
			key, kok := Key(columnTypeOf(col), v)
			if !kok || !slices.Contains(keys, key) {
				t.Fatalf("%s matches %s, but its key %q (%v) for %s is not among %q", src, rowString(r), key, kok, col, keys)
			}
		}

		if got == Unknown || len(absent) == 0 {
			return
		}
		for fill := range 3 {
			full := slices.Clone(r)
			for i, c := range absent {
				v := "null"
				if fill > 0 {
					v = c.values[(i*7+fill*rg.next(251)+fill)%len(c.values)]
				}
				full = append(full, change.Column{Name: c.name, Value: json.RawMessage(v)})
			}
			if again := flt.Eval(full); again != got {
				t.Fatalf("%s on %s = %v, but with the absent columns filled in, %s = %v",
					src, rowString(r), got, rowString(full), again)
			}
		}
	})
}

func rowString(r change.Row) string { return string(r.AppendJSON(nil)) }

// FuzzLike compares the matcher with the reference.
func FuzzLike(f *testing.F) {
	for _, tc := range [][2]string{{"a%b", "axxb"}, {"%_%", "é"}, {`\%%`, "%x"}, {"_a_", "bab"}} {
		f.Add(tc[0], tc[1])
	}
	f.Fuzz(func(t *testing.T, pattern, text string) {
		if len(pattern) > MaxPatternBytes || len(text) > 200 {
			return
		}
		lm, ok := compileLike(pattern)
		if !ok {
			if !strings.HasSuffix(pattern, `\`) {
				t.Fatalf("compileLike(%q) refused", pattern)
			}
			return
		}
		if got, want := lm.match([]byte(text)), refLike(pattern, text); got != want {
			t.Fatalf("%q LIKE %q = %v, reference says %v", text, pattern, got, want)
		}
	})
}
