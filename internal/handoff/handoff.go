package handoff

import (
	"fmt"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/change"
)

// Phase is where a hand-off stands.
type Phase uint8

// The phases, in the order a hand-off passes them. Failed can follow any but Live.
const (
	// AwaitSnapshot: registered with the stream, the snapshot not yet known. Offered
	// transactions are held, unjudged, in the early buffer.
	AwaitSnapshot Phase = iota + 1
	// Filtering: the snapshot is known. Each offered transaction is judged at once: skipped
	// when the snapshot sees it, else held in the pending buffer until the rows are sent.
	Filtering
	// Live: the rows are sent and the stream has passed the snapshot's Bound. The pending
	// transactions went to the sink, then Live; every later transaction goes straight to it.
	Live
	// Failed: the hand-off ended with an *Error. Nothing more reaches the sink.
	Failed
)

func (p Phase) String() string {
	switch p {
	case AwaitSnapshot:
		return "await_snapshot"
	case Filtering:
		return "filtering"
	case Live:
		return "live"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// doing names what the hand-off was doing in phase p, for messages.
func (p Phase) doing() string {
	switch p {
	case AwaitSnapshot:
		return "waiting for the snapshot"
	case Filtering:
		return "reading and sending the rows"
	case Live:
		return "live"
	}
	return "failed"
}

// Txn is one committed transaction as one subscription sees it: what it delivers (Items: the
// views its filter and row rule let through, perhaps none) and where it stands in the stream.
// Every committed transaction is offered, even one with no Items: its position counts. The
// hand-off keeps a transaction it holds until it delivers or drops it, so the caller must not
// modify one once offered.
type Txn[T any] struct {
	XID8      change.XID8 // the top-level transaction id, widened (change.WidenXID)
	CommitLSN change.LSN  // its position: the commit record's LSN
	EndLSN    change.LSN  // the end of its commit record
	Items     []T
	// Bytes is what Items hold in memory, counted against the buffers' bounds.
	Bytes int
}

// Sink receives what a hand-off delivers: the transactions the snapshot does not see, in
// commit order, each once, then Live, then every later transaction. It is called with the
// hand-off's lock held, from whichever goroutine made the hand-off go live (the one calling
// RowsSent, or the one offering), and afterwards from the one offering; so its methods must
// not block (queue, or apply the queue's own overflow rule) and must not call the hand-off.
type Sink[T any] interface {
	// Deliver hands on a transaction the snapshot's rows do not contain. It is never called
	// with an empty Items.
	Deliver(t *Txn[T])
	// Live says the hand-off is complete: the rows and the transactions delivered so far
	// are exactly the table's state after every transaction whose commit LSN is at or before
	// head. It is the position a client may resume from, and comes once, before any
	// transaction after it.
	Live(head change.LSN)
}

// Config configures a Handoff. The zero value of each field is its default.
type Config struct {
	// Head is the commit LSN the subscription starts after: the router's position when it
	// registered the subscription. What Live reports, if no transaction is offered after it.
	Head change.LSN
	// EarlyBytes bounds the transactions held before the snapshot is known (a round trip's
	// worth); past it the hand-off fails with handoff_buffer_full. Default 4 MiB.
	EarlyBytes int
	// PendingBytes bounds the transactions held while the rows are read and sent; past it
	// the hand-off fails with handoff_buffer_full. Default 32 MiB.
	PendingBytes int
}

// Default bounds.
const (
	DefaultEarlyBytes   = 4 << 20
	DefaultPendingBytes = 32 << 20
)

// DefaultLookback is how far back the stream's recent history is offered to a new hand-off
// (step 1 of the protocol), by when the stream handed each transaction on: the router's
// look-back, and the age past which the snapshot reader counts a transaction still waiting for
// a synchronous standby as stalled (sync_standby_stalled). The two must be the same, since the
// guard is what tells when the look-back fell short; the handoff.lookback setting sets both.
const DefaultLookback = 10 * time.Second

// txnOverhead is what a held transaction costs beyond its Items' bytes, so a stream of small
// transactions is bounded too.
const txnOverhead = 64

// Stats counts a hand-off's work.
type Stats struct {
	Skipped   uint64 // transactions the snapshot saw (their Items, if any, dropped)
	Delivered uint64 // transactions handed to the sink
	// Straddled counts the transactions held for the sink that were running when the snapshot
	// was taken (in its XIP): begun before it, committed after.
	Straddled uint64
	// EarlyBytes and PendingBytes are what the buffers hold now; PeakBytes the most they
	// held together.
	EarlyBytes, PendingBytes, PeakBytes int
}

// Handoff joins one subscription's snapshot to its stream. The offering side (the router's
// goroutine) calls Offer and OfferPosition, in stream order; the reading side (the goroutine
// reading the snapshot) calls SetSnapshot, then RowsSent; either may call Fail. See the
// package doc for the invariants.
type Handoff[T any] struct {
	sink       Sink[T]
	earlyMax   int
	pendingMax int
	done       chan struct{} // closed on entering Live or Failed
	// visible judges a transaction; Snapshot.Visible but for tests that break it on purpose
	// to show the tests notice. Set before first use, never after.
	visible func(s *Snapshot, x change.XID8, end change.LSN) bool

	mu           sync.Mutex
	phase        Phase      // guarded by mu
	snap         Snapshot   // guarded by mu; set on entering Filtering, then never modified
	early        []*Txn[T]  // guarded by mu; AwaitSnapshot only: non-empty offers, in order
	earlyBytes   int        // guarded by mu
	pending      []*Txn[T]  // guarded by mu; Filtering only: invisible non-empty offers, in order
	pendingBytes int        // guarded by mu
	head         change.LSN // guarded by mu; the largest commit LSN offered, or Config.Head
	lastEnd      change.LSN // guarded by mu; the end LSN of the last transaction offered
	passed       change.LSN // guarded by mu; every transaction ending at or before it was offered
	rowsSent     bool       // guarded by mu
	err          *Error     // guarded by mu; set on entering Failed
	stats        Stats      // guarded by mu
}

// New returns a hand-off in AwaitSnapshot that delivers to sink.
func New[T any](cfg Config, sink Sink[T]) *Handoff[T] {
	h := &Handoff[T]{
		sink:       sink,
		earlyMax:   cfg.EarlyBytes,
		pendingMax: cfg.PendingBytes,
		done:       make(chan struct{}),
		visible:    func(s *Snapshot, x change.XID8, _ change.LSN) bool { return s.Visible(x) },
		phase:      AwaitSnapshot,
		head:       cfg.Head,
	}
	if h.earlyMax <= 0 {
		h.earlyMax = DefaultEarlyBytes
	}
	if h.pendingMax <= 0 {
		h.pendingMax = DefaultPendingBytes
	}
	return h
}

// Offer gives the hand-off the next committed transaction of the stream: first the table's
// history the subscription registered with (the look-back, oldest first), then every
// transaction after, in commit order, each once. In AwaitSnapshot it is held; in Filtering it
// is dropped if the snapshot sees it, else held; once Live it goes to the sink.
//
// It returns the hand-off's *Error once it has failed, whether this call failed it or an
// earlier one did: the caller then stops offering. A transaction that does not end past every
// one offered before it fails the hand-off with replication_restarted: the stream went back,
// and what was offered can no longer be told complete. Once live, such a transaction is
// dropped instead, with an error that is not an *Error.
func (h *Handoff[T]) Offer(t *Txn[T]) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phase == Failed {
		return h.err
	}
	if t.EndLSN <= h.lastEnd || t.EndLSN <= h.passed {
		if h.phase == Live {
			// Past its hand-off the subscription is the stream's to end; the repeat is
			// dropped, not delivered twice.
			return fmt.Errorf("handoff: transaction %s ending at %s was offered after the stream had passed %s; dropped",
				t.XID8, t.EndLSN, max(h.lastEnd, h.passed))
		}
		return h.failLocked(ReasonReplicationRestarted, fmt.Sprintf(
			"transaction %s ending at %s was offered after the stream had passed %s", t.XID8, t.EndLSN, max(h.lastEnd, h.passed)), nil)
	}
	h.lastEnd, h.passed = t.EndLSN, t.EndLSN
	h.head = max(h.head, t.CommitLSN)
	switch h.phase {
	case AwaitSnapshot:
		if len(t.Items) == 0 {
			// Nothing to deliver whatever the snapshot says; its position is recorded above.
			return nil
		}
		h.early = append(h.early, t)
		h.earlyBytes += t.Bytes + txnOverhead
		h.peakLocked()
		if h.earlyBytes > h.earlyMax {
			return h.failLocked(ReasonBufferFull, fmt.Sprintf(
				"%d transactions (%d bytes) arrived before the snapshot was taken, past the bound of %d bytes", len(h.early), h.earlyBytes, h.earlyMax), nil)
		}
		return nil
	case Filtering:
		if err := h.judgeLocked(t); err != nil {
			return err
		}
		h.goLiveLocked()
		return nil
	}
	// Live.
	if len(t.Items) > 0 {
		h.stats.Delivered++
		h.sink.Deliver(t)
	}
	return nil
}

// OfferPosition tells the hand-off that every transaction ending at or before p has been
// offered: the end of a non-transactional logical message (the fence), or a keepalive's WAL
// position received with no transaction open. A position at or before one already passed is
// ignored. Once the rows are sent, passing the snapshot's Bound makes the hand-off live.
func (h *Handoff[T]) OfferPosition(p change.LSN) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phase == Failed {
		return h.err
	}
	if p > h.passed {
		h.passed = p
		h.goLiveLocked()
	}
	return nil
}

