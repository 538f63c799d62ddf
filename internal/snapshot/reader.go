package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/handoff"
)

// Config bounds snapshot reads. Zero fields take the defaults named per field.
type Config struct {
	// MaxConcurrent is how many snapshots this Reader reads at once (default 4): a semaphore
	// over the pool it is given, whose size should be at least this.
	MaxConcurrent int
	// QueueWait is how long a read waits for one of those slots before it fails with
	// handoff.ReasonBusy (default 5s).
	QueueWait time.Duration
	// Timeout bounds the read's transaction, from taking a connection to COMMIT, the Sink's
	// pages included (default 60s); past it the read fails with handoff.ReasonTimeout. The
	// server is told too (statement_timeout, idle_in_transaction_session_timeout and, from
	// Postgres 17, transaction_timeout), so it ends the transaction by itself even if Herald is
	// stuck: a snapshot holds VACUUM back for the whole database while it is open.
	Timeout time.Duration
	// MaxRows: a snapshot with more rows to send fails with handoff.ReasonTooLarge (default
	// 100,000). The read stops at the first row past it.
	MaxRows int
	// MaxBytes: a snapshot whose rows to send take more bytes (as JSON objects) fails with
	// handoff.ReasonTooLarge (default 64 MiB).
	MaxBytes int64
	// PageRows is the most rows in a page, and how many rows each FETCH asks for (default 500).
	PageRows int
	// PageBytes is the most row bytes (as JSON objects) in a page (default 256 KiB); a page
	// ends at whichever bound it reaches first, and holds at least one row.
	PageBytes int
	// Lookback is the router's look-back (handoff.lookback; default handoff.DefaultLookback):
	// while a synchronous standby is named, a read that finds a transaction waiting for one
	// that began longer ago than this fails with handoff.ReasonSyncStandbyStalled (see the
	// package doc, "Guards"). It must be the router's: the guard tells when the look-back may
	// have fallen short.
	Lookback time.Duration
}

// The defaults.
const (
	DefaultMaxConcurrent = 4
	DefaultQueueWait     = 5 * time.Second
	DefaultTimeout       = 60 * time.Second
	DefaultMaxRows       = 100_000
	DefaultMaxBytes      = 64 << 20
	DefaultPageRows      = 500
	DefaultPageBytes     = 256 << 10
)

// Validate reports a negative bound. New reads a negative one as zero, the default.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max_concurrent", int64(c.MaxConcurrent)}, {"queue_wait", int64(c.QueueWait)},
		{"timeout", int64(c.Timeout)}, {"max_rows", int64(c.MaxRows)}, {"max_bytes", c.MaxBytes},
		{"page_rows", int64(c.PageRows)}, {"page_bytes", int64(c.PageBytes)}, {"lookback", int64(c.Lookback)},
	} {
		if f.v < 0 {
			return fmt.Errorf("snapshot: %s is negative; leave it 0 for the default or give a positive bound", f.name)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxConcurrent, DefaultMaxConcurrent)
	defDur(&c.QueueWait, DefaultQueueWait)
	defDur(&c.Timeout, DefaultTimeout)
	def(&c.MaxRows, DefaultMaxRows)
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	def(&c.PageRows, DefaultPageRows)
	def(&c.PageBytes, DefaultPageBytes)
	defDur(&c.Lookback, handoff.DefaultLookback)
	return c
}

// Column is one column of the table: its name, and the type OID its text is converted by, as
// the changefeed converts it (a domain over a built-in type as that type, or as the domain).
type Column struct {
	Name string
	OID  uint32
}

// Request is one snapshot to read.
type Request struct {
	// Table is the table, schema-qualified as the changefeed names it: "public.items". It is
	// split at its first dot, as the changefeed splits its table list.
	Table string
	// Columns are the table's columns in attnum order, as the changefeed streams them; the
	// rows carry exactly these, in this order. A column of the table left out (a generated
	// one, which Postgres before 18 does not publish, or one outside the publication's column
	// list) is not read.
	Columns []Column
	// Key are the key columns, at least one, each among Columns: rows are read in key order.
	// A table without a key cannot be read (its caller refuses it).
	Key []string
	// Filter narrows the read: Filter.SQL is its WHERE clause, with its values as parameters.
	// The SQL only narrows the scan; Keep must still decide with Filter.Eval. nil reads every row.
	Filter *filter.Filter
	// Keep decides each row once it is read and converted: the filter's Eval, the row rule and
	// the column projection. It returns the row to send (possibly projected), whether to send
	// it, and an error, which fails the read with handoff.ReasonPolicyError. nil keeps every
	// row as read.
	Keep func(row change.Row) (change.Row, bool, error)
	// Joined, when set, is a transaction id assigned once the table was seen to have joined
	// the publication (router.TableInfo.Joined): a snapshot taken while a transaction before it
	// still runs fails with handoff.ReasonTableNotReady (see the package doc, "Guards"). 0: the
	// table was in the publication when the stream started.
	Joined change.XID8
}

