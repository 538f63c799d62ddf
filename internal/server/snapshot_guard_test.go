package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestSnapshotTableNotReady: a table removed from the publication and added back while the
// node runs, with a writer that began before the ALTER and writes to it on both sides of it.
// (A table new to the publication cannot be subscribed to before a restart: the policy's rules
// compile against the tables streamed at start, so adding one back is how a running node
// meets a table joining.) Until the writer ends, a snapshot subscription to the table ends
// with table_not_ready; once it has, the subscription goes live with every row the writer
// wrote, whether the rows or the stream brought them, and changes after live follow.
func TestSnapshotTableNotReady(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL, `CREATE TABLE later (id int PRIMARY KEY, v text)`,
		`INSERT INTO later VALUES (0, 'before')`, `CREATE PUBLICATION guards FOR TABLE items, later`)
	cfg := baseConfig()
	cfg.Policy = policy.Open("public.items", "public.later")
	cfg.Changefeed = feedConfig(t, url)
	cfg.Changefeed.Tables, cfg.Changefeed.Publication = nil, "guards"
	cfg.schemaTTL = time.Nanosecond // each subscribe reads the catalog
	r := start(t, cfg)
	waitReady(t, r)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testenv.Exec(t, url, `ALTER PUBLICATION guards DROP TABLE later`)
	tx := testenv.Begin(t, ctx, url, `INSERT INTO later VALUES (1, 'before the ALTER')`)
	testenv.Exec(t, url, `ALTER PUBLICATION guards ADD TABLE later`)
	if _, err := tx.Exec(ctx, `INSERT INTO later VALUES (2, 'after the ALTER')`); err != nil {
		t.Fatal(err)
	}

	c, _ := connect(t, r)
	for _, sub := range []string{"n1", "n2"} {
		c.send(`{"type":"subscribe","id":"` + sub + `","sub":"` + sub + `","table":"public.later","snapshot":true}`)
		c.expect("subscribed")
		m := c.expect("unsubscribed")
		if m["sub"] != sub || m["code"] != "table_not_ready" || !strings.Contains(fmt.Sprint(m["message"]), "retry") {
			t.Fatalf("with the writer running: %v, want %s ended with table_not_ready", m, sub)
		}
	}
	if got := scrape(t, r)[`herald_snapshots_failed_total{reason="table_not_ready"}`]; got != 2 {
		t.Errorf("table_not_ready counted %v times, want 2", got)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c.send(`{"type":"subscribe","id":"ok","sub":"ok","table":"public.later","snapshot":true}`)
	c.expect("subscribed")
	ids, _ := readSnapshot(t, c, "ok")
	if diff := cmp.Diff([]string{"0", "1", "2"}, ids); diff != "" {
		t.Errorf("rows once the writer ended (-want +got):\n%s", diff)
	}
	testenv.Exec(t, url, `INSERT INTO later VALUES (3, 'after live')`)
	m := c.expect("change")
	if m["op"] != "insert" || fmt.Sprint(m["row"].(map[string]any)["id"]) != "3" {
		t.Errorf("after live: %v, want the insert of 3", m)
	}
}

// TestSnapshotWriterAcrossStart: a table joined the publication while the node was stopped,
// and a writer that wrote to it before the ALTER still runs as the node starts again: until
// it ends, a snapshot subscription to the table ends with table_not_ready (that row is in
// neither the snapshot nor the stream); once it has, the row is in the snapshot.
func TestSnapshotWriterAcrossStart(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL, `CREATE TABLE later (id int PRIMARY KEY, v text)`,
		`INSERT INTO later VALUES (0, 'before')`, `CREATE PUBLICATION guards FOR TABLE items`)
	cfg := baseConfig()
	cfg.Policy = policy.Open("public.items")
	cfg.Changefeed = feedConfig(t, url)
	cfg.Changefeed.Tables, cfg.Changefeed.Publication = nil, "guards"
	r := start(t, cfg)
	waitReady(t, r) // the slot exists
	r.halt(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx := testenv.Begin(t, ctx, url, `INSERT INTO later VALUES (1, 'before the ALTER')`)
	testenv.Exec(t, url, `ALTER PUBLICATION guards ADD TABLE later`)

	cfg.Policy = policy.Open("public.items", "public.later")
	r = start(t, cfg)
	waitReady(t, r)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"n","sub":"n","table":"public.later","snapshot":true}`)
	c.expect("subscribed")
	if m := c.expect("unsubscribed"); m["code"] != "table_not_ready" {
		t.Fatalf("with a writer from before the start running: %v, want table_not_ready", m)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c.send(`{"type":"subscribe","id":"ok","sub":"ok","table":"public.later","snapshot":true}`)
	c.expect("subscribed")
	if ids, _ := readSnapshot(t, c, "ok"); fmt.Sprint(ids) != "[0 1]" {
		t.Errorf("rows once the writer ended: %v, want [0 1]", ids)
	}
}

// TestSchemaJoined: the catalog gives no Joined before the stream starts or to a table in the
// publication when it did; a table added later gets one, kept while it stays the member it
// was, and a new one when it joins anew: seen out and back, or removed and added back unseen.
func TestSchemaJoined(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`,
		`CREATE PUBLICATION pub FOR TABLE a`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := newPGSchema(ctx, url, "pub", "slot")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	joined := func(table string) change.XID8 {
		t.Helper()
		info, err := p.read(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Columns) == 0 {
			t.Fatalf("%s is not in the publication", table)
		}
		return info.Joined
	}
	if got := joined("public.a"); got != 0 {
		t.Errorf("before the stream started: Joined %d", got)
	}
	// A transaction writing to a as the stream starts holds it back; one writing elsewhere
	// does not hold back b.
	tx := testenv.Begin(t, ctx, url, `INSERT INTO a VALUES (1)`)
	var xid uint64
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::int8`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := p.Started(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := joined("public.a"); got != change.XID8(xid+1) {
		t.Errorf("a table written to as the stream started: Joined %d, want one past the writer's %d", got, xid)
	}
	testenv.Exec(t, url, `ALTER PUBLICATION pub DROP TABLE a`, `ALTER PUBLICATION pub ADD TABLE a`)
	if got := joined("public.a"); got <= change.XID8(xid) {
		t.Errorf("a, removed and added back: Joined %d, want past %d", got, xid)
	}

	testenv.Exec(t, url, `ALTER PUBLICATION pub ADD TABLE b`)
	jb := joined("public.b")
	if jb == 0 {
		t.Fatal("a table added after the stream started has no Joined")
	}
	if got := joined("public.b"); got != jb {
		t.Errorf("read again: Joined %d, want %d", got, jb)
	}
	if err := p.Started(ctx); err != nil || joined("public.b") != jb {
		t.Errorf("Started again changed what was recorded (%v)", err)
	}

	testenv.Exec(t, url, `ALTER PUBLICATION pub DROP TABLE b`, `ALTER PUBLICATION pub ADD TABLE b`)
	jb2 := joined("public.b")
	if jb2 <= jb {
		t.Errorf("removed and added back: Joined %d, want past %d", jb2, jb)
	}

	testenv.Exec(t, url, `ALTER PUBLICATION pub DROP TABLE a`)
	if info, err := p.read(ctx, "public.a"); err != nil || len(info.Columns) != 0 {
		t.Fatalf("a, out of the publication: %+v, %v", info, err)
	}
	testenv.Exec(t, url, `ALTER PUBLICATION pub ADD TABLE a`)
	if got := joined("public.a"); got <= jb2 {
		t.Errorf("a, seen out and back: Joined %d, want past %d", got, jb2)
	}
}
