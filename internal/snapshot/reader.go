package snapshot

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/handoff"
)

// Config bounds snapshot reads. Zero fields take the defaults named per field.
type Config struct {
	// MaxConcurrent is how many snapshots this Reader reads at once (default 4): a semaphore
	// over the pool it is given.
	MaxConcurrent int
	// QueueWait is how long a read waits for one of those slots before it fails with
	// handoff.ReasonBusy (default 5s).
	QueueWait time.Duration
	// Timeout bounds the whole read transaction, from BEGIN to COMMIT, a slow Sink included
	// (default 60s); past it the read fails with handoff.ReasonTimeout.
	Timeout time.Duration
	// MaxRows: a snapshot with more rows to send fails with handoff.ReasonTooLarge (default
	// 100,000).
	MaxRows int
	// MaxBytes: a snapshot whose rows to send take more bytes (as JSON objects) fails with
	// handoff.ReasonTooLarge (default 64 MiB).
	MaxBytes int64
	// PageRows is the most rows in a page (default 500).
	PageRows int
	// PageBytes is the most row bytes (as JSON objects) in a page (default 256 KiB); a page
	// ends at whichever bound comes first, and always holds at least one row.
	PageBytes int
}

// Column is one column of the table: its name, and the type OID its text is converted by, as
// the changefeed converts it (a domain over a built-in type as that type).
type Column struct {
	Name string
	OID  uint32
}

// Request is one snapshot to read.
type Request struct {
	// Table is the table, schema-qualified as the changefeed names it: "public.items".
	Table string
	// Columns are the table's columns in attnum order, as the changefeed streams them; the
	// rows carry exactly these.
	Columns []Column
	// Key are the key columns, at least one: rows are read in key order.
	Key []string
	// Filter narrows the read: Filter.SQL is its WHERE clause, with its values as parameters.
	// The SQL only narrows the scan; Keep must still decide with Filter.Eval. nil reads every row.
	Filter *filter.Filter
	// Keep decides each row once it is read and converted: the filter's Eval, the row rule and
	// the column projection. It returns the row to send (possibly projected), whether to send
	// it, and an error, which fails the read with handoff.ReasonPolicyError. nil keeps every
	// row as read.
	Keep func(row change.Row) (change.Row, bool, error)
}

// Sink receives what a read produces, in order: Snapshot once, before any row is read (the
// caller calls handoff.SetSnapshot there; a non-nil error aborts the read and Read returns
// it), then Pages, the last with last=true (an empty result gives one empty last page). Page
// may block (the client reads slowly); the read's Timeout still bounds it. The Sink owns the
// rows it is given.
type Sink interface {
	Snapshot(s handoff.Snapshot) error
	Page(rows []change.Row, p Progress, last bool) error
}

// Progress counts what a read has sent so far, the page it comes with included.
type Progress struct {
	Rows  int   // rows sent
	Bytes int64 // their bytes, as JSON objects
	Pages int   // pages sent
}

// Stats is what a Reader has done, for metrics.
type Stats struct {
	InProgress int                // reads holding a slot
	Waiting    int                // reads waiting for a slot
	Done       map[Outcome]uint64 // finished reads by outcome
	Rows       uint64             // rows sent, over every read
	Bytes      uint64             // their bytes, as JSON objects
}

// Outcome is how a read ended: OutcomeOK, a handoff.Reason, OutcomeCanceled or OutcomeError.
// The same value is the metric label.
type Outcome string

// The outcomes that are not a handoff.Reason.
const (
	OutcomeOK       Outcome = "ok"
	OutcomeCanceled Outcome = "canceled" // the caller's context ended
	OutcomeError    Outcome = "error"    // Postgres failed otherwise (unreachable, refused)
)

// FencePrefix is the prefix of the logical message Fence emits. The changefeed must be
// configured to hand messages of this prefix on (changefeed.Config.MessagePrefixes), or the
// stream passes a snapshot's Bound only with the next change or keepalive.
const FencePrefix = "herald.fence"

// Reader reads snapshots from a pool of connections to the primary that holds the
// replication slot.
type Reader struct {
	pool *pgxpool.Pool
	cfg  Config
}

// New returns a Reader over pool. pool must reach the replication slot's primary.
func New(pool *pgxpool.Pool, cfg Config) *Reader {
	return &Reader{pool: pool, cfg: cfg}
}

var errNotYet = errors.New("snapshot: not implemented yet")

// Read runs one snapshot: BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
// handoff.FirstStatement (checked with First.Check, then given to Sink.Snapshot); the rows, in
// pages; COMMIT. It returns what was sent. Errors are *handoff.Error with their Reason
// (busy, timeout, too_large, on_standby, isolation, mismatch, schema_changed, policy_error),
// the Sink's own error, ctx's error, or an error from Postgres that none of those explain.
func (r *Reader) Read(ctx context.Context, req Request, sink Sink) (Progress, error) {
	return Progress{}, errNotYet
}

// Fence emits a non-transactional logical message (FencePrefix, id) and returns its LSN, so
// the stream passes a snapshot's Bound promptly however quiet the database is.
func (r *Reader) Fence(ctx context.Context, id string) (change.LSN, error) {
	return 0, errNotYet
}

// Stats returns what the Reader has done so far.
func (r *Reader) Stats() Stats { return Stats{} }