// check reports a request no table could satisfy: the caller's mistake, not the database's.
func (req *Request) check() error {
	bad := func(why string) error { return fmt.Errorf("snapshot: request for table %q: %s", req.Table, why) }
	if _, _, ok := splitTable(req.Table); !ok {
		return bad("want schema.table")
	}
	if len(req.Columns) == 0 {
		return bad("no columns")
	}
	if len(req.Key) == 0 {
		return bad("no key columns: a table without a key cannot be read in key order")
	}
	seen := make(map[string]bool, len(req.Columns))
	for _, c := range req.Columns {
		if seen[c.Name] {
			return bad("column " + strconv.Quote(c.Name) + " named twice")
		}
		seen[c.Name] = true
	}
	for _, k := range req.Key {
		if !seen[k] {
			return bad("key column " + strconv.Quote(k) + " is not among the columns")
		}
	}
	return nil
}

// Sink receives what a read produces, in order: Snapshot once, before any row is read (the
// caller calls handoff.SetSnapshot there; a non-nil error aborts the read and Read returns
// it), then Pages, the last with last=true (an empty result gives one empty last page). A
// page is handed on once the next row to send is known to exist, so no page but the first of
// an empty result is empty. The Sink owns the rows it is given; Read keeps no reference.
//
// Page may block (the client reads slowly), but Read cannot interrupt it: a Page that
// outlasts the read's Timeout fails the read once it returns, and meanwhile the server ends
// the transaction by itself. The last page is handed on after COMMIT, with the connection and
// the read's slot given back, so however long it blocks it holds nothing in the database.
type Sink interface {
	Snapshot(s handoff.Snapshot) error
	Page(rows []change.Row, p Progress, last bool) error
}

// Progress counts what a read has sent, the page it comes with included.
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
	Scanned    uint64             // rows read from Postgres, over every read, kept or not
	Rows       uint64             // rows sent, over every read
	Bytes      uint64             // their bytes, as JSON objects
}

// Outcome is how a read ended: OutcomeOK, a handoff.Reason, or one of the others below. The
// same value is the metric label.
type Outcome string

// The outcomes that are not a handoff.Reason.
const (
	OutcomeOK       Outcome = "ok"
	OutcomeCanceled Outcome = "canceled" // the caller's context ended
	OutcomeSink     Outcome = "sink"     // the Sink refused: its own error
	OutcomeError    Outcome = "error"    // Postgres failed otherwise (unreachable, refused, a bad request)
)

// Outcomes is the closed set: OutcomeOK, each reason a read can fail with, then the others.
var Outcomes = []Outcome{
	OutcomeOK,
	Outcome(handoff.ReasonBusy), Outcome(handoff.ReasonTimeout), Outcome(handoff.ReasonTooLarge),
	Outcome(handoff.ReasonOnStandby), Outcome(handoff.ReasonIsolation), Outcome(handoff.ReasonMismatch),
	Outcome(handoff.ReasonSchemaChanged), Outcome(handoff.ReasonPolicyError),
	OutcomeCanceled, OutcomeSink, OutcomeError,
}

// FencePrefix is the prefix of the logical message Fence emits. The changefeed must hand
// messages of this prefix on (changefeed.Config.MessagePrefixes), or the stream passes a
// snapshot's Bound only with the next change or keepalive.
const FencePrefix = "herald.fence"

// Reader reads snapshots from a pool of connections to the primary that holds the
// replication slot. It is safe for concurrent use; it starts no goroutine.
type Reader struct {
	pool  *pgxpool.Pool
	cfg   Config        // with defaults; read-only
	slots chan struct{} // a read holds one of its MaxConcurrent places while it reads
	first string        // the read's first statement: firstSQL(cfg.Lookback)

	mu    sync.Mutex
	stats Stats // guarded by mu; Done is copied out
}

