package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/ratelog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// slotPoll is how often the server reads the replication slot's state from the database for
// /metrics: often enough to see a slot's retained WAL grow long before a disk fills, rarely
// enough to cost the database nothing. A scrape never queries.
const slotPoll = 15 * time.Second

// slotQuery reads what the database says of slot $1: whether a connection streams from it,
// its wal_status (Postgres 13 and later), the WAL it keeps from removal (from restart_lsn to
// the current WAL position: the disk it pins), how far its confirmed position lags that
// position, and how much more WAL may be written before it is lost (NULL without
// max_slot_wal_keep_size). No row: there is no such slot.
const slotQuery = `
SELECT s.active, COALESCE(s.wal_status, ''),
	COALESCE(pg_wal_lsn_diff(c.lsn, s.restart_lsn), 0)::bigint,
	COALESCE(pg_wal_lsn_diff(c.lsn, s.confirmed_flush_lsn), 0)::bigint,
	s.safe_wal_size
FROM pg_replication_slots s,
	(SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn) c
WHERE s.slot_name = $1`

// slotState is what the last read of the slot found.
type slotState struct {
	read      bool   // the last read succeeded
	exists    bool   // and found the slot
	active    bool   // a connection streams from it
	walStatus string // reserved, extended, unreserved or lost; "" before Postgres 13
	retained  int64  // bytes of WAL it keeps from removal
	lag       int64  // bytes between its confirmed position and the WAL's end
	safe      *int64 // bytes that may still be written before it is lost; nil: no limit
}

// walStatuses are the slot wal_status values Postgres reports, as metric labels.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// slotWatch reads the replication slot's state every slotPoll, on the catalog pool. It is
// owned by Run, which runs it and waits for it.
type slotWatch struct {
	pool *pgxpool.Pool
	slot string
	log  *ratelog.Limiter

	failures atomic.Uint64 // reads that failed

	mu    sync.Mutex
	state slotState // guarded by mu
}

func newSlotWatch(pool *pgxpool.Pool, slot string, log *slog.Logger) *slotWatch {
	return &slotWatch{pool: pool, slot: slot, log: ratelog.New(log, ratelog.Config{Interval: 10 * slotPoll})}
}

// run reads the slot at once, then every slotPoll, until ctx ends.
func (w *slotWatch) run(ctx context.Context) {
	t := time.NewTicker(slotPoll)
	defer t.Stop()
	for {
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *slotWatch) poll(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, slotPoll/3)
	defer cancel()
	st, err := w.read(rctx)
	if ctx.Err() != nil {
		return // stopping: the read was cut short, and says nothing
	}
	if err != nil {
		w.failures.Add(1)
		w.log.Warn("slot", "read the replication slot's state for metrics; retrying", slog.String("slot", w.slot), slog.String("error", err.Error()))
	}
	w.mu.Lock()
	w.state = st
	w.mu.Unlock()
}

func (w *slotWatch) read(ctx context.Context) (slotState, error) {
	st := slotState{}
	err := w.pool.QueryRow(ctx, slotQuery, w.slot).Scan(&st.active, &st.walStatus, &st.retained, &st.lag, &st.safe)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		st.read = true
		return st, nil
	case err != nil:
		return slotState{}, fmt.Errorf("query pg_replication_slots: %w", err)
	}
	st.read, st.exists = true, true
	return st, nil
}

// State is what the last read found.
func (w *slotWatch) State() slotState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}
