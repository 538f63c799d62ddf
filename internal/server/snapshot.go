package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/snapshot"
	"github.com/heraldrt/herald/internal/stream"
)

// snapshotReader reads table snapshots: snapshot.Reader, or a test's stand-in.
type snapshotReader interface {
	Read(ctx context.Context, req snapshot.Request, sink snapshot.Sink) (snapshot.Progress, error)
	Fence(ctx context.Context, id string) (change.LSN, error)
	Stats() snapshot.Stats
}

var _ snapshotReader = (*snapshot.Reader)(nil)

// snapshots runs table subscriptions' snapshots: it reads a subscription's rows into its
// session's pages, tells its hand-off (internal/handoff) the snapshot and when the rows are
// sent, emits the fence that moves the stream past the snapshot, and waits for the hand-off to
// go live. One per node; each snapshot runs on the goroutine its session gives it.
type snapshots struct {
	reader snapshotReader
	// timeout bounds one snapshot from its read to its live, the client's reading of its
	// pages included (handoff.timeout).
	timeout time.Duration
	// fenceID prefixes each fence's id: the node's, so a fence in the stream says whose it is.
	fenceID string
	log     *slog.Logger

	seq     atomic.Uint64 // fences emitted, for their ids
	started atomic.Uint64
	live    atomic.Uint64
	// skipped and delivered count the transactions live hand-offs judged: in their snapshot,
	// or delivered after its rows; straddled those delivered that were running when the
	// snapshot was taken.
	skipped, delivered, straddled atomic.Uint64
	// ended counts the snapshots that ended before going live, by outcome: an index of
	// snapshotOutcomes.
	ended []atomic.Uint64
}

func newSnapshots(reader snapshotReader, timeout time.Duration, node string, log *slog.Logger) *snapshots {
	if timeout <= 0 {
		timeout = snapshot.DefaultTimeout
	}
	return &snapshots{reader: reader, timeout: timeout, fenceID: node + ".", log: log, ended: make([]atomic.Uint64, len(snapshotOutcomes))}
}

// The outcomes a snapshot ends with short of live, besides the hand-off's reasons: the
// subscription ended first (canceled), the client's queue could not take a page (too large,
// counted under snapshot_too_large), the database failed (unavailable), anything else
// (internal).
const (
	outcomeCanceled    = "canceled"
	outcomeUnavailable = "unavailable"
	outcomeInternal    = "internal"
)

// snapshotOutcomes lists the labels of snapshots.ended, in its order.
var snapshotOutcomes = func() []string {
	out := make([]string, 0, len(handoff.Reasons)+3)
	for _, r := range handoff.Reasons {
		out = append(out, string(r))
	}
	return append(out, outcomeCanceled, outcomeUnavailable, outcomeInternal)
}()

func (s *snapshots) count(outcome string) {
	for i, o := range snapshotOutcomes {
		if o == outcome {
			s.ended[i].Add(1)
			return
		}
	}
	s.ended[len(snapshotOutcomes)-1].Add(1)
}

// errSnapshotTimeout is the cause of a snapshot's context ending at its timeout.
var errSnapshotTimeout = errors.New("the snapshot's handoff.timeout passed")

// run reads sub's snapshot and joins it to its stream, returning once the subscription is live
// (nil), or with why it is not: a *fault.Error with the snapshot's code, or ctx's error when
// the subscription ended first.
func (s *snapshots) run(ctx context.Context, sub string, snap *router.Snapshot, pages session.SnapshotPages) error {
	s.started.Add(1)
	err := s.join(ctx, snap, pages)
	switch fe, isFault := fault.As(err); {
	case err == nil:
		s.live.Add(1)
	case ctx.Err() != nil:
		s.count(outcomeCanceled)
	case isFault:
		s.count(string(fe.Code))
		s.log.Debug("snapshot: ended before going live", "table", snap.Table, "sub", sub, "code", string(fe.Code), "err", err)
	default:
		s.count(outcomeInternal)
	}
	return err
}