// New returns a Reader over pool. pool must reach the replication slot's primary (a standby's
// snapshot is refused: handoff.ReasonOnStandby), directly or through a pooler that keeps a
// transaction on one server connection.
func New(pool *pgxpool.Pool, cfg Config) *Reader {
	cfg = cfg.withDefaults()
	return &Reader{
		pool:  pool,
		cfg:   cfg,
		slots: make(chan struct{}, cfg.MaxConcurrent),
		first: firstSQL(cfg.Lookback),
		stats: Stats{Done: make(map[Outcome]uint64)},
	}
}

// Stats returns what the Reader has done so far.
func (r *Reader) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Done = make(map[Outcome]uint64, len(r.stats.Done))
	for k, v := range r.stats.Done {
		s.Done[k] = v
	}
	return s
}

// errReadTimeout is the cause of a read's context ending at Config.Timeout, which tells it
// from the caller's context ending.
var errReadTimeout = errors.New("snapshot: the read's timeout passed")

// sinkError marks an error the Sink returned, which Read returns as it is.
type sinkError struct{ err error }

func (e sinkError) Error() string { return e.err.Error() }
func (e sinkError) Unwrap() error { return e.err }

// Read runs one snapshot: BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; handoff.FirstStatement
// with the guard's count (checked with First.Check and the guards, then given to
// Sink.Snapshot); the rows, in pages; COMMIT. It returns what was sent. Errors are
// *handoff.Error with their Reason (busy, timeout, too_large, on_standby, isolation,
// table_not_ready, sync_standby_stalled, mismatch, schema_changed, policy_error), the Sink's own error as it
// returned it, ctx's error, or another error when the request is malformed or Postgres failed
// for none of those reasons (unreachable, a privilege missing).
func (r *Reader) Read(ctx context.Context, req Request, sink Sink) (Progress, error) {
	if err := req.check(); err != nil {
		r.finish(OutcomeError, 0, Progress{})
		return Progress{}, err
	}
	if err := r.acquire(ctx); err != nil {
		r.finish(outcomeOf(err), 0, Progress{})
		return Progress{}, err
	}
	rd := &read{r: r, req: &req, sink: sink, phase: handoff.AwaitSnapshot}
	last, err := rd.run(ctx)
	r.release()
	if err == nil {
		// The last page, with the transaction committed and the connection and slot given
		// back: however long the client takes, it holds nothing in the database.
		p := Progress{Rows: rd.sent.Rows + len(last), Bytes: rd.sent.Bytes + rd.heldBytes, Pages: rd.sent.Pages + 1}
		if perr := sink.Page(last, p, true); perr != nil {
			err = sinkError{perr}
		} else {
			rd.sent = p
		}
	}
	var se sinkError
	fromSink := errors.As(err, &se)
	err = rd.explain(ctx, err)
	o := outcomeOf(err)
	if fromSink {
		o = OutcomeSink
	}
	r.finish(o, rd.scanned, rd.sent)
	return rd.sent, err
}

// acquire takes a slot, waiting at most QueueWait.
func (r *Reader) acquire(ctx context.Context) error {
	select {
	case r.slots <- struct{}{}:
		r.mu.Lock()
		r.stats.InProgress++
		r.mu.Unlock()
		return nil
	default:
	}
	r.mu.Lock()
	r.stats.Waiting++
	r.mu.Unlock()
	t := time.NewTimer(r.cfg.QueueWait)
	defer t.Stop()
	var err error
	select {
	case r.slots <- struct{}{}:
	case <-t.C:
		err = &handoff.Error{Reason: handoff.ReasonBusy, Phase: handoff.AwaitSnapshot, Fix: handoff.ReasonBusy.Fix(),
			Detail: fmt.Sprintf("all %d snapshot reads were busy for %s", r.cfg.MaxConcurrent, r.cfg.QueueWait)}
	case <-ctx.Done():
		err = ctx.Err()
	}
	r.mu.Lock()
	r.stats.Waiting--
	if err == nil {
		r.stats.InProgress++
	}
	r.mu.Unlock()
	return err
}

func (r *Reader) release() {
	<-r.slots
	r.mu.Lock()
	r.stats.InProgress--
	r.mu.Unlock()
}