// SetSnapshot gives the hand-off its snapshot and enters Filtering: the early transactions are
// judged in order, and every later one as it is offered. It fails the hand-off with
// snapshot_mismatch if an early transaction the snapshot sees ends past its Bound. Call it as
// soon as the first statement has returned, before any row is read, so the early buffer covers
// only that round trip.
func (h *Handoff[T]) SetSnapshot(s Snapshot) error {
	if err := s.check(); err != nil {
		return fmt.Errorf("handoff: SetSnapshot: %w", err)
	}
	if s.Bound == 0 {
		return fmt.Errorf("handoff: SetSnapshot: the snapshot has no Bound (pg_current_wal_insert_lsn())")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.phase {
	case Failed:
		return h.err
	case AwaitSnapshot:
	default:
		return fmt.Errorf("handoff: SetSnapshot in phase %s: the snapshot is set once", h.phase)
	}
	h.snap = s
	h.phase = Filtering
	early := h.early
	h.early, h.earlyBytes = nil, 0
	for _, t := range early {
		if err := h.judgeLocked(t); err != nil {
			return err
		}
	}
	return nil
}

// RowsSent says every row of the snapshot has been handed on, ahead of anything the sink will
// receive. If the stream has passed the snapshot's Bound already the hand-off goes live at
// once, in this call; otherwise when it does (OfferPosition or Offer).
func (h *Handoff[T]) RowsSent() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.phase {
	case Failed:
		return h.err
	case Filtering:
	default:
		return fmt.Errorf("handoff: RowsSent in phase %s: the rows come from the snapshot, so SetSnapshot comes first and RowsSent once", h.phase)
	}
	if h.rowsSent {
		return fmt.Errorf("handoff: RowsSent called twice")
	}
	h.rowsSent = true
	h.goLiveLocked()
	return nil
}

