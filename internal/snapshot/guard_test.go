package snapshot

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestSyncStandbyStalled runs a Postgres of its own whose synchronous_standby_names names a
// standby that never comes, so a commit that asks for it waits in SyncRep for as long as the
// test likes (on the shared server it would hang every other test's commits). With one such
// commit waiting longer than the look-back, a read fails with sync_standby_stalled before its
// Sink hears of a snapshot; with a longer look-back it succeeds, and its snapshot does not see
// the waiting row, which the stream has already handed on: the gap the guard is for. A read in
// another database of the server is not held back by the commit, which its stream never
// carries. A role
// without pg_read_all_stats does not see another role's wait, and GuardAccess says so; one
// with it does. Once the standby is no longer named the commit completes and reads succeed.
func TestSyncStandbyStalled(t *testing.T) {
	ctx := ctxFor(t)
	srv := testenv.OwnPostgres(t, map[string]string{"synchronous_standby_names": "'herald_never_there'"})
	admin := srv.URL()
	// devpg's server commits with synchronous_commit off: nothing waits for the standby but
	// the writer below, which asks for it.
	testenv.Exec(t, admin, `CREATE TABLE st (id int PRIMARY KEY)`,
		`CREATE ROLE blind LOGIN`, `GRANT SELECT ON st TO blind`,
		`CREATE ROLE seer LOGIN IN ROLE pg_read_all_stats`, `GRANT SELECT ON st TO seer`)
	as := func(role string) string {
		u, err := url.Parse(admin)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		return u.String()
	}
	testenv.Exec(t, admin, `CREATE DATABASE elsewhere`)
	elsewhere, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere.Path = "/elsewhere"
	testenv.Exec(t, elsewhere.String(), `CREATE TABLE st (id int PRIMARY KEY)`)
	elsewherePool, _ := newPool(t, elsewhere.String(), 2)
	superPool, _ := newPool(t, admin, 2)
	blindPool, _ := newPool(t, as("blind"), 2)
	seerPool, _ := newPool(t, as("seer"), 2)
	req := Request{Table: "public.st", Columns: []Column{{"id", pgvalue.Int4OID}}, Key: []string{"id"}}
	short := Config{Lookback: 200 * time.Millisecond}
	read := func(pool *Reader) (*recorder, error) {
		rec := &recorder{}
		_, err := pool.Read(ctx, req, rec)
		return rec, err
	}

	super := New(superPool, short)
	if _, err := read(super); err != nil {
		t.Fatalf("a read with nothing waiting: %v", err)
	}
	a, err := super.GuardAccess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.Standbys != "herald_never_there" || !a.SeesAll || a.Role != "postgres" {
		t.Errorf("the superuser's access: %+v", a)
	}
	if _, _, limited := a.Limited(); limited {
		t.Errorf("a superuser's guard is limited: %+v", a)
	}

	// The writer: its commit is written and decodable, and waits for the standby.
	wctx, cancelWriter := context.WithCancel(context.Background())
	writer, err := pgx.Connect(wctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := writer.Exec(wctx, `SET synchronous_commit = on; INSERT INTO st VALUES (1)`)
		done <- err
	}()
	release := func() {
		testenv.Exec(t, admin, `ALTER SYSTEM SET synchronous_standby_names = ''`, `SELECT pg_reload_conf()`)
	}
	t.Cleanup(func() {
		cancelWriter()
		<-done
		writer.Close(context.Background())
	})
	probe, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(context.Background())
	waitUntil(t, "the writer waits for the standby longer than the look-back", func() bool {
		var n int
		err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND xact_start < now() - interval '300 milliseconds'`).Scan(&n)
		return err == nil && n == 1
	})

	for _, tc := range []struct {
		name    string
		reader  *Reader
		stalled bool
	}{
		{"superuser", super, true},
		{"member of pg_read_all_stats", New(seerPool, short), true},
		{"blind to other roles", New(blindPool, short), false},
		{"look-back longer than the wait", New(superPool, Config{Lookback: time.Hour}), false},
		{"another database's commit waiting", New(elsewherePool, short), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := read(tc.reader)
			if !tc.stalled {
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if rows := rec.rows(); len(rows) != 0 {
					t.Errorf("rows %v: the waiting commit is visible", rows)
				}
				return
			}
			wantReason(t, err, handoff.ReasonSyncStandbyStalled)
			var he *handoff.Error
			if errors.As(err, &he) && he.Phase != handoff.AwaitSnapshot {
				t.Errorf("failed in phase %s, want before the snapshot was handed on", he.Phase)
			}
			if len(rec.snaps) != 0 {
				t.Errorf("the Sink was given the snapshot of a read the guard refused")
			}
			if got := tc.reader.Stats().Done[Outcome(handoff.ReasonSyncStandbyStalled)]; got != 1 {
				t.Errorf("reads counted as %s: %d, want 1", handoff.ReasonSyncStandbyStalled, got)
			}
		})
	}
	a, err = New(blindPool, short).GuardAccess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.SeesAll || a.Role != "blind" {
		t.Errorf("the blind role's access: %+v", a)
	}
	if detail, fix, limited := a.Limited(); !limited || fix != `GRANT pg_read_all_stats TO "blind";` || detail == "" {
		t.Errorf("the blind role's guard: limited %v, fix %q, detail %q", limited, fix, detail)
	}
	if a, err := New(seerPool, short).GuardAccess(ctx); err != nil || !a.SeesAll {
		t.Errorf("the seer's access: %+v, %v", a, err)
	}

	// The standby no longer named, the commit completes, and nothing is stalled.
	release()
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Fatalf("the writer: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the writer still waits once no standby is named")
	}
	rec, err := read(super)
	if err != nil {
		t.Fatalf("a read once the commit completed: %v", err)
	}
	if rows := rec.rows(); len(rows) != 1 {
		t.Errorf("rows %v, want the writer's", rows)
	}
	if a, err := super.GuardAccess(ctx); err != nil || a.Standbys != "" {
		t.Errorf("access once no standby is named: %+v, %v", a, err)
	}
	if _, _, limited := (GuardAccess{Role: "blind"}).Limited(); limited {
		t.Error("with no standby named, the guard is limited")
	}
}

// TestTableNotReady: with Request.Joined a transaction id assigned after a writer began, a
// read fails with table_not_ready while the writer runs, before its Sink hears of a snapshot,
// and succeeds once it has ended, its rows in the snapshot; without Joined the same read
// succeeds while the writer runs. A writer in another database, older than both, holds
// nothing back: the refusal names this database's writer, and the read once it has ended
// succeeds with the other still running.
func TestTableNotReady(t *testing.T) {
	url := db(t, `CREATE TABLE nr (id int PRIMARY KEY)`, `INSERT INTO nr VALUES (1)`)
	pool, _ := newPool(t, url, 2)
	ctx := ctxFor(t)
	var elsewhere, here, joined int64
	other := testenv.Begin(t, ctx, db(t, `CREATE TABLE w (id int)`), `INSERT INTO w VALUES (1)`)
	if err := other.QueryRow(ctx, `SELECT pg_current_xact_id()::text::int8`).Scan(&elsewhere); err != nil {
		t.Fatal(err)
	}
	tx := testenv.Begin(t, ctx, url, `INSERT INTO nr VALUES (2)`)
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::int8`).Scan(&here); err != nil {
		t.Fatal(err)
	}
	queryOne(t, url, `SELECT pg_current_xact_id()::text::int8`, &joined)

	r := New(pool, Config{})
	req := Request{Table: "public.nr", Columns: []Column{{"id", pgvalue.Int4OID}}, Key: []string{"id"}, Joined: change.XID8(joined)}
	rec := &recorder{}
	_, err := r.Read(ctx, req, rec)
	wantReason(t, err, handoff.ReasonTableNotReady)
	if want := fmt.Sprintf("transaction %d, which began before that, still runs", here); !strings.Contains(err.Error(), want) {
		t.Errorf("the refusal %q does not name this database's writer: want %q", err, want)
	}
	if len(rec.snaps) != 0 {
		t.Error("the Sink was given the snapshot of a read the guard refused")
	}
	if got := r.Stats().Done[Outcome(handoff.ReasonTableNotReady)]; got != 1 {
		t.Errorf("reads counted as table_not_ready: %d, want 1", got)
	}

	ready := req
	ready.Joined = 0
	rec = &recorder{}
	if _, err := r.Read(ctx, ready, rec); err != nil {
		t.Fatalf("a table ready since the stream started, with the writer running: %v", err)
	}
	if got := len(rec.rows()); got != 1 {
		t.Errorf("%d rows with the writer running, want 1", got)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rec = &recorder{}
	if _, err := r.Read(ctx, req, rec); err != nil {
		t.Fatalf("once the writer ended, with another database's older writer running: %v", err)
	}
	if got := len(rec.rows()); got != 2 {
		t.Errorf("%d rows once the writer ended, want its row too", got)
	}
	if s := rec.snaps[0]; s.Xmin > change.XID8(elsewhere) {
		t.Errorf("snapshot %s: Xmin past the other database's writer %d, which still runs", s.String(), elsewhere)
	}
}

// queryOne scans one row of sql, run on its own connection to url, into dst.
func queryOne(t *testing.T, url, sql string, dst ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql).Scan(dst...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestTableNotReadyPrepared runs a Postgres of its own that allows two-phase commit: a
// transaction prepared in this database before Joined holds the table back until it is rolled
// back; one prepared in another database does not.
func TestTableNotReadyPrepared(t *testing.T) {
	ctx := ctxFor(t)
	srv := testenv.OwnPostgres(t, map[string]string{"max_prepared_transactions": "4"})
	here := srv.URL()
	elsewhere, err := url.Parse(here)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere.Path = "/elsewhere"
	testenv.Exec(t, here, `CREATE TABLE nr (id int PRIMARY KEY)`, `INSERT INTO nr VALUES (1)`, `CREATE DATABASE elsewhere`)
	testenv.Exec(t, elsewhere.String(), `CREATE TABLE w (id int)`, `BEGIN`, `INSERT INTO w VALUES (1)`, `PREPARE TRANSACTION 'there'`)
	t.Cleanup(func() { testenv.Exec(t, elsewhere.String(), `ROLLBACK PREPARED 'there'`) })
	testenv.Exec(t, here, `BEGIN`, `INSERT INTO nr VALUES (2)`, `PREPARE TRANSACTION 'here'`)
	var mine, joined int64
	queryOne(t, here, `SELECT transaction::text::int8 FROM pg_prepared_xacts WHERE gid = 'here'`, &mine)
	queryOne(t, here, `SELECT pg_current_xact_id()::text::int8`, &joined)

	pool, _ := newPool(t, here, 2)
	r := New(pool, Config{})
	req := Request{Table: "public.nr", Columns: []Column{{"id", pgvalue.Int4OID}}, Key: []string{"id"}, Joined: change.XID8(joined)}
	_, err = r.Read(ctx, req, &recorder{})
	wantReason(t, err, handoff.ReasonTableNotReady)
	if want := fmt.Sprintf("transaction %d, which began before that", mine); !strings.Contains(err.Error(), want) {
		t.Errorf("the refusal %q does not name the transaction prepared here: want %q", err, want)
	}

	testenv.Exec(t, here, `ROLLBACK PREPARED 'here'`)
	rec := &recorder{}
	if _, err := r.Read(ctx, req, rec); err != nil {
		t.Fatalf("with only another database's prepared transaction left: %v", err)
	}
	if got := len(rec.rows()); got != 1 {
		t.Errorf("%d rows, want the one committed", got)
	}
}
