package sse

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/wire"
)

// kept are ended streams' subscriptions, by session id, for a reconnect whose Last-Event-ID
// names the stream (wire.EventID's long form) to take them up: each subscription named in the
// id resumes after its position there, exactly as a subscribe with from does. An entry lives
// for the window and is taken once; past max entries the oldest is let go. Safe for
// concurrent use.
type kept struct {
	window time.Duration // read-only
	max    int           // read-only
	now    func() time.Time

	mu      sync.Mutex
	streams map[string]*keptStream // guarded by mu
	order   []keptRef              // guarded by mu: when each was kept, oldest first; entries taken meanwhile stay until they reach the front
}

type keptStream struct {
	subject string            // the identity the stream was opened for
	defs    []*wire.Subscribe // its subscriptions' subscribe frames, without ids or from
	at      time.Time
}

type keptRef struct {
	session string
	at      time.Time
}

func newKept(window time.Duration, max int) *kept {
	if window <= 0 {
		return nil
	}
	if max <= 0 {
		max = 10000
	}
	return &kept{window: window, max: max, now: time.Now, streams: map[string]*keptStream{}}
}

// keep records an ended stream's subscriptions. A stream with none is not kept.
func (k *kept) keep(session, subject string, defs []*wire.Subscribe) {
	if k == nil || len(defs) == 0 {
		return
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(now)
	for len(k.streams) >= k.max && len(k.order) > 0 {
		k.dropFrontLocked()
	}
	k.streams[session] = &keptStream{subject: subject, defs: defs, at: now}
	k.order = append(k.order, keptRef{session, now})
}

// take returns and forgets the stream kept under session, if it is there, within the window,
// and was opened for subject: another identity gets nothing, as if it were never kept.
func (k *kept) take(session, subject string) *keptStream {
	if k == nil {
		return nil
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(now)
	ks := k.streams[session]
	if ks == nil || ks.subject != subject {
		return nil
	}
	delete(k.streams, session)
	return ks
}

// len is how many streams are kept.
func (k *kept) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.streams)
}

func (k *kept) expireLocked(now time.Time) {
	for len(k.order) > 0 && now.Sub(k.order[0].at) > k.window {
		k.dropFrontLocked()
	}
}

// dropFrontLocked lets go of the oldest entry of order, and of its stream if it is still the
// one kept then (not taken, nor kept again since).
func (k *kept) dropFrontLocked() {
	ref := k.order[0]
	k.order[0] = keptRef{}
	k.order = k.order[1:]
	if ks := k.streams[ref.session]; ks != nil && ks.at.Equal(ref.at) {
		delete(k.streams, ref.session)
	}
	if len(k.order) == 0 {
		k.order = nil // let the backing array go
	}
}

// def returns the kept subscribe frame of sub.
func (ks *keptStream) def(sub string) *wire.Subscribe {
	if ks == nil {
		return nil
	}
	for _, d := range ks.defs {
		if d.Sub == sub {
			return d
		}
	}
	return nil
}

// resume takes up, on c, the subscriptions the Last-Event-ID last names, other than urlSub
// (the URL's, already subscribed): each resumes after its position in last, from the stream
// kept under last's session. One that cannot be taken up is ended at once with an unprompted
// unsubscribed saying why, so the client never believes a subscription live that is not:
// not_found when the stream is not kept here (its window passed, it ended on another node, or
// another identity asks), and a subscription's own refusal otherwise (its position past
// resuming, a policy that no longer allows it). A subscription whose subscribed never reached
// the client is not in last, and is not taken up: the client subscribes to it again.
func (h *Handler) resume(ctx context.Context, c *heraldv1.Conn, last *wire.EventID, subject, urlSub string) {
	ks := h.kept.take(last.Session, subject)
	for _, sp := range last.Subs {
		if sp.Sub == urlSub {
			continue
		}
		d := ks.def(sp.Sub)
		if d == nil {
			c.Send(&wire.Unsubscribed{Sub: sp.Sub, Code: wire.CodeNotFound, Message: fmt.Sprintf(
				"the stream's subscriptions are not kept on this node (limits.sse_resume_window), so %q cannot resume; subscribe again", sp.Sub)})
			continue
		}
		f := *d
		f.From = sp.Pos
		if f.From.IsZero() || strings.ContainsAny(f.Channel, "*") {
			c.Send(&wire.Unsubscribed{Sub: sp.Sub, Code: wire.CodeBadPosition, Message: fmt.Sprintf(
				"subscription %q spans channels, so it has no one position to resume from; subscribe again, and re-read what it shows", sp.Sub)})
			continue
		}
		if we := c.Subscribe(ctx, &f); we != nil {
			c.Send(&wire.Unsubscribed{Sub: sp.Sub, Code: we.Code, Message: we.Message})
		}
	}
}