func (r *Reader) finish(o Outcome, scanned int, p Progress) {
	r.mu.Lock()
	r.stats.Done[o]++
	r.stats.Scanned += uint64(scanned)
	r.stats.Rows += uint64(p.Rows)
	r.stats.Bytes += uint64(p.Bytes)
	r.mu.Unlock()
}

// outcomeOf names how a read that returned err ended; an error from the Sink is told apart
// before it is returned as it is.
func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCanceled
	}
	if reason, ok := handoff.ReasonOf(err); ok {
		return Outcome(reason)
	}
	return OutcomeError
}

// read is one Read's state; owned by the goroutine that called Read.
type read struct {
	r       *Reader
	req     *Request
	sink    Sink
	phase   handoff.Phase // AwaitSnapshot until Sink.Snapshot returned, then Filtering
	schema  string
	name    string
	timeout context.Context // the read's context: the caller's, bounded by Config.Timeout

	sent    Progress // what reached the Sink
	scanned int      // rows read from Postgres

	// The page being filled: its rows and their bytes.
	held      []change.Row
	heldBytes int64
	// What has been accepted, sent or held: the bounds apply to it.
	acceptedRows  int
	acceptedBytes int64

	ar    arena
	names []int // the JSON size of each column's quoted name, by index in Request.Columns
}

// run reads the snapshot and returns the last page, not yet sent, once the transaction has
// committed and the connection is back in the pool.
func (rd *read) run(parent context.Context) (last []change.Row, err error) {
	cfg := &rd.r.cfg
	ctx, cancel := context.WithTimeoutCause(parent, cfg.Timeout, errReadTimeout)
	defer cancel()
	rd.timeout = ctx
	rd.schema, rd.name, _ = splitTable(rd.req.Table)
	rd.names = make([]int, len(rd.req.Columns))
	var scratch []byte
	for i, c := range rd.req.Columns {
		scratch = change.AppendJSONString(scratch[:0], c.Name)
		rd.names[i] = len(scratch)
	}

	conn, err := rd.r.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("take a connection: %w", err)
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			// The read's context may be over; the rollback gets a moment of its own. If it
			// fails, pgx closes the connection, and the pool drops it.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = tx.Rollback(rctx)
			cancel()
		}
	}()

	// The server gets what is left of the read's deadline, so that it ends the transaction by
	// itself when the read runs out of time, even with Herald waiting on the Sink.
	ms := cfg.Timeout.Milliseconds()
	if d, ok := ctx.Deadline(); ok {
		ms = time.Until(d).Milliseconds()
	}
	ms = max(ms, 1)
	if _, err := tx.Exec(ctx, setupSQL(rd.schema, rd.name, ms, serverMajor(conn.Conn().PgConn()))); err != nil {
		return nil, fmt.Errorf("set up the transaction: %w", err)
	}
	var first handoff.First
	var stalled int64
	if err := tx.QueryRow(ctx, rd.r.first, pgx.QueryExecModeSimpleProtocol).
		Scan(&first.Snapshot, &first.InsertLSN, &first.Isolation, &first.InRecovery, &stalled); err != nil {
		return nil, fmt.Errorf("take the snapshot: %w", err)
	}
	snap, err := first.Check()
	if err != nil {
		return nil, err
	}
	if err := rd.guard(ctx, tx, &snap, stalled); err != nil {
		return nil, err
	}
	if err := rd.sink.Snapshot(snap); err != nil {
		return nil, sinkError{err}
	}
	rd.phase = handoff.Filtering

	if err := rd.checkSchema(ctx, tx); err != nil {
		return nil, err
	}
	var args []any
	where, _ := rd.req.Filter.SQL(&args)
	declare := declareSQL(rd.schema, rd.name, rd.req.Columns, rd.req.Key, where)
	if _, err := tx.Exec(ctx, declare, append([]any{pgx.QueryExecModeExec}, args...)...); err != nil {
		return nil, fmt.Errorf("declare the cursor: %w", err)
	}
	fetch := fetchSQL(cfg.PageRows)
	for {
		n, err := rd.fetch(ctx, tx, fetch)
		if err != nil {
			return nil, err
		}
		if n < cfg.PageRows {
			break // a FETCH returns fewer rows than asked only at the cursor's end
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	committed = true
	return rd.held, nil
}

// fetch reads the cursor's next page of rows and returns how many it read.
func (rd *read) fetch(ctx context.Context, tx pgx.Tx, sql string) (int, error) {
	rows, err := tx.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return 0, fmt.Errorf("fetch: %w", err)
	}
	defer rows.Close()
	cols := rd.req.Columns
	n := 0
	for rows.Next() {
		n++
		rd.scanned++
		raw := rows.RawValues()
		if len(raw) != len(cols) {
			return n, rd.fail(handoff.ReasonSchemaChanged, fmt.Sprintf("a row came with %d columns, not %d", len(raw), len(cols)), nil)
		}
		row := rd.ar.row(cols, raw)
		if err := rd.accept(row); err != nil {
			return n, err
		}
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("fetch: %w", err)
	}
	return n, nil
}

