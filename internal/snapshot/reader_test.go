package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/testenv"
)

// pagesTable is a table with a two-column key whose rows are inserted out of key order, and
// whose v grows with a, so rows differ in size.
var pagesTable = []string{
	`CREATE TABLE pages (a int, b text, v text, PRIMARY KEY (a, b))`,
}

var pagesColumns = []Column{{"a", pgvalue.Int4OID}, {"b", pgvalue.TextOID}, {"v", pgvalue.TextOID}}

func pagesRequest() Request {
	return Request{Table: "public.pages", Columns: pagesColumns, Key: []string{"a", "b"}}
}

// fillPages inserts n rows, a in [0, n/2), b "x" or "y", in a shuffled order.
func fillPages(t *testing.T, url string, n int) {
	t.Helper()
	var values []string
	for i := range n {
		a, b := i/2, "xy"[i%2:i%2+1]
		values = append(values, fmt.Sprintf("(%d, '%s', '%s')", a, b, strings.Repeat("v", a%17)))
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(values), func(i, j int) { values[i], values[j] = values[j], values[i] })
	for len(values) > 0 {
		k := min(len(values), 500)
		testenv.Exec(t, url, "INSERT INTO pages VALUES "+strings.Join(values[:k], ", "))
		values = values[k:]
	}
}

func jsonSize(r change.Row) int64 { return int64(len(r.AppendJSON(nil))) }

// checkPages checks the pages a read handed on against cfg's bounds: each page but the last
// full (by rows or bytes) and none over (but for the row that filled it), only the last marked
// last, none empty but the one page of an empty result, and each Progress the running total.
func checkPages(t *testing.T, pages []page, cfg Config, got Progress) {
	t.Helper()
	cfg = cfg.withDefaults()
	if len(pages) == 0 {
		t.Fatal("no page")
	}
	var want Progress
	for i, pg := range pages {
		last := i == len(pages)-1
		var bytes, lastRow int64
		for _, r := range pg.rows {
			lastRow = jsonSize(r)
			bytes += lastRow
		}
		want.Rows += len(pg.rows)
		want.Bytes += bytes
		want.Pages++
		if pg.p != want {
			t.Errorf("page %d: progress %+v, want %+v", i, pg.p, want)
		}
		if pg.last != last {
			t.Errorf("page %d of %d: last = %v", i, len(pages), pg.last)
		}
		switch {
		case len(pg.rows) == 0 && (i > 0 || !last):
			t.Errorf("page %d of %d is empty", i, len(pages))
		case len(pg.rows) > cfg.PageRows:
			t.Errorf("page %d has %d rows, more than %d", i, len(pg.rows), cfg.PageRows)
		case len(pg.rows) > 0 && bytes-lastRow >= int64(cfg.PageBytes):
			t.Errorf("page %d: %d bytes before its last row, at least the page's %d", i, bytes-lastRow, cfg.PageBytes)
		case !last && len(pg.rows) < cfg.PageRows && bytes < int64(cfg.PageBytes):
			t.Errorf("page %d is handed on with %d rows and %d bytes: not full", i, len(pg.rows), bytes)
		}
	}
	if got != want {
		t.Errorf("Read returned %+v, want %+v", got, want)
	}
}

