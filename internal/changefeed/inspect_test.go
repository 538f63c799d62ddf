package changefeed

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestInspectorOnlyReads: the inspector's session refuses writes, so nothing it runs can
// change the database it checks; and reading every fact creates neither the publication nor
// the slot that preflight would.
func TestInspectorOnlyReads(t *testing.T) {
	url := db(t, itemsTable)
	cfg := testConfig(url, "items")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := Inspect(ctx, cfg)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	defer in.Close(context.Background())

	_, err = query(ctx, in.conn, `INSERT INTO items (id) VALUES (1)`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("a write through the inspector: %v, want SQLSTATE 25006 (read-only transaction)", err)
	}

	s, err := in.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := in.Publication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pub.Exists || pub.Check() != nil {
		t.Errorf("publication: exists %v, check %v; want absent, and fine since tables are configured", pub.Exists, pub.Check())
	}
	tables, err := in.Tables(ctx, pub)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || !tables[0].Exists || !tables[0].Streams || tables[0].Identity != "DEFAULT" {
		t.Errorf("tables = %+v, want public.items, existing, streamed, DEFAULT", tables)
	}
	slot, err := in.Slot(ctx, s.Database)
	if err != nil {
		t.Fatal(err)
	}
	if slot.Exists || slot.Check() != nil {
		t.Errorf("slot: exists %v, check %v; want absent and fine", slot.Exists, slot.Check())
	}
	if err := in.CheckSession(ctx); err != nil {
		t.Errorf("CheckSession: %v", err)
	}
	shape, err := in.DescribeTable(ctx, "public.items")
	if err != nil || len(shape.Columns) != 0 {
		t.Errorf("DescribeTable of an unpublished table = %+v, %v; want no columns", shape, err)
	}

	c := connect(t, url)
	var pubs, slots int
	if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_publication),
		(SELECT count(*) FROM pg_replication_slots WHERE database = current_database())`).Scan(&pubs, &slots); err != nil {
		t.Fatal(err)
	}
	if pubs != 0 || slots != 0 {
		t.Errorf("after inspecting: %d publications, %d slots; want none", pubs, slots)
	}
}

// TestDescribeTable reads a published table's columns, key and identity, as the policy compiles
// against them: a domain as its base type, and a composite key in table order.
func TestDescribeTable(t *testing.T) {
	url := db(t, `CREATE DOMAIN qty AS int CHECK (VALUE >= 0)`,
		`CREATE TABLE lines (n qty, order_id bigint, line int, note text, PRIMARY KEY (line, order_id))`,
		`CREATE PUBLICATION herald FOR TABLE lines`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := Inspect(ctx, testConfig(url, "lines"))
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	defer in.Close(context.Background())
	shape, err := in.DescribeTable(ctx, "public.lines")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var oids []uint32
	for _, c := range shape.Columns {
		names = append(names, c.Name)
		oids = append(oids, c.OID)
	}
	if !slices.Equal(names, []string{"n", "order_id", "line", "note"}) || !slices.Equal(oids, []uint32{23, 20, 23, 25}) {
		t.Errorf("columns %v %v, want n order_id line note as int4 int8 int4 text", names, oids)
	}
	if !slices.Equal(shape.Key, []string{"order_id", "line"}) || shape.Identity != "DEFAULT" {
		t.Errorf("key %v identity %q, want [order_id line] DEFAULT", shape.Key, shape.Identity)
	}
	if got := strings.Join(PinnedSettings(), ","); !strings.Contains(got, "client_encoding=UTF8") {
		t.Errorf("PinnedSettings() = %s, want client_encoding=UTF8 among them", got)
	}
}
