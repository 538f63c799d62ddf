package snapshot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/testenv"
)

// benchTable is the benchmark's table, in the private server's own database so that it is
// made once and kept between runs: its name says its shape, and a change of shape takes a new
// name.
const (
	benchTable = "herald_bench_snapshot_rows_v1"
	benchRows  = 1_000_000
)

// benchColumns is a realistic table's row: about 130 bytes as JSON.
var benchColumns = []Column{
	{"id", pgvalue.Int8OID}, {"account_id", pgvalue.Int4OID}, {"status", pgvalue.TextOID},
	{"title", pgvalue.TextOID}, {"amount", pgvalue.Int4OID}, {"created_at", pgvalue.TimestamptzOID},
}

// benchDatabase makes the table unless it is there, whole, and returns the URL.
func benchDatabase(b *testing.B) string {
	b.Helper()
	url := testenv.PostgresURL(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM `+benchTable).Scan(&n)
	if err == nil && n == benchRows {
		return url
	}
	b.Logf("making %s (%d rows)", benchTable, benchRows)
	for _, sql := range []string{
		`DROP TABLE IF EXISTS ` + benchTable,
		`CREATE TABLE ` + benchTable + ` (id bigint PRIMARY KEY, account_id int NOT NULL, status text NOT NULL,
			title text NOT NULL, amount int NOT NULL, created_at timestamptz NOT NULL)`,
		fmt.Sprintf(`INSERT INTO %s SELECT g, g %% 5000, (ARRAY['open','closed','pending'])[g %% 3 + 1], md5(g::text),
			g %% 100000, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, %d) g`, benchTable, benchRows),
		`VACUUM ANALYZE ` + benchTable,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	return url
}

// discard is a Sink that keeps nothing.
type discard struct{}

func (discard) Snapshot(handoff.Snapshot) error         { return nil }
func (discard) Page([]change.Row, Progress, bool) error { return nil }

// BenchmarkSnapshotRows reads a table of a million rows through Read into a Sink that keeps
// nothing: rows/s and bytes/s (the rows as JSON) of the whole read, Postgres's share
// included. Run it with
//
//	scripts/testenv run -- go test -run '^$' -bench BenchmarkSnapshotRows -benchtime 3x ./internal/snapshot/
func BenchmarkSnapshotRows(b *testing.B) {
	url := benchDatabase(b)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	for _, pageRows := range []int{500, 2000} {
		b.Run(fmt.Sprintf("page_rows=%d", pageRows), func(b *testing.B) {
			r := New(pool, Config{PageRows: pageRows, PageBytes: 1 << 30, MaxRows: 2 * benchRows, MaxBytes: 1 << 40, Timeout: 10 * time.Minute})
			req := Request{Table: "public." + benchTable, Columns: benchColumns, Key: []string{"id"},
				Keep: func(row change.Row) (change.Row, bool, error) { return row, true, nil }}
			var rows, bytes int64
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p, err := r.Read(ctx, req, discard{})
				if err != nil {
					b.Fatal(err)
				}
				if p.Rows != benchRows {
					b.Fatalf("read %d rows, want %d", p.Rows, benchRows)
				}
				rows += int64(p.Rows)
				bytes += p.Bytes
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(rows)/secs, "rows/s")
			b.ReportMetric(float64(bytes)/secs/(1<<20), "MiB/s")
			b.ReportMetric(float64(bytes)/float64(rows), "B/row")
		})
	}
}