// Fail ends the hand-off with reason r, unless it is live already (then it reports false: the
// subscription is past its hand-off, and ends, if it must, as any live one does) or has
// failed already (then the first failure stands, and it reports true). cause may be nil.
func (h *Handoff[T]) Fail(r Reason, detail string, cause error) bool {
	if !r.Valid() {
		// A reason outside the closed set is a bug here, not the database's; the hand-off
		// still fails, under the reason that makes the client retry.
		detail = fmt.Sprintf("unknown reason %q: %s", r, detail)
		r = ReasonReplicationRestarted
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.phase {
	case Live:
		return false
	case Failed:
		return true
	}
	h.failLocked(r, detail, cause)
	return true
}

// Done is closed when the hand-off has gone live or failed: Err then says which.
func (h *Handoff[T]) Done() <-chan struct{} { return h.done }

// Err returns the hand-off's failure: nil while it has not failed.
func (h *Handoff[T]) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return h.err
}

// Phase returns the hand-off's phase.
func (h *Handoff[T]) Phase() Phase {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.phase
}

// Stats returns the hand-off's counters.
func (h *Handoff[T]) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.EarlyBytes, s.PendingBytes = h.earlyBytes, h.pendingBytes
	return s
}

// judgeLocked decides an offered transaction in Filtering: skip what the snapshot sees, hold
// the rest. A transaction the snapshot sees that ends past its Bound contradicts how Postgres
// commits (the record is inserted before the transaction becomes visible), so the snapshot is
// not of this stream, and the hand-off fails rather than guess.
func (h *Handoff[T]) judgeLocked(t *Txn[T]) error {
	if h.visible(&h.snap, t.XID8, t.EndLSN) {
		if t.EndLSN > h.snap.Bound {
			return h.failLocked(ReasonMismatch, fmt.Sprintf(
				"transaction %s, which snapshot %s sees, ends at %s, past the snapshot's insert position %s",
				t.XID8, h.snap.String(), t.EndLSN, h.snap.Bound), nil)
		}
		h.stats.Skipped++
		return nil
	}
	if len(t.Items) == 0 {
		return nil
	}
	if t.XID8 >= h.snap.Xmin && t.XID8 < h.snap.Xmax {
		h.stats.Straddled++
	}
	h.pending = append(h.pending, t)
	h.pendingBytes += t.Bytes + txnOverhead
	h.peakLocked()
	if h.pendingBytes > h.pendingMax {
		return h.failLocked(ReasonBufferFull, fmt.Sprintf(
			"%d transactions (%d bytes) arrived while the rows were read and sent, past the bound of %d bytes", len(h.pending), h.pendingBytes, h.pendingMax), nil)
	}
	return nil
}

// goLiveLocked makes the hand-off live once it may: the rows are sent and the stream has
// passed the Bound, so every transaction the snapshot sees has been offered (and skipped) and
// every later one is one it does not see. The pending transactions go to the sink, in order,
// then Live.
func (h *Handoff[T]) goLiveLocked() {
	if h.phase != Filtering || !h.rowsSent || h.passed < h.snap.Bound {
		return
	}
	for i, t := range h.pending {
		h.stats.Delivered++
		h.sink.Deliver(t)
		h.pending[i] = nil
	}
	h.pending, h.pendingBytes = nil, 0
	h.phase = Live
	h.sink.Live(h.head)
	close(h.done)
}

// failLocked enters Failed, lets go of what was held, and returns the failure.
func (h *Handoff[T]) failLocked(r Reason, detail string, cause error) error {
	h.err = newError(r, h.phase, detail, cause)
	h.phase = Failed
	h.early, h.earlyBytes = nil, 0
	h.pending, h.pendingBytes = nil, 0
	close(h.done)
	return h.err
}

func (h *Handoff[T]) peakLocked() {
	h.stats.PeakBytes = max(h.stats.PeakBytes, h.earlyBytes+h.pendingBytes)
}
