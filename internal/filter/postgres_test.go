package filter

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/testenv"
)

// pgValues are the SQL values the differential test fills each column with. Timestamps are
// whole milliseconds: the filter compares to the millisecond, as documented, and Postgres to
// the microsecond.
var pgValues = map[string][]string{
	"id":     {"1", "9007199254740993", "9007199254740992", "-5", "-9223372036854775808"},
	"org_id": {"'acme'", "'a'", "''", "'é'", "'a%b'", "'A'", `'acme\'`, "'ab_c'"},
	"qty":    {"0", "1", "-1", "5", "7", "2147483647"},
	"price":  {"0.1", "0.1000000000000000055", "1.10", "'NaN'", "'Infinity'", "'-Infinity'", "100", "0", "-0.5"},
	"ratio":  {"0.1", "1.5e-07", "'-0'", "'NaN'", "'Infinity'", "1e308", "0.30000000000000004"},
	"name":   {"'Zoë'", "'Zoe'", "'zoë'"},
	"code":   {"'AB'", "'A'", "''", "'AB!'", "' A'"},
	"flag":   {"true", "false"},
	"at": {"'2024-01-06 08:30:00.123+00'", "'2024-01-06 10:30:00.124+02'", "'2024-01-06 08:30:00+00'",
		"'infinity'", "'-infinity'", "'0044-03-15 12:00:00+00 BC'", "'10000-01-01 00:00:00+00'"},
	"local":  {"'2024-01-06 08:30:00.123'", "'2024-01-06 08:30:00'", "'0044-03-15 12:00:00 BC'", "'-infinity'"},
	"day":    {"'2024-01-06'", "'2024-01-07'", "'infinity'", "'0044-03-15 BC'", "'0001-01-01'"},
	"uid":    {"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'"},
	"status": {"'open'", "'closed'"},
	"doc":    {`'{"a":1}'`, "'[]'"},
	"tags":   {"'{x}'", "'{}'"},
	"small":  {"-3", "0"},
}

// TestAgainstPostgres evaluates random filters on rows Postgres holds, read back through
// pgvalue as the changefeed reads them, and checks each answer against the same filter as a
// SQL WHERE clause. It also drops columns from each row image and checks that whenever the
// filter still answers True or False, Postgres agrees.
func TestAgainstPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := connect(t, ctx)
	for _, sql := range []string{
		`CREATE TYPE status AS ENUM ('open', 'closed')`,
		`CREATE TABLE t (k int PRIMARY KEY, id int8, org_id text COLLATE "C", qty int4, price numeric,
			ratio float8, name varchar COLLATE "C", code char(5) COLLATE "C", flag bool, at timestamptz,
			"local" timestamp, day date, uid uuid, status status, doc jsonb, tags text[], small int2)`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	rng := rand.New(rand.NewPCG(7, 8))
	insertRandomRows(t, ctx, conn, rng, 400, pgValues)
	rows := readRows(t, ctx, conn)

	var matched, decidedPartial, total int
	for i := range 400 {
		seed := make([]byte, 40)
		for j := range seed {
			seed[j] = byte(rng.IntN(256))
		}
		src := (&gen{seed}).filter(1)
		f := mustParse(t, src)
		where := toSQL(f.root)
		in := map[int]bool{}
		r, err := conn.Query(ctx, `SELECT k FROM t WHERE `+where)
		if err != nil {
			t.Fatalf("filter %d %s as %s: %v", i, src, where, err)
		}
		for r.Next() {
			var k int
			if err := r.Scan(&k); err != nil {
				t.Fatal(err)
			}
			in[k] = true
		}
		if err := r.Err(); err != nil {
			t.Fatalf("filter %s as %s: %v", src, where, err)
		}
		for k, row := range rows {
			want := boolResult(in[k])
			total++
			if want == True {
				matched++
			}
			if got := f.Eval(row); got != want {
				t.Errorf("%s on %s = %v; Postgres (WHERE %s) says %v", src, rowString(row), got, where, want)
				continue
			}
			partial := dropColumns(rng, row)
			got := f.Eval(partial)
			if got != Unknown {
				decidedPartial++
			}
			if got != Unknown && got != want {
				t.Errorf("%s on %s (partial of %s) = %v; Postgres says %v", src, rowString(partial), rowString(row), got, want)
			}
		}
	}
	t.Logf("%d of %d (filter, row) pairs matched; %d partial images still decided", matched, total, decidedPartial)
}

