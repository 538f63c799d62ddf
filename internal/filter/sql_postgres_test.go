package filter

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqlValues are pgValues with values that tell the SQL rendering's choices apart: timestamps
// with microseconds (Eval truncates to the millisecond), text that differs only in case (a
// nondeterministic collation's equality), a float whose exact decimal is not its printed one.
func sqlValues() map[string][]string {
	v := maps.Clone(pgValues)
	v["at"] = append(slices.Clone(v["at"]), "'2024-01-06 08:30:00.1239+00'", "'2024-01-06 08:30:00.122999+00'", "'2024-01-06 08:30:00.124+00'")
	v["local"] = append(slices.Clone(v["local"]), "'2024-01-06 08:30:00.1234'", "'2024-01-06 08:30:00.0009'")
	v["org_id"] = append(slices.Clone(v["org_id"]), "'ACME'", "'Acme'")
	v["name"] = append(slices.Clone(v["name"]), "'ZOË'", "'zoe'")
	v["code"] = append(slices.Clone(v["code"]), "'ab'", "'a'")
	v["ratio"] = append(slices.Clone(v["ratio"]), "0.1000000000000000055", "1.1")
	return v
}

// TestSQLAgainstPostgres runs each random filter's SQL, with its parameters, on rows Postgres
// holds, and compares the rows it keeps with Eval on the same rows read back through pgvalue:
// where the SQL is exact it keeps exactly the rows Eval calls True; always at least those. The
// text columns are in a deterministic collation that is not C (so SQL must compare bytewise
// where Eval does), and, on a second table, in a case-insensitive nondeterministic one, where
// the SQL need only keep every row Eval keeps.
func TestSQLAgainstPostgres(t *testing.T) {
	for _, tc := range []struct {
		name, collation string
		exact           bool
	}{
		{"deterministic", `"en-x-icu"`, true},
		{"nondeterministic", `ci`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			conn := connect(t, ctx)
			var icu bool
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_collation WHERE collname = 'en-x-icu')`).Scan(&icu); err != nil {
				t.Fatal(err)
			}
			if !icu {
				msg := "this Postgres has no ICU collations; the test needs en-x-icu (a PostgreSQL built with ICU, as Debian's is)"
				if os.Getenv("CI") == "true" {
					t.Fatal(msg)
				}
				t.Skip(msg)
			}
			coll := tc.collation
			for _, sql := range []string{
				`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
				`CREATE TYPE status AS ENUM ('open', 'closed')`,
				fmt.Sprintf(`CREATE TABLE t (k int PRIMARY KEY, id int8, org_id text COLLATE %[1]s, qty int4, price numeric,
					ratio float8, name varchar COLLATE %[1]s, code char(5) COLLATE %[1]s, flag bool, at timestamptz,
					"local" timestamp, day date, uid uuid, status status, doc jsonb, tags text[], small int2)`, coll),
				`CREATE INDEX ON t (org_id)`, `CREATE INDEX ON t (qty)`, `CREATE INDEX ON t (at)`,
			} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			values := sqlValues()
			rng := rand.New(rand.NewPCG(11, 12))
			insertRandomRows(t, ctx, conn, rng, 500, values)
			if _, err := conn.Exec(ctx, `ANALYZE t`); err != nil {
				t.Fatal(err)
			}
			rows := readRows(t, ctx, conn)

			var kept, extra, total int
			for i := range 500 {
				seed := make([]byte, 40)
				for j := range seed {
					seed[j] = byte(rng.IntN(256))
				}
				src := (&gen{seed}).filter(1)
				f := mustParse(t, src)
				var args []any
				where, exact := f.SQL(&args)
				// The extended protocol, as the snapshot reader queries: the values travel as
				// parameters, never in the SQL.
				qargs := append([]any{pgx.QueryExecModeExec}, args...)
				r, err := conn.Query(ctx, `SELECT k FROM t WHERE `+where, qargs...)
				if err != nil {
					t.Fatalf("filter %d %s as %s %v: %v", i, src, where, args, err)
				}
				in := map[int]bool{}
				for r.Next() {
					var k int
					if err := r.Scan(&k); err != nil {
						t.Fatal(err)
					}
					in[k] = true
				}
				if err := r.Err(); err != nil {
					t.Fatalf("filter %s as %s %v: %v", src, where, args, err)
				}
				for k, row := range rows {
					total++
					got := f.Eval(row)
					switch {
					case got == True && !in[k]:
						t.Errorf("%s on %s is true, but WHERE %s %v drops it", src, rowString(row), where, args)
					case got != True && in[k] && exact && tc.exact:
						t.Errorf("%s on %s is %v, but WHERE %s %v keeps it", src, rowString(row), got, where, args)
					case got != True && in[k]:
						extra++
					case got == True:
						kept++
					}
				}
			}
			t.Logf("%d of %d (filter, row) pairs kept; %d more kept by SQL alone", kept, total, extra)
			if kept == 0 {
				t.Fatal("no filter kept any row: the test shows nothing")
			}
			if !tc.exact && extra == 0 {
				t.Error("the nondeterministic collation never kept a row Eval drops: the test does not reach it")
			}
		})
	}
}

// TestSQLUsesIndexes: the comparisons a subscription's snapshot narrows its scan by (eq and in
// on a text, integer or timestamp column, a timestamp range) are served by an index on the
// column.
func TestSQLUsesIndexes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(t, ctx)
	for _, sql := range []string{
		`CREATE TABLE t (k int PRIMARY KEY, org_id text, qty int4, id int8, at timestamptz)`,
		`CREATE INDEX t_org ON t (org_id)`, `CREATE INDEX t_qty ON t (qty)`, `CREATE INDEX t_id ON t (id)`, `CREATE INDEX t_at ON t (at)`,
		`INSERT INTO t SELECT g, 'org' || (g % 100), g % 1000, g, now() - g * interval '1 second' FROM generate_series(1, 20000) g`,
		`ANALYZE t`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	cols := []Column{{"k", int4OID}, {"org_id", textOID}, {"qty", int4OID}, {"id", int8OID}, {"at", timestamptzOID}}
	for _, tt := range []struct{ filter, index string }{
		{`{"eq":["org_id","org7"]}`, "t_org"},
		{`{"in":["org_id",["org7","org8"]]}`, "t_org"},
		{`{"eq":["qty",7]}`, "t_qty"},
		{`{"in":["id",[5,"9007199254740993"]]}`, "t_id"},
		{`{"and":[{"eq":["org_id","org7"]},{"gt":["qty",5]}]}`, "t_"},
		{`{"eq":["at","2024-01-06T08:30:00.123Z"]}`, "t_at"},
		{`{"gte":["at","2099-01-01T00:00:00Z"]}`, "t_at"},
	} {
		t.Run(tt.filter, func(t *testing.T) {
			f, err := Parse([]byte(tt.filter), cols)
			if err != nil {
				t.Fatal(err)
			}
			var args []any
			where, _ := f.SQL(&args)
			qargs := append([]any{pgx.QueryExecModeExec}, args...)
			r, err := conn.Query(ctx, `EXPLAIN SELECT k FROM t WHERE `+where, qargs...)
			if err != nil {
				t.Fatalf("EXPLAIN %s: %v", where, err)
			}
			var plan []string
			for r.Next() {
				var line string
				if err := r.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, "Index") || !strings.Contains(text, tt.index) {
				t.Fatalf("WHERE %s uses no index %s*:\n%s", where, tt.index, text)
			}
		})
	}
}