// keyOf reads a pages row's key.
func keyOf(t *testing.T, r change.Row) (int, string) {
	t.Helper()
	var a int
	var b string
	av, _ := r.Get("a")
	bv, _ := r.Get("b")
	if err := json.Unmarshal(av, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bv, &b); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func TestPages(t *testing.T) {
	url := db(t, pagesTable...)
	pool, _ := newPool(t, url, 2)
	fillPages(t, url, 46)
	testenv.Exec(t, url, `CREATE TABLE empty (id int PRIMARY KEY)`, `CREATE TABLE one (id int PRIMARY KEY, v text)`,
		`INSERT INTO one VALUES (1, repeat('w', 3000))`)
	odd := func(r change.Row) (change.Row, bool, error) {
		v, _ := r.Get("a")
		return r, strings.TrimLeft(string(v), "0123456789") == "" && (v[len(v)-1]-'0')%2 == 1, nil
	}
	tests := []struct {
		name     string
		cfg      Config
		req      Request
		rows     int
		wantPage int
	}{
		{"by rows", Config{PageRows: 5}, pagesRequest(), 46, 10},
		{"a multiple of the page", Config{PageRows: 23}, pagesRequest(), 46, 2},
		{"one page", Config{}, pagesRequest(), 46, 1},
		{"by bytes", Config{PageBytes: 200}, pagesRequest(), 46, 0},
		{"by rows and bytes", Config{PageRows: 4, PageBytes: 150}, pagesRequest(), 46, 0},
		{"keep drops half", Config{PageRows: 5}, Request{Table: "public.pages", Columns: pagesColumns, Key: []string{"a", "b"}, Keep: odd}, 22, 5},
		{"a row larger than a page", Config{PageBytes: 100}, Request{Table: "public.one", Columns: []Column{{"id", pgvalue.Int4OID}, {"v", pgvalue.TextOID}}, Key: []string{"id"}}, 1, 1},
		{"empty", Config{PageRows: 5}, Request{Table: "public.empty", Columns: []Column{{"id", pgvalue.Int4OID}}, Key: []string{"id"}}, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			p, err := New(pool, tc.cfg).Read(ctxFor(t), tc.req, rec)
			if err != nil {
				t.Fatal(err)
			}
			checkPages(t, rec.pages, tc.cfg, p)
			if p.Rows != tc.rows {
				t.Errorf("%d rows, want %d", p.Rows, tc.rows)
			}
			if tc.wantPage > 0 && p.Pages != tc.wantPage {
				t.Errorf("%d pages, want %d", p.Pages, tc.wantPage)
			}
			if len(rec.snaps) != 1 {
				t.Errorf("Snapshot called %d times, want once", len(rec.snaps))
			}
			if tc.req.Table != "public.pages" {
				return
			}
			// Key order: (a, b) ascending.
			rows := rec.rows()
			for i := 1; i < len(rows); i++ {
				a0, b0 := keyOf(t, rows[i-1])
				a1, b1 := keyOf(t, rows[i])
				if a0 > a1 || a0 == a1 && b0 >= b1 {
					t.Fatalf("row %d (%d, %s) comes after (%d, %s): not in key order", i, a1, b1, a0, b0)
				}
			}
		})
	}
}

func TestTooLarge(t *testing.T) {
	url := db(t, pagesTable...)
	pool, _ := newPool(t, url, 2)
	fillPages(t, url, 20)
	var total int64
	{
		rec := &recorder{}
		p, err := New(pool, Config{}).Read(ctxFor(t), pagesRequest(), rec)
		if err != nil {
			t.Fatal(err)
		}
		total = p.Bytes
	}
	half := func(r change.Row) (change.Row, bool, error) {
		_, b := keyOf(t, r)
		return r, b == "x", nil
	}
	tests := []struct {
		name string
		cfg  Config
		keep func(change.Row) (change.Row, bool, error)
		want handoff.Reason // "" for none
	}{
		{"rows at the bound", Config{MaxRows: 20}, nil, ""},
		{"rows past the bound", Config{MaxRows: 19, PageRows: 4}, nil, handoff.ReasonTooLarge},
		{"bytes at the bound", Config{MaxBytes: total}, nil, ""},
		{"bytes past the bound", Config{MaxBytes: total - 1}, nil, handoff.ReasonTooLarge},
		{"rows Keep drops do not count", Config{MaxRows: 10}, half, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := pagesRequest()
			req.Keep = tc.keep
			r := New(pool, tc.cfg)
			rec := &recorder{}
			p, err := r.Read(ctxFor(t), req, rec)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantReason(t, err, tc.want)
			for _, pg := range rec.pages {
				if pg.last {
					t.Error("a read that failed handed on a last page")
				}
			}
			if p.Rows > tc.cfg.withDefaults().MaxRows || p.Bytes > tc.cfg.withDefaults().MaxBytes {
				t.Errorf("sent %+v past the bounds", p)
			}
			if got := r.Stats().Done[Outcome(tc.want)]; got != 1 {
				t.Errorf("Stats().Done[%s] = %d, want 1", tc.want, got)
			}
		})
	}
}