func dropColumns(rng *rand.Rand, r change.Row) change.Row {
	var out change.Row
	for _, c := range r {
		if rng.IntN(4) != 0 {
			out = append(out, c)
		}
	}
	return out
}

// connect opens a session on a fresh database, with the settings the walsender is pinned to,
// on the simple protocol, so that every value comes back in its text format.
func connect(t *testing.T, ctx context.Context) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(testenv.NewDatabase(t))
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	for k, v := range map[string]string{"timezone": "UTC", "datestyle": "ISO", "intervalstyle": "postgres",
		"bytea_output": "hex", "extra_float_digits": "3"} {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// readRows reads table t as row images, each value through pgvalue.
func readRows(t *testing.T, ctx context.Context, conn *pgx.Conn) map[int]change.Row {
	t.Helper()
	r, err := conn.Query(ctx, `SELECT * FROM t ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fields := r.FieldDescriptions()
	out := map[int]change.Row{}
	for k := 0; r.Next(); k++ {
		var row change.Row
		for i, raw := range r.RawValues() {
			if fields[i].Name == "k" {
				continue
			}
			v := json.RawMessage("null")
			if raw != nil {
				v = pgvalue.JSON(fields[i].DataTypeOID, raw)
			}
			row = append(row, change.Column{Name: fields[i].Name, Value: v})
		}
		out[k] = row
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// toSQL spells a compiled filter as a WHERE clause with the semantics the package documents:
// float columns compare as the decimal Herald sends for them, and other types as their text.
func toSQL(n *node) string {
	switch n.op {
	case opAnd, opOr:
		if len(n.kids) == 0 {
			return map[op]string{opAnd: "TRUE", opOr: "FALSE"}[n.op]
		}
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			parts[i] = toSQL(k)
		}
		return "(" + strings.Join(parts, map[op]string{opAnd: " AND ", opOr: " OR "}[n.op]) + ")"
	case opNot:
		return "(NOT " + toSQL(n.kids[0]) + ")"
	}
	col := `"` + n.col + `"`
	switch {
	case n.col == "ratio":
		col = `("ratio"::text)::numeric`
	case n.typ == Other:
		col += "::text"
	}
	switch n.op {
	case opIsNull:
		return col + " IS NULL"
	case opNotNull:
		return col + " IS NOT NULL"
	case opLike:
		return col + " LIKE " + sqlString(n.pattern)
	case opIn:
		if len(n.set) == 0 {
			return "FALSE"
		}
		vals := make([]string, len(n.set))
		for i, l := range n.set {
			vals[i] = sqlLiteral(n.typ, l.key)
		}
		return col + " IN (" + strings.Join(vals, ",") + ")"
	}
	sqlOp := map[op]string{opEq: "=", opNeq: "<>", opLt: "<", opLte: "<=", opGt: ">", opGte: ">="}[n.op]
	return col + " " + sqlOp + " " + sqlLiteral(n.typ, n.lit.key)
}

func sqlLiteral(t Type, key string) string {
	switch t {
	case Number:
		return sqlString(key) + "::numeric"
	case Bool:
		return key
	case UUID:
		return sqlString(key) + "::uuid"
	case Timestamp:
		return sqlString(key) + "::timestamptz"
	case LocalTimestamp:
		return sqlString(key) + "::timestamp"
	case Date:
		return sqlString(key) + "::date"
	}
	return sqlString(key)
}

func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// tableColumns are the columns of the test table t after its key, in order.
var tableColumns = []string{"id", "org_id", "qty", "price", "ratio", "name", "code", "flag", "at", "local", "day", "uid", "status", "doc", "tags", "small"}

// insertRandomRows inserts n rows into t, keys 0 to n-1, each column a random one of values'
// literals for it, or NULL.
func insertRandomRows(t *testing.T, ctx context.Context, conn *pgx.Conn, rng *rand.Rand, n int, values map[string][]string) {
	t.Helper()
	var insert strings.Builder
	insert.WriteString(`INSERT INTO t VALUES `)
	for k := range n {
		if k > 0 {
			insert.WriteString(",")
		}
		fmt.Fprintf(&insert, "(%d", k)
		for _, c := range tableColumns {
			vals := values[c]
			if i := rng.IntN(len(vals) + 1); i == len(vals) {
				insert.WriteString(",NULL")
			} else {
				insert.WriteString("," + vals[i])
			}
		}
		insert.WriteString(")")
	}
	if _, err := conn.Exec(ctx, insert.String()); err != nil {
		t.Fatalf("insert: %v", err)
	}
}