// accept passes one row through Keep and, kept, adds it to the page, handing the page before
// it on first when that one is full.
func (rd *read) accept(row change.Row) error {
	if keep := rd.req.Keep; keep != nil {
		kept, ok, err := keep(row)
		if err != nil {
			return rd.fail(handoff.ReasonPolicyError, "a row rule failed on a row of the snapshot", err)
		}
		if !ok {
			return nil
		}
		row = kept
	}
	size := rd.rowBytes(row)
	cfg := &rd.r.cfg
	rd.acceptedRows++
	rd.acceptedBytes += size
	if rd.acceptedRows > cfg.MaxRows {
		return rd.fail(handoff.ReasonTooLarge, fmt.Sprintf("more than %d rows match", cfg.MaxRows), nil)
	}
	if rd.acceptedBytes > cfg.MaxBytes {
		return rd.fail(handoff.ReasonTooLarge, fmt.Sprintf("the matching rows take more than %d bytes", cfg.MaxBytes), nil)
	}
	if len(rd.held) >= cfg.PageRows || (len(rd.held) > 0 && rd.heldBytes >= int64(cfg.PageBytes)) {
		if err := rd.send(); err != nil {
			return err
		}
	}
	rd.held = append(rd.held, row)
	rd.heldBytes += size
	return nil
}

// send hands the full page on: it is not the last, as another row follows it.
func (rd *read) send() error {
	p := rd.sent
	p.Rows += len(rd.held)
	p.Bytes += rd.heldBytes
	p.Pages++
	if err := rd.sink.Page(rd.held, p, false); err != nil {
		return sinkError{err}
	}
	rd.sent = p
	rd.held = make([]change.Row, 0, len(rd.held))
	rd.heldBytes = 0
	// The Sink may have blocked past the deadline: stop here rather than read on.
	if rd.timeout.Err() != nil {
		return context.Cause(rd.timeout)
	}
	return nil
}

// rowBytes is the size of row as a JSON object (change.Row.AppendJSON), counted without
// writing it.
func (rd *read) rowBytes(row change.Row) int64 {
	cols := rd.req.Columns
	n := 2 + max(len(row)-1, 0) // the braces and the commas
	for i := range row {
		var name int
		if i < len(cols) && row[i].Name == cols[i].Name {
			name = rd.names[i]
		} else {
			name = len(change.AppendJSONString(nil, row[i].Name))
		}
		v := len(row[i].Value)
		if v == 0 {
			v = len("null")
		}
		n += name + 1 + v
	}
	return int64(n)
}

// checkSchema compares the request's columns with the table's, as the snapshot's catalog
// holds them (which, the table locked before the snapshot, are the columns the rows are read
// with): each requested column must be there, in the same order, with the type the request
// converts it by, or a domain over it. A column of the table the request leaves out is let be
// (see Request.Columns); one added since the request was made is the stream's to report, in
// the Relation message before the table's next change.
func (rd *read) checkSchema(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, schemaSQL, pgx.QueryExecModeExec, rd.schema, rd.name)
	if err != nil {
		return fmt.Errorf("read the table's columns: %w", err)
	}
	type attr struct {
		name  string
		types []int64 // its type, then each type under it when it is a domain
	}
	var attrs []attr
	for rows.Next() {
		var a attr
		if err := rows.Scan(&a.name, &a.types); err != nil {
			rows.Close()
			return fmt.Errorf("read the table's columns: %w", err)
		}
		attrs = append(attrs, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the table's columns: %w", err)
	}
	if len(attrs) == 0 {
		return rd.fail(handoff.ReasonSchemaChanged, "the table has no columns now", nil)
	}
	j := 0
	for _, c := range rd.req.Columns {
		k := j
		for k < len(attrs) && attrs[k].name != c.Name {
			k++
		}
		if k == len(attrs) {
			for _, a := range attrs[:j] {
				if a.name == c.Name {
					return rd.fail(handoff.ReasonSchemaChanged, fmt.Sprintf("column %s is now out of the request's order", strconv.Quote(c.Name)), nil)
				}
			}
			return rd.fail(handoff.ReasonSchemaChanged, fmt.Sprintf("the table has no column %s now", strconv.Quote(c.Name)), nil)
		}
		if a := attrs[k]; !slices.Contains(a.types, int64(c.OID)) {
			return rd.fail(handoff.ReasonSchemaChanged, fmt.Sprintf("column %s is now of type oid %d, not %d", strconv.Quote(c.Name), a.types[0], c.OID), nil)
		}
		j = k + 1
	}
	return nil
}