// TestKeepFiltersAndProjects reads with a filter, as SQL and as Keep's Eval, and a projection.
func TestKeepFiltersAndProjects(t *testing.T) {
	url := db(t, pagesTable...)
	pool, _ := newPool(t, url, 2)
	fillPages(t, url, 40)
	f, err := filter.Parse(json.RawMessage(`{"and":[{"gte":["a",5]},{"lt":["a",12]},{"eq":["b","y"]}]}`),
		[]filter.Column{{Name: "a", OID: pgvalue.Int4OID}, {Name: "b", OID: pgvalue.TextOID}, {Name: "v", OID: pgvalue.TextOID}})
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	req := pagesRequest()
	req.Filter = f
	req.Keep = func(r change.Row) (change.Row, bool, error) {
		seen.Add(1)
		if f.Eval(r) != filter.True {
			return nil, false, nil
		}
		a, _ := r.Get("a")
		v, _ := r.Get("v")
		return change.Row{{Name: "a", Value: a}, {Name: "v", Value: v}}, true, nil
	}
	rec := &recorder{}
	r := New(pool, Config{PageRows: 3})
	p, err := r.Read(ctxFor(t), req, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkPages(t, rec.pages, Config{PageRows: 3}, p)
	var got []string
	for _, row := range rec.rows() {
		got = append(got, string(row.AppendJSON(nil)))
	}
	var want []string
	for a := 5; a < 12; a++ {
		want = append(want, fmt.Sprintf(`{"a":%d,"v":"%s"}`, a, strings.Repeat("v", a%17)))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	// The SQL narrowed the scan: Keep saw only the rows it matches.
	if n := seen.Load(); n != int64(len(want)) {
		t.Errorf("Keep saw %d rows, want %d: the filter's SQL did not narrow the read", n, len(want))
	}
	if s := r.Stats(); s.Scanned != uint64(len(want)) || s.Rows != uint64(len(want)) || s.Bytes != uint64(p.Bytes) || s.Done[OutcomeOK] != 1 {
		t.Errorf("Stats = %+v, want %d scanned and sent, %d bytes, one ok", s, len(want), p.Bytes)
	}
}

func TestPolicyErrorFailsTheRead(t *testing.T) {
	url := db(t, pagesTable...)
	pool, _ := newPool(t, url, 2)
	fillPages(t, url, 20)
	broken := errors.New("no such claim")
	req := pagesRequest()
	req.Keep = func(r change.Row) (change.Row, bool, error) {
		if a, _ := keyOf(t, r); a == 7 {
			return nil, false, broken
		}
		return r, true, nil
	}
	rec := &recorder{}
	r := New(pool, Config{PageRows: 4})
	p, err := r.Read(ctxFor(t), req, rec)
	wantReason(t, err, handoff.ReasonPolicyError)
	if !errors.Is(err, broken) {
		t.Errorf("err = %v, want it to wrap the rule's error", err)
	}
	if p.Rows != 12 || p.Pages != 3 {
		t.Errorf("sent %+v, want the 3 pages of 4 rows before the failing row", p)
	}
	if r.Stats().Done[Outcome(handoff.ReasonPolicyError)] != 1 {
		t.Errorf("Stats = %+v", r.Stats())
	}
}

func TestSinkErrorsAreReturnedAsTheyAre(t *testing.T) {
	url := db(t, pagesTable...)
	pool, _ := newPool(t, url, 2)
	fillPages(t, url, 20)
	refused := errors.New("client gone")
	for _, at := range []string{"snapshot", "page", "last page"} {
		t.Run(at, func(t *testing.T) {
			rec := &recorder{}
			switch at {
			case "snapshot":
				rec.onSnapshot = func(handoff.Snapshot) error { return refused }
			case "page":
				rec.onPage = func(_ []change.Row, _ Progress, last bool) error { return refused }
			case "last page":
				rec.onPage = func(_ []change.Row, _ Progress, last bool) error {
					if last {
						return refused
					}
					return nil
				}
			}
			r := New(pool, Config{PageRows: 8})
			p, err := r.Read(ctxFor(t), pagesRequest(), rec)
			if err != refused {
				t.Fatalf("err = %v, want the Sink's own error", err)
			}
			want := map[string]int{"snapshot": 0, "page": 0, "last page": 16}[at]
			if p.Rows != want {
				t.Errorf("Read returned %+v, want %d rows sent", p, want)
			}
			if r.Stats().Done[OutcomeSink] != 1 {
				t.Errorf("Stats = %+v", r.Stats())
			}
		})
	}
}

// TestSnapshotIsFixedByTheFirstStatement changes the table from another connection once the
// snapshot is known (in Sink.Snapshot, before any row is read): none of it is in the rows,
// and the snapshot says so of that transaction, while it sees one committed before.
func TestSnapshotIsFixedByTheFirstStatement(t *testing.T) {
	url := db(t, `CREATE TABLE fx (id int PRIMARY KEY, v int)`, `INSERT INTO fx SELECT g, 0 FROM generate_series(1, 5) g`)
	pool, _ := newPool(t, url, 2)
	ctx := ctxFor(t)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	xidOf := func(sql ...string) change.XID8 {
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sql {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		var x int64
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::int8`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return change.XID8(x)
	}
	before := xidOf(`UPDATE fx SET v = 5 WHERE id = 5`)
	var after change.XID8
	rec := &recorder{onSnapshot: func(s handoff.Snapshot) error {
		after = xidOf(`INSERT INTO fx VALUES (6, 0)`, `UPDATE fx SET v = 1 WHERE id = 1`, `DELETE FROM fx WHERE id = 2`)
		return nil
	}}
	if _, err := New(pool, Config{PageRows: 2}).Read(ctx, Request{Table: "public.fx",
		Columns: []Column{{"id", pgvalue.Int4OID}, {"v", pgvalue.Int4OID}}, Key: []string{"id"}}, rec); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rec.rows() {
		got = append(got, string(r.AppendJSON(nil)))
	}
	want := []string{`{"id":1,"v":0}`, `{"id":2,"v":0}`, `{"id":3,"v":0}`, `{"id":4,"v":0}`, `{"id":5,"v":5}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	snap := rec.snaps[0]
	if !snap.Visible(before) {
		t.Errorf("snapshot %s does not see %s, committed before the read", snap.String(), before)
	}
	if snap.Visible(after) {
		t.Errorf("snapshot %s sees %s, committed after it was taken", snap.String(), after)
	}
	if snap.Bound == 0 {
		t.Error("the snapshot has no bound")
	}
}

// TestSchemaChanged reads with a request made before the table changed.
func TestSchemaChanged(t *testing.T) {
	url := db(t, `CREATE DOMAIN posint AS int CHECK (VALUE > 0)`, `CREATE DOMAIN small_posint AS posint CHECK (VALUE < 100)`)
	pool, _ := newPool(t, url, 2)
	cols := []Column{{"id", pgvalue.Int4OID}, {"a", pgvalue.Int4OID}, {"b", pgvalue.TextOID}}
	tests := []struct {
		name  string
		alter string   // run after the table is made
		cols  []Column // the request's, when not cols
		want  handoff.Reason
	}{
		{"unchanged", ``, nil, ""},
		{"column dropped", `ALTER TABLE %s DROP COLUMN b`, nil, handoff.ReasonSchemaChanged},
		{"column renamed", `ALTER TABLE %s RENAME COLUMN a TO c`, nil, handoff.ReasonSchemaChanged},
		{"type changed", `ALTER TABLE %s ALTER COLUMN a TYPE bigint`, nil, handoff.ReasonSchemaChanged},
		{"table dropped", `DROP TABLE %s`, nil, handoff.ReasonSchemaChanged},
		{"table renamed", `ALTER TABLE %s RENAME TO renamed_%[1]s`, nil, handoff.ReasonSchemaChanged},
		{"columns out of order", ``, []Column{{"id", pgvalue.Int4OID}, {"b", pgvalue.TextOID}, {"a", pgvalue.Int4OID}}, handoff.ReasonSchemaChanged},
		{"column added", `ALTER TABLE %s ADD COLUMN c int`, nil, ""},
		{"column left out of the request", ``, []Column{{"id", pgvalue.Int4OID}, {"b", pgvalue.TextOID}}, ""},
		{"domain, requested as its base", `ALTER TABLE %s ALTER COLUMN a TYPE small_posint`, nil, ""},
		{"domain, requested as itself", `ALTER TABLE %s ALTER COLUMN a TYPE small_posint`, []Column{{"id", pgvalue.Int4OID}, {"a", 0}, {"b", pgvalue.TextOID}}, ""},
		{"domain, requested as another type", `ALTER TABLE %s ALTER COLUMN a TYPE small_posint`, []Column{{"id", pgvalue.Int4OID}, {"a", pgvalue.Int8OID}, {"b", pgvalue.TextOID}}, handoff.ReasonSchemaChanged},
	}
	ctx := ctxFor(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table := fmt.Sprintf("sc_%d", i)
			testenv.Exec(t, url, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, a int, b text)`, table),
				fmt.Sprintf(`INSERT INTO %s VALUES (1, 1, 'one')`, table))
			if tc.alter != "" {
				testenv.Exec(t, url, fmt.Sprintf(tc.alter, table))
			}
			req := Request{Table: "public." + table, Columns: cols, Key: []string{"id"}}
			if tc.cols != nil {
				req.Columns = slices.Clone(tc.cols)
				for j, c := range req.Columns {
					if c.OID == 0 { // the domain's own OID
						var oid int64
						if err := conn.QueryRow(ctx, `SELECT 'small_posint'::regtype::oid::int8`).Scan(&oid); err != nil {
							t.Fatal(err)
						}
						req.Columns[j].OID = uint32(oid)
					}
				}
			}
			rec := &recorder{}
			_, err := New(pool, Config{}).Read(ctx, req, rec)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := rec.rows(); len(got) != 1 || len(got[0]) != len(req.Columns) {
					t.Errorf("rows = %v, want one of %d columns", got, len(req.Columns))
				}
				return
			}
			wantReason(t, err, tc.want)
		})
	}
}

// TestTableIsLockedFromBeforeTheSnapshot: once the snapshot is known, no change to the
// table's columns can commit until the read ends.
func TestTableIsLockedFromBeforeTheSnapshot(t *testing.T) {
	url := db(t, `CREATE TABLE lk (id int PRIMARY KEY, b text)`, `INSERT INTO lk VALUES (1, 'one')`)
	pool, _ := newPool(t, url, 2)
	ctx := ctxFor(t)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	var alterErr error
	rec := &recorder{onSnapshot: func(handoff.Snapshot) error {
		_, alterErr = other.Exec(ctx, `SET lock_timeout = '200ms'; ALTER TABLE lk DROP COLUMN b`)
		return nil
	}}
	req := Request{Table: "public.lk", Columns: []Column{{"id", pgvalue.Int4OID}, {"b", pgvalue.TextOID}}, Key: []string{"id"}}
	if _, err := New(pool, Config{}).Read(ctx, req, rec); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if !errors.As(alterErr, &pe) || pe.Code != "55P03" {
		t.Fatalf("ALTER TABLE during the read: %v, want lock_not_available (55P03)", alterErr)
	}
	if got := string(rec.rows()[0].AppendJSON(nil)); got != `{"id":1,"b":"one"}` {
		t.Errorf("row = %s", got)
	}
}

func TestBusy(t *testing.T) {
	url := db(t, pagesTable...)
	pool, _ := newPool(t, url, 4)
	fillPages(t, url, 4)
	ctx := ctxFor(t)
	r := New(pool, Config{MaxConcurrent: 1, QueueWait: 50 * time.Millisecond})
	holding, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := r.Read(ctx, pagesRequest(), &recorder{onSnapshot: func(handoff.Snapshot) error {
			close(holding)
			<-release
			return nil
		}})
		first <- err
	}()
	<-holding
	if s := r.Stats(); s.InProgress != 1 {
		t.Errorf("Stats().InProgress = %d while a read holds the slot, want 1", s.InProgress)
	}
	_, err := r.Read(ctx, pagesRequest(), &recorder{})
	wantReason(t, err, handoff.ReasonBusy)

	// A read that may wait long enough gets the slot once it is free.
	waiter := New(pool, Config{MaxConcurrent: 1, QueueWait: time.Minute})
	holding2 := make(chan struct{})
	release2 := make(chan struct{})
	second := make(chan error, 1)
	go func() {
		_, err := waiter.Read(ctx, pagesRequest(), &recorder{onSnapshot: func(handoff.Snapshot) error {
			close(holding2)
			<-release2
			return nil
		}})
		second <- err
	}()
	<-holding2
	third := make(chan error, 1)
	go func() {
		_, err := waiter.Read(ctx, pagesRequest(), &recorder{})
		third <- err
	}()
	waitUntil(t, "the third read waits", func() bool { return waiter.Stats().Waiting == 1 })
	close(release2)
	for _, c := range []chan error{second, third} {
		if err := <-c; err != nil {
			t.Error(err)
		}
	}
	close(release)
	if err := <-first; err != nil {
		t.Error(err)
	}
	s := r.Stats()
	if s.InProgress != 0 || s.Waiting != 0 || s.Done[OutcomeOK] != 1 || s.Done[Outcome(handoff.ReasonBusy)] != 1 {
		t.Errorf("Stats = %+v, want one ok and one busy, none running or waiting", s)
	}
	if s := waiter.Stats(); s.InProgress != 0 || s.Waiting != 0 || s.Done[OutcomeOK] != 2 {
		t.Errorf("Stats = %+v, want two ok, none running or waiting", s)
	}
}

// heldSnapshots counts the sessions of application app that hold a snapshot open.
func heldSnapshots(t *testing.T, conn *pgx.Conn, app string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND backend_xmin IS NOT NULL`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTimeoutWithASinkThatBlocks: the Sink blocks on a page past the read's timeout. The
// server ends the transaction by itself meanwhile, and the read fails with snapshot_timeout.
func TestTimeoutWithASinkThatBlocks(t *testing.T) {
	url := db(t, pagesTable...)
	pool, app := newPool(t, url, 2)
	fillPages(t, url, 10)
	ctx := ctxFor(t)
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	var heldThen int
	rec := &recorder{onPage: func(_ []change.Row, _ Progress, last bool) error {
		if last {
			return nil
		}
		heldThen = heldSnapshots(t, watch, app)
		waitUntil(t, "the server ends the read's transaction", func() bool { return heldSnapshots(t, watch, app) == 0 })
		return nil
	}}
	r := New(pool, Config{Timeout: time.Second, PageRows: 2})
	_, err = r.Read(ctx, pagesRequest(), rec)
	wantReason(t, err, handoff.ReasonTimeout)
	if heldThen != 1 {
		t.Errorf("%d sessions held a snapshot while the Sink had its first page, want 1", heldThen)
	}
	if r.Stats().Done[Outcome(handoff.ReasonTimeout)] != 1 {
		t.Errorf("Stats = %+v", r.Stats())
	}
	// The pool's connections still work.
	if _, err := r.Read(ctx, pagesRequest(), &recorder{}); err != nil {
		t.Errorf("a read after the timeout: %v", err)
	}
}

// TestLastPageAfterCommit: the last page is handed on with the transaction over, so a Sink
// that blocks on it holds no snapshot, and its slowness fails nothing.
func TestLastPageAfterCommit(t *testing.T) {
	url := db(t, pagesTable...)
	pool, app := newPool(t, url, 2)
	fillPages(t, url, 10)
	ctx := ctxFor(t)
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	held := -1
	r := New(pool, Config{PageRows: 4, MaxConcurrent: 1})
	var inProgress int
	rec := &recorder{onPage: func(_ []change.Row, _ Progress, last bool) error {
		if last {
			held = heldSnapshots(t, watch, app)
			inProgress = r.Stats().InProgress
		}
		return nil
	}}
	if _, err := r.Read(ctx, pagesRequest(), rec); err != nil {
		t.Fatal(err)
	}
	if held != 0 || inProgress != 0 {
		t.Errorf("at the last page %d sessions held a snapshot and %d reads a slot, want none", held, inProgress)
	}
}

func TestCancel(t *testing.T) {
	url := db(t, pagesTable...)
	pool, _ := newPool(t, url, 2)
	fillPages(t, url, 10)
	t.Run("while reading", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctxFor(t))
		defer cancel()
		r := New(pool, Config{PageRows: 2})
		rec := &recorder{onPage: func([]change.Row, Progress, bool) error {
			cancel()
			return nil
		}}
		_, err := r.Read(ctx, pagesRequest(), rec)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if r.Stats().Done[OutcomeCanceled] != 1 {
			t.Errorf("Stats = %+v", r.Stats())
		}
	})
	t.Run("while waiting for a slot", func(t *testing.T) {
		r := New(pool, Config{MaxConcurrent: 1, QueueWait: time.Minute})
		holding, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := r.Read(ctxFor(t), pagesRequest(), &recorder{onSnapshot: func(handoff.Snapshot) error {
				close(holding)
				<-release
				return nil
			}})
			first <- err
		}()
		<-holding
		ctx, cancel := context.WithCancel(ctxFor(t))
		done := make(chan error, 1)
		go func() {
			_, err := r.Read(ctx, pagesRequest(), &recorder{})
			done <- err
		}()
		waitUntil(t, "the second read waits", func() bool { return r.Stats().Waiting == 1 })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		close(release)
		if err := <-first; err != nil {
			t.Error(err)
		}
	})
}

func TestFence(t *testing.T) {
	url := db(t)
	pool, _ := newPool(t, url, 2)
	r := New(pool, Config{})
	a, err := r.Fence(ctxFor(t), "one")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Fence(ctxFor(t), "two")
	if err != nil {
		t.Fatal(err)
	}
	if a == 0 || b <= a {
		t.Errorf("fences at %s then %s: want above 0 and rising", a, b)
	}
}

// TestOddNames reads a table whose schema, table and column names need quoting.
func TestOddNames(t *testing.T) {
	url := db(t,
		`CREATE SCHEMA "we""ird schema"`,
		`CREATE TABLE "we""ird schema"."Mixed ""Case"" t" ("Id" int, "has space" text, "sel""ect" int, "ünï" text, t int, PRIMARY KEY ("has space", "Id"))`,
		`INSERT INTO "we""ird schema"."Mixed ""Case"" t" VALUES (2, 'b', 20, 'ü', 1), (1, 'b', 10, 'ï', 2), (3, 'a', 30, NULL, 3)`,
	)
	pool, _ := newPool(t, url, 2)
	cols := []Column{{"Id", pgvalue.Int4OID}, {"has space", pgvalue.TextOID}, {`sel"ect`, pgvalue.Int4OID}, {"ünï", pgvalue.TextOID}, {"t", pgvalue.Int4OID}}
	fcols := make([]filter.Column, len(cols))
	for i, c := range cols {
		fcols[i] = filter.Column{Name: c.Name, OID: c.OID}
	}
	f, err := filter.Parse(json.RawMessage(`{"and":[{"gte":["sel\"ect",10]},{"in":["has space",["a","b"]]},{"gt":["t",0]}]}`), fcols)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	_, err = New(pool, Config{PageRows: 1}).Read(ctxFor(t), Request{Table: `we"ird schema.Mixed "Case" t`, Columns: cols,
		Key: []string{"has space", "Id"}, Filter: f}, rec)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rec.rows() {
		got = append(got, string(r.AppendJSON(nil)))
	}
	want := []string{
		`{"Id":3,"has space":"a","sel\"ect":30,"ünï":null,"t":3}`,
		`{"Id":1,"has space":"b","sel\"ect":10,"ünï":"ï","t":2}`,
		`{"Id":2,"has space":"b","sel\"ect":20,"ünï":"ü","t":1}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}
