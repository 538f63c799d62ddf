package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
)

// SnapshotFunc reads a table subscription's snapshot and joins it to the subscription's
// stream: the producer's side of SubscribeRequest.Snapshot. The session calls it on a
// goroutine of its own once the subscribed reply is queued, with a context that ends when the
// subscription or the session does. It hands the rows to pages, page by page, then lets the
// hand-off deliver the changes the rows do not hold and the Live item, through the session's
// Push like any item, and returns nil once the subscription is live. An error ends the
// subscription: a *fault.Error carries the code the client is told (the snapshot's reason);
// any other error is told as internal. What it returns after ctx has ended is not told.
type SnapshotFunc func(ctx context.Context, pages SnapshotPages) error

// SnapshotPages is where a snapshot's rows go: its subscription's data lane, as one frame per
// page, in order, after the subscribed reply and before anything else of the subscription.
type SnapshotPages interface {
	// Page queues one page: rows, the progress so far, and whether it is the last. It waits
	// while the data lane has no room for the page, rather than lose it, until ctx ends (then
	// it returns ctx's error): a client that reads slowly slows the read down. A page larger
	// than the whole data lane is refused with a *fault.Error, snapshot_too_large. The rows
	// are encoded before it returns, and not kept.
	Page(ctx context.Context, rows []change.Row, p stream.Progress, last bool) error
}

// snapshotPages is a subscription's SnapshotPages.
type snapshotPages struct {
	s  *Session
	su *subscription
}

func (p snapshotPages) Page(ctx context.Context, rows []change.Row, pr stream.Progress, last bool) error {
	s := p.s
	// No position: a page is not a place in the stream a client could resume from (an SSE
	// event id), and the lanes never open a gap for it (TryPushData waits instead).
	f := delivery.Frame{Body: s.cfg.Codec.Rows(nil, p.su.sub, rows, pr, last), Key: p.su.key}
	for {
		wait, err := s.lanes.TryPushData(f)
		switch {
		case errors.Is(err, delivery.ErrDataTooLarge):
			return &fault.Error{Code: fault.CodeSnapshotTooLarge, Sub: p.su.sub, Message: fmt.Sprintf(
				"a page of the snapshot takes %d bytes, more than this connection's queue holds (%d); select fewer columns, or ask the operator to lower handoff.page_bytes",
				f.Size(), s.cfg.Lanes.MaxDataBytes)}
		case err != nil:
			// The lanes are closed: the session is ending, and its end cancels ctx.
			return err
		case wait == nil:
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runSnapshot runs a subscription's snapshot (its SnapshotFunc) and ends the subscription if it
// fails: an unprompted unsubscribed with the failure's code, queued under mu like a reply, so
// nothing of the subscription follows it. ctx ends with the subscription: an unsubscribe, a
// replacement, the session's close; a failure after that is nobody's to tell.
func (s *Session) runSnapshot(ctx context.Context, su *subscription, run SnapshotFunc) {
	defer s.snapshots.Done()
	err := run(ctx, snapshotPages{s: s, su: su})
	if err == nil || ctx.Err() != nil {
		return
	}
	fe, ok := fault.As(err)
	if !ok {
		s.log.Error("a table snapshot failed", "sub", su.sub, "err", err)
		fe = &fault.Error{Code: fault.CodeInternal, Message: "the subscription's snapshot failed; subscribe again, and report it if it persists", Err: err}
	}
	s.mu.Lock()
	if s.subs[su.sub] != su {
		s.mu.Unlock()
		return // ended meanwhile
	}
	release := s.endLocked(su, fe)
	s.mu.Unlock()
	release()
}