// fail makes a hand-off error of the read's table.
func (rd *read) fail(reason handoff.Reason, detail string, err error) *handoff.Error {
	return &handoff.Error{Reason: reason, Phase: rd.phase, Detail: "table " + rd.req.Table + ": " + detail, Fix: reason.Fix(), Err: err}
}

// explain turns what went wrong into what Read returns: a hand-off error as it is; the Sink's
// error as it is; the caller's context's error; the read's timeout, or Postgres ending a
// statement or the transaction for running too long, as ReasonTimeout; a table or column
// gone as ReasonSchemaChanged; anything else wrapped with the table's name.
func (rd *read) explain(parent context.Context, err error) error {
	if err == nil {
		return nil
	}
	var he *handoff.Error
	if errors.As(err, &he) {
		return err
	}
	var se sinkError
	if errors.As(err, &se) {
		return se.err
	}
	if parent.Err() != nil {
		return parent.Err()
	}
	var pe *pgconn.PgError
	isPg := errors.As(err, &pe)
	switch {
	case rd.timeout != nil && errors.Is(context.Cause(rd.timeout), errReadTimeout),
		isPg && (pe.Code == "57014" || pe.Code == "25P03" || pe.Code == "25P04"):
		// 57014 is also a cancellation the caller asked for, but then parent has ended.
		return rd.fail(handoff.ReasonTimeout, fmt.Sprintf("the read took longer than %s", rd.r.cfg.Timeout), err)
	case isPg && (pe.Code == "42P01" || pe.Code == "42703" || pe.Code == "3F000"):
		// undefined_table, undefined_column, invalid_schema_name: gone since the request was made.
		return rd.fail(handoff.ReasonSchemaChanged, "the table or a column is gone", err)
	case isPg && pe.Code == "0A000" && strings.Contains(pe.Message, "cached plan"):
		return rd.fail(handoff.ReasonSchemaChanged, "the table's columns changed", err)
	}
	return fmt.Errorf("snapshot of %s: %w", rd.req.Table, err)
}

// Fence emits a non-transactional logical message (FencePrefix, id) and returns its LSN, so
// the stream passes a snapshot's Bound promptly however quiet the database is: the message is
// written after the snapshot's Bound was read, so the stream that has handed it on has handed
// on every transaction that ended at or before the Bound. It runs outside any transaction, on
// a connection of the pool, and takes no read slot.
func (r *Reader) Fence(ctx context.Context, id string) (change.LSN, error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("snapshot: fence %s: take a connection: %w", id, err)
	}
	defer conn.Release()
	var text string
	if err := conn.QueryRow(ctx, fenceSQL(serverMajor(conn.Conn().PgConn())), pgx.QueryExecModeExec, FencePrefix, id).Scan(&text); err != nil {
		return 0, fmt.Errorf("snapshot: fence %s: %w", id, err)
	}
	lsn, err := change.ParseLSN(text)
	if err != nil {
		return 0, fmt.Errorf("snapshot: fence %s: %w", id, err)
	}
	return lsn, nil
}

// serverMajor is the server's major version, from the server_version it reported at
// connect ("15.20 (Debian 15.20-0+deb12u1)", "17beta1"); 0 when it cannot be read.
func serverMajor(c *pgconn.PgConn) int {
	v := c.ParameterStatus("server_version")
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	n, _ := strconv.Atoi(v[:i])
	return n
}
