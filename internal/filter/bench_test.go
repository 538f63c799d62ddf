package filter

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// benchRow is a typical six-column row image, as pgvalue writes it.
const benchRow = `{"id":90412,"org_id":"acme","qty":7,"price":19.99,"title":"Buy milk","created_at":"2024-01-06T08:30:00.123Z"}`

func BenchmarkEval(b *testing.B) {
	r := row(b, benchRow)
	missing := row(b, `{"id":90412,"org_id":"acme","price":19.99,"title":"Buy milk","created_at":"2024-01-06T08:30:00.123Z"}`)
	var in strings.Builder
	in.WriteString(`{"in":["id",[`)
	for i := range MaxInValues {
		if i > 0 {
			in.WriteString(",")
		}
		fmt.Fprintf(&in, "%d", i*1000)
	}
	in.WriteString(`]]}`)
	for _, bc := range []struct {
		name, filter string
		r            change.Row
	}{
		{"typical", `{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]}`, r},
		{"typical_absent", `{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]}`, missing},
		{"numeric", `{"lt":["price","19.990000000000000001"]}`, r},
		{"timestamptz", `{"gte":["created_at","2024-01-06T09:00:00+01:00"]}`, r},
		{"in_100", in.String(), r},
		{"like_prefix", `{"like":["title","Buy%"]}`, r},
		{"like_underscore", `{"like":["title","B_y%k"]}`, r},
		{"or_5", `{"or":[{"eq":["qty",1]},{"eq":["qty",2]},{"eq":["qty",3]},{"eq":["qty",4]},{"eq":["qty",7]}]}`, r},
	} {
		f := mustParseBench(b, bc.filter)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if f.Eval(bc.r) == False && bc.name == "typical" {
					b.Fatal("typical filter does not match")
				}
			}
		})
	}
}

var benchCols = []Column{{"id", 20}, {"org_id", 25}, {"qty", 23}, {"price", 1700}, {"title", 25}, {"created_at", 1184}}

func mustParseBench(b *testing.B, s string) *Filter {
	b.Helper()
	f, err := Parse(json.RawMessage(s), benchCols)
	if err != nil {
		b.Fatalf("Parse(%s): %v", s, err)
	}
	return f
}

func BenchmarkParse(b *testing.B) {
	var big strings.Builder
	big.WriteString(`{"or":[`)
	for i := range 50 {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `{"and":[{"eq":["org_id","org%d"]},{"gte":["created_at","2024-01-06T09:00:00Z"]}]}`, i)
	}
	big.WriteString(`]}`)
	for _, bc := range []struct{ name, filter string }{
		{"typical", `{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]}`},
		{"nodes_250", big.String()},
	} {
		raw := json.RawMessage(bc.filter)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := Parse(raw, benchCols); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkKey(b *testing.B) {
	for _, bc := range []struct {
		name string
		t    Type
		v    string
	}{
		{"int", Number, `90412`},
		{"int8_string", Number, `"9007199254740993"`},
		{"numeric", Number, `19.990`},
		{"text", Text, `"acme"`},
		{"uuid", UUID, `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{"timestamptz", Timestamp, `"2024-01-06T08:30:00.123Z"`},
	} {
		v := json.RawMessage(bc.v)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := Key(bc.t, v); !ok {
					b.Fatal("no key")
				}
			}
		})
		b.Run(bc.name+"_append", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 64)
			for b.Loop() {
				var ok bool
				if buf, ok = AppendKey(buf[:0], bc.t, v); !ok {
					b.Fatal("no key")
				}
			}
		})
	}
}

// BenchmarkLikePathological measures the patterns that make a backtracking matcher blow up,
// over texts of growing size: time per byte should stay flat.
func BenchmarkLikePathological(b *testing.B) {
	for _, p := range pathological {
		lm, _ := compileLike(p.pattern)
		for _, n := range []int{1 << 10, 1 << 14, 1 << 17} {
			text := []byte(strings.Repeat("a", n))
			b.Run(fmt.Sprintf("%s/%d", strings.ReplaceAll(p.name, " ", "_"), n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					lm.match(text)
				}
			})
		}
	}
}
