package history

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/change"
)

// Entry is one transaction in a table's history.
type Entry struct {
	// Table is the schema-qualified table: "public.items".
	Table string
	// LSN is the transaction's commit LSN, which orders the table's history.
	LSN change.LSN
	// Prev is at or after the commit LSN of the table's transaction before this one: no
	// transaction of the table committed strictly between Prev and LSN. On Append, what the
	// appender knows (LSN-1 when it knows nothing); the store raises it to the LSN of the
	// table's last entry.
	Prev change.LSN
	// Data is the payload (Encode), opaque to the store.
	Data []byte
}

// EntryOverhead is what an entry counts against Config.MaxBytes besides its payload.
const EntryOverhead = 64

// Size is what e counts against Config.MaxBytes.
func (e Entry) Size() int { return len(e.Data) + EntryOverhead }

// Store keeps the tables' histories. Every method is safe for concurrent use and honours ctx.
type Store interface {
	// Append appends each entry to its table's history, in one round trip on Redis, and
	// trims what falls outside the bounds. The entries of one call are one transaction's, so
	// of distinct tables. An entry whose LSN is not above its table's last entry's is dropped:
	// the transaction is there already. An error may leave some of the entries appended and
	// others not; appending them all again is safe.
	Append(ctx context.Context, entries []Entry) error
	// Read returns what table's history holds in (after, through], oldest first, within lim.
	Read(ctx context.Context, table string, after, through change.LSN, lim Limit) (Range, error)
}

// Limit bounds one Read: at most Entries entries and Bytes bytes of payload. Past either, the
// read stops and says so (Range.More).
type Limit struct {
	Entries int
	Bytes   int
}

// Range is what one Read found.
type Range struct {
	// Found is false when the table has no history (it was never appended to, or expired).
	Found bool
	// Floor is the Prev of the oldest entry kept: every transaction of the table after it is
	// in the history, unless an entry's Prev says one was lost.
	Floor change.LSN
	// Entries are those in the range, oldest first.
	Entries []Entry
	// More says the read stopped at its Limit before the end of the range.
	More bool
}

// Covers reports whether r, read for (after, through], holds every transaction of its table in
// that range, where through is the commit LSN of a transaction of the table known to have been
// appended (its mark): the history exists, nothing after `after` was let go, no entry of the
// range says one before it was lost, the read was not cut short, and it reaches through.
func (r Range) Covers(after, through change.LSN) bool {
	if through <= after {
		return true // nothing to hold
	}
	if !r.Found || r.More || r.Floor > after {
		return false
	}
	prev := after
	for i := range r.Entries {
		e := &r.Entries[i]
		if e.LSN <= prev || e.Prev > prev {
			// Out of order, or a transaction between the last one and this one is not here:
			// an entry was lost (a Redis failover that dropped writes).
			return false
		}
		prev = e.LSN
	}
	return prev == through
}

// Config bounds each table's history. The zero value is the default.
type Config struct {
	// MaxBytes bounds one table's history, each entry counting its payload and EntryOverhead;
	// the oldest go first, and the newest is always kept. Default DefaultMaxBytes.
	MaxBytes int
	// MaxAge is how long an entry is kept: an older one is let go at a later append, and a
	// table not appended to for this long has no history. Default DefaultMaxAge.
	MaxAge time.Duration
}

// Defaults: changefeed.history_bytes and changefeed.history_age.
const (
	DefaultMaxBytes = 64 << 20
	DefaultMaxAge   = 10 * time.Minute
)

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	return c
}

// Validate reports a setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxBytes < 0:
		return fmt.Errorf("history: MaxBytes %d: want a positive size (default %d)", c.MaxBytes, DefaultMaxBytes)
	case c.MaxAge < 0 || (c.MaxAge > 0 && c.MaxAge < 10*time.Millisecond):
		return fmt.Errorf("history: MaxAge %v: want at least 10ms (default %v)", c.MaxAge, DefaultMaxAge)
	}
	return nil
}