func (s *snapshots) join(parent context.Context, snap *router.Snapshot, pages session.SnapshotPages) error {
	h := snap.Handoff
	timed, cancelTimed := context.WithTimeoutCause(parent, s.timeout, errSnapshotTimeout)
	defer cancelTimed()
	// A hand-off that fails while the rows are read (what it holds outgrew its bound, the
	// stream restarted) ends the read at once: its query, and a page waiting for the client to
	// make room, which would otherwise wait out the timeout for nothing.
	ctx, cancel := context.WithCancelCause(timed)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-h.Done():
			if err := h.Err(); err != nil {
				cancel(err)
			}
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel(nil)
		<-watched
	}()
	req := snapshot.Request{Table: snap.Table, Key: snap.Key, Filter: snap.Filter, Keep: snap.Keep, Joined: snap.Joined,
		Columns: make([]snapshot.Column, len(snap.Columns))}
	for i, c := range snap.Columns {
		req.Columns[i] = snapshot.Column{Name: c.Name, OID: c.OID}
	}
	if _, err := s.reader.Read(ctx, req, &snapshotSink{ctx: ctx, h: h, pages: pages}); err != nil {
		return s.failure(ctx, parent, h, err)
	}
	h.RowsSent()
	// The fence moves the stream past the snapshot's bound however quiet the database is;
	// without it the hand-off goes live with the next transaction the router routes.
	id := s.fenceID + strconv.FormatUint(s.seq.Add(1), 10)
	if _, err := s.reader.Fence(ctx, id); err != nil && ctx.Err() == nil {
		s.log.Warn("snapshot: the fence could not be emitted; the subscription goes live with the next change", "table", snap.Table, "err", err)
	}
	select {
	case <-h.Done():
	case <-ctx.Done():
		if h.Fail(handoff.ReasonTimeout, fmt.Sprintf("the stream did not pass the snapshot's bound within %s", s.timeout), context.Cause(ctx)) {
			return s.failure(ctx, parent, h, context.Cause(ctx))
		}
		// It went live as the time ran out.
	}
	if err := h.Err(); err != nil {
		return clientError(err)
	}
	st := h.Stats()
	s.skipped.Add(st.Skipped)
	s.delivered.Add(st.Delivered)
	s.straddled.Add(st.Straddled)
	return nil
}

// failure is the error a snapshot that did not go live ends its subscription with: the
// hand-off's own failure when it failed first (the reader then stopped on it), else the read's
// reason, which fails the hand-off too.
func (s *snapshots) failure(ctx, parent context.Context, h *handoff.Handoff[*stream.Item], err error) error {
	if herr := h.Err(); herr != nil {
		return clientError(herr)
	}
	if parent.Err() != nil {
		h.Fail(handoff.ReasonReplicationRestarted, "the subscription ended", nil)
		return parent.Err()
	}
	if errors.Is(context.Cause(ctx), errSnapshotTimeout) && !isHandoffError(err) {
		h.Fail(handoff.ReasonTimeout, fmt.Sprintf("the snapshot took longer than %s", s.timeout), err)
		return clientError(h.Err())
	}
	if r, ok := handoff.ReasonOf(err); ok {
		h.Fail(r, "the read failed", err)
		return clientError(err)
	}
	if fe, ok := fault.As(err); ok {
		// A page the client's queue could never take (session.SnapshotPages).
		h.Fail(handoff.Reason(fe.Code), fe.Message, err)
		return fe
	}
	// Postgres failed otherwise: unreachable, a privilege missing. The subscription's end lets
	// go of the hand-off.
	s.log.Warn("snapshot: the read failed", "err", err)
	return &fault.Error{Code: fault.CodeUnavailable, Err: err,
		Message: "the database did not answer the snapshot's read; subscribe again with backoff"}
}

func isHandoffError(err error) bool { _, ok := handoff.ReasonOf(err); return ok }

// clientError is a hand-off's failure as its client is told: the reason's code, what
// happened, and what to do. The detail (positions, transaction ids, counts; never a row's
// values) goes to the client only where it says nothing of others' data: for too_large, the
// counts; for policy_error, the rule's name alone.
func clientError(err error) error {
	var he *handoff.Error
	if !errors.As(err, &he) {
		return &fault.Error{Code: fault.CodeInternal, Message: "the snapshot failed; subscribe again", Err: err}
	}
	msg := reasonText[he.Reason]
	switch he.Reason {
	case handoff.ReasonTooLarge:
		msg += " (" + he.Detail + ")"
	case handoff.ReasonPolicyError:
		rule := "a policy rule"
		var ee *policy.EvalError
		if errors.As(err, &ee) && ee.Rule != "" {
			rule = ee.Rule
		}
		msg = rule + " could not decide whether this subscription may see a row of the snapshot (a server configuration problem, not a denial)"
	}
	if msg == "" {
		msg = "the snapshot failed"
	}
	return &fault.Error{Code: fault.Code(he.Reason), Message: msg + "; " + he.Fix, Err: err}
}

