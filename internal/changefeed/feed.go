package changefeed

import (
	"context"
	"errors"
	"github.com/heraldrt/herald/internal/problem"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/change"
)

// Sink receives committed transactions, in commit order, one at a time.
type Sink interface {
	// Accept hands on one committed transaction. It returns nil only once every change in it
	// has been handed on downstream: that is what lets the feed confirm the transaction's end
	// to Postgres. An error stops the stream; the transaction is streamed again on restart.
	// Accept must honour ctx.
	Accept(ctx context.Context, txn *change.Txn) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, txn *change.Txn) error

// Accept calls f.
func (f SinkFunc) Accept(ctx context.Context, txn *change.Txn) error { return f(ctx, txn) }

// Stats is a snapshot of a feed's state, for /readyz, metrics and tests.
type Stats struct {
	Leader    bool // holds the leader lock
	Streaming bool // the replication stream is live
	// Failure is why the stream last died on its own, or "" while it is live or was never
	// started. Reset when a restarted stream is live again.
	Failure   string
	FailedAt  time.Time
	Restarts  int
	Confirmed change.LSN // the last position confirmed to Postgres
	// Accepted is the commit LSN of the last transaction the sink accepted.
	Accepted        change.LSN
	ServerEnd       change.LSN // the server's WAL end, as last reported
	LagBytes        uint64     // ServerEnd - Confirmed
	ConfirmFailures int        // status updates that failed to send since the last that landed
	// ConfirmFailuresTotal counts every status update that failed to send, ever.
	ConfirmFailuresTotal uint64
	// LastCommit is the commit time, by the database's clock, of the last transaction the
	// sink accepted; zero before the first.
	LastCommit time.Time
	Txns       uint64 // transactions handed to the sink
	Events     uint64 // change events handed to the sink
	Overflows  uint64 // transactions too large to hold, handed on as overflows
}

// Feed streams one publication through one slot into a Sink: exactly one Feed per slot is the
// leader at a time, elected by a Postgres advisory lock, and the others wait as standbys.
//
// Run owns every goroutine the feed starts and returns only when they have ended. Between the
// restarts of a failed stream, the feed keeps the commit LSN of the last transaction its sink
// accepted, so a restart never hands a transaction on twice.
type Feed struct {
	cfg  Config
	sink Sink

	mu    sync.Mutex
	stats Stats // guarded by mu

	// owned by the Run goroutine
	resumeEnd    change.LSN // confirmed end position to restart from
	resumeCommit change.LSN // last commit LSN handed on
}

// New validates cfg and returns a feed that will stream into sink.
func New(cfg Config, sink Sink) (*Feed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, &Error{Stage: StageConfig, Detail: "no sink", Permanent: true}
	}
	return &Feed{cfg: cfg.withDefaults(), sink: sink}, nil
}

// Stats returns a snapshot of the feed's state.
func (f *Feed) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	if s.ServerEnd > s.Confirmed {
		s.LagBytes = uint64(s.ServerEnd - s.Confirmed)
	}
	return s
}

func (f *Feed) update(fn func(*Stats)) {
	f.mu.Lock()
	fn(&f.stats)
	f.mu.Unlock()
}

// errStandby means another process holds the leader lock.
var errStandby = errors.New("another process holds the leader lock for this slot")

// Run streams until ctx ends or a permanent error occurs, restarting a stream that dies on its
// own with jittered exponential backoff. It returns nil when stopped through ctx, and the
// permanent error otherwise.
func (f *Feed) Run(ctx context.Context) error {
	log := f.cfg.Logger.With("slot", f.cfg.Slot)
	f.resumeCommit = f.cfg.From
	backoff := f.cfg.BackoffMin
	standby := false
	for {
		started := time.Now()
		err := f.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, errStandby):
			if !standby {
				log.Info("standing by: another process leads this slot")
				standby = true
			}
			if !sleep(ctx, jitter(f.cfg.LeaderPoll)) {
				return nil
			}
			continue
		case err == nil:
			err = errors.New("the server ended the replication stream")
		}
		standby = false
		f.update(func(s *Stats) {
			s.Failure, s.FailedAt, s.Streaming, s.Leader = err.Error(), time.Now(), false, false
		})
		log.Error("replication stream ended", "error", err, "stage", stageOf(err), problem.Attr(err))
		if f.cfg.OnEnd != nil {
			f.cfg.OnEnd(err)
		}
		if IsPermanent(err) {
			return err
		}
		if time.Since(started) > time.Minute {
			backoff = f.cfg.BackoffMin
		}
		if !sleep(ctx, jitter(backoff)) {
			return nil
		}
		backoff = min(backoff*2, f.cfg.BackoffMax)
		f.update(func(s *Stats) { s.Restarts++ })
	}
}

func stageOf(err error) Stage {
	var e *Error
	if errors.As(err, &e) {
		return e.Stage
	}
	return StageStream
}

// jitter spreads d over [0.8d, 1.2d), so standbys and restarting feeds do not move in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
