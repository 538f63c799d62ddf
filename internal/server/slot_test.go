package server

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestSlotWatch: the slot's state as the database reports it: absent, then present and
// inactive with its WAL reserved; a database that does not answer is a failed read, counted.
func TestSlotWatch(t *testing.T) {
	url := testenv.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	slot := testenv.SlotName(t, url)
	w := newSlotWatch(pool, slot, quiet)
	w.poll(ctx)
	if st := w.State(); !st.read || st.exists {
		t.Fatalf("before the slot exists: %+v, want read and not there", st)
	}
	testenv.Exec(t, url, `SELECT pg_create_logical_replication_slot('`+slot+`', 'pgoutput')`)
	w.poll(ctx)
	st := w.State()
	if !st.read || !st.exists || st.active || st.walStatus != "reserved" || st.retained < 0 || st.lag < 0 {
		t.Fatalf("a new slot nobody streams from: %+v, want read, there, inactive, reserved", st)
	}
	if w.failures.Load() != 0 {
		t.Fatalf("%d failed reads, want 0", w.failures.Load())
	}

	broken, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer broken.Close()
	wb := newSlotWatch(broken, slot, quiet)
	wb.poll(ctx)
	if st := wb.State(); st.read || wb.failures.Load() != 1 {
		t.Fatalf("a database that does not answer: %+v, %d failures; want no read and 1 failure", st, wb.failures.Load())
	}
}