// reasonText says what each reason means to a client.
var reasonText = map[handoff.Reason]string{
	handoff.ReasonBusy:                 "the server is reading as many snapshots as it may, and this one waited its turn in vain",
	handoff.ReasonTimeout:              "the snapshot took longer than the server allows: reading the rows, sending them, or the stream passing them",
	handoff.ReasonTooLarge:             "more rows match than a snapshot may carry",
	handoff.ReasonBufferFull:           "the changes held while the rows were read outgrew their bound",
	handoff.ReasonOnStandby:            "the server's snapshot connection reached a standby (a server configuration problem)",
	handoff.ReasonIsolation:            "the server's snapshot did not run at REPEATABLE READ (a server configuration problem)",
	handoff.ReasonMismatch:             "the rows were read from another server than the change stream comes from",
	handoff.ReasonSchemaChanged:        "the table's columns changed while its rows were read",
	handoff.ReasonReplicationRestarted: "the change stream restarted, or reported a loss, before the rows were joined to it",
	handoff.ReasonTableNotReady:        "the table joined the publication too recently",
	handoff.ReasonSyncStandbyStalled:   "a transaction waits for a synchronous standby longer than the server's look-back",
}

// snapshotSink is the reader's Sink for one snapshot: the snapshot goes to the hand-off, the
// pages to the session, which waits for room in the client's queue until ctx (the snapshot's
// timeout) ends. A hand-off that failed meanwhile stops the read at its next page.
type snapshotSink struct {
	ctx   context.Context
	h     *handoff.Handoff[*stream.Item]
	pages session.SnapshotPages
}

func (k *snapshotSink) Snapshot(s handoff.Snapshot) error { return k.h.SetSnapshot(s) }

func (k *snapshotSink) Page(rows []change.Row, p snapshot.Progress, last bool) error {
	if err := k.h.Err(); err != nil {
		return err
	}
	return k.pages.Page(k.ctx, rows, stream.Progress{Rows: p.Rows, Bytes: p.Bytes, Pages: p.Pages}, last)
}

// noteGuardAccess logs, once per process, as the stream first goes live, when the snapshot
// reader's sync-standby guard cannot see every role's transactions waiting for a synchronous
// standby (snapshot.GuardAccess.Limited); herald doctor says the same (postgres.sync_standby).
// A failure to read it is logged too: the guard runs all the same, with what the role sees.
func (s *Server) noteGuardAccess(ctx context.Context) {
	if s.snapReader == nil || !s.guardNoted.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	a, err := s.snapReader.GuardAccess(ctx)
	if err != nil {
		s.log.Warn("snapshot: could not read what the sync-standby guard can see", "err", err)
		return
	}
	if detail, fix, limited := a.Limited(); limited {
		s.log.Warn("snapshot: "+detail, "fix", fix)
	}
}

// schemaStarted has the catalog record the tables in the publication as the router first goes
// live: they are ready for snapshots, and any other joins when first seen (pgSchema.Started).
func (s *Server) schemaStarted(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.schema.Started(ctx); err != nil {
		s.log.Warn("snapshot: the publication's tables could not be read as the stream started; each is taken as new to it, and a snapshot of it may end with table_not_ready until the transactions running when it was first seen have ended", "err", err)
	}
}

// newSnapshotPool is the snapshot reader's pool: connections to the database the changefeed
// streams, with the same password rules (the reader pins its own session settings), one per
// read at once and one for the fences.
func newSnapshotPool(ctx context.Context, url string, reads int) (*pgxpool.Pool, error) {
	cc, err := changefeed.ConnConfig(url, false)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("snapshot pool: the database URL could not be parsed")
	}
	pc.ConnConfig.Config = *cc
	pc.MaxConns = int32(reads + 1)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("snapshot pool: %w", err)
	}
	return pool, nil
}
