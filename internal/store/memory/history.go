package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/history"
)

// History is the table history of one process: for tests of what several nodes share, as
// store/redis.History is. See history.Store for the contract; a table's history is forgotten
// once it was not appended to for MaxAge, as a Redis key's TTL would.
type History struct {
	cfg history.Config   // read-only
	now func() time.Time // read-only; tests move it

	mu     sync.Mutex
	tables map[string]*tableHistory // guarded by mu
}

var _ history.Store = (*History)(nil)

type tableHistory struct {
	entries []kept // oldest first
	bytes   int    // what entries count against MaxBytes
	last    time.Time
}

type kept struct {
	history.Entry
	at time.Time
}

// NewHistory returns an empty history bounded by cfg.
func NewHistory(cfg history.Config) (*History, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &History{cfg: cfg.WithDefaults(), now: time.Now, tables: map[string]*tableHistory{}}, nil
}

// tableLocked returns table's history, nil when it has none; it forgets one past its age.
func (h *History) tableLocked(table string, now time.Time) *tableHistory {
	th := h.tables[table]
	if th != nil && now.Sub(th.last) >= h.cfg.MaxAge {
		delete(h.tables, table)
		return nil
	}
	return th
}

// Append appends each entry to its table's history.
func (h *History) Append(ctx context.Context, entries []history.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for _, e := range entries {
		th := h.tableLocked(e.Table, now)
		if th == nil {
			th = &tableHistory{}
			h.tables[e.Table] = th
		}
		if n := len(th.entries); n > 0 {
			last := th.entries[n-1].LSN
			if e.LSN <= last {
				continue // there already
			}
			e.Prev = max(e.Prev, last)
		}
		e.Data = slices.Clone(e.Data)
		th.entries = append(th.entries, kept{Entry: e, at: now})
		th.bytes += e.Size()
		th.last = now
		// The newest is always kept.
		drop := 0
		for drop < len(th.entries)-1 {
			k := &th.entries[drop]
			if th.bytes <= h.cfg.MaxBytes && now.Sub(k.at) < h.cfg.MaxAge {
				break
			}
			th.bytes -= k.Size()
			drop++
		}
		if drop > 0 {
			clear(th.entries[:drop])
			th.entries = th.entries[drop:]
		}
	}
	return nil
}

// Read returns what table's history holds in (after, through].
func (h *History) Read(ctx context.Context, table string, after, through change.LSN, lim history.Limit) (history.Range, error) {
	if err := ctx.Err(); err != nil {
		return history.Range{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	th := h.tableLocked(table, h.now())
	if th == nil || len(th.entries) == 0 {
		return history.Range{}, nil
	}
	r := history.Range{Found: true, Floor: th.entries[0].Prev}
	bytes := 0
	for i := range th.entries {
		e := &th.entries[i].Entry
		if e.LSN <= after {
			continue
		}
		if e.LSN > through {
			break
		}
		if len(r.Entries) >= lim.Entries || bytes+len(e.Data) > lim.Bytes {
			r.More = true
			break
		}
		bytes += len(e.Data)
		c := *e
		c.Data = slices.Clone(e.Data)
		r.Entries = append(r.Entries, c)
	}
	return r, nil
}
