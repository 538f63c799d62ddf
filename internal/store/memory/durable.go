package memory

import (
	"context"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/stream"
)

// Durable implements durable.Store in this process: one durable.Queue per subscription, which
// holds the rules, and the count of each holder's subscriptions for the per-holder limit. The
// hub's items are kept as they are (durable.Entry.Item), so a broadcast shares their encodings
// with every other subscriber. One lock for every subscription: each step is O(the queue) at
// most, and one node's durable subscriptions are its own holders'.
type Durable struct {
	lim     durable.Limits
	mu      sync.Mutex
	subs    map[durable.Key]*durableSub // guarded by mu
	holders map[durable.Key]int         // guarded by mu: subscriptions per holder
}

type durableSub struct {
	q          *durable.Queue
	start      stream.Position
	owner      string    // the node that feeds it
	ownerUntil time.Time // when its claim ends
}

var _ durable.Store = (*Durable)(nil)

// NewDurable returns an empty store whose subscriptions are bounded by lim.
func NewDurable(lim durable.Limits) *Durable {
	return &Durable{lim: lim.WithDefaults(), subs: map[durable.Key]*durableSub{}, holders: map[durable.Key]int{}}
}

// Bind implements durable.Store.
func (s *Durable) Bind(_ context.Context, key durable.Key, def durable.Def, c durable.Conn, now time.Time) (durable.Bound, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subs[key]
	created := false
	if sub == nil {
		if s.holders[key.Holder()] >= s.lim.MaxPerHolder {
			return durable.Bound{}, durable.ErrTooMany
		}
		sub = &durableSub{q: durable.NewQueue(def, s.lim, now)}
		s.subs[key] = sub
		s.holders[key.Holder()]++
		created = true
	} else if sub.q.Def() != def {
		return durable.Bound{Def: sub.q.Def()}, durable.ErrConflict
	}
	o := sub.q.Bind(c, now)
	return durable.Bound{Def: def, Created: created, Start: sub.start, Tail: sub.q.Tail(), Outcome: o}, nil
}

// Begin implements durable.Store.
func (s *Durable) Begin(_ context.Context, key durable.Key, start stream.Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subs[key]
	if sub == nil {
		return durable.ErrGone
	}
	if sub.start.IsZero() {
		sub.start = start
	}
	return nil
}

// Unbind implements durable.Store.
func (s *Durable) Unbind(_ context.Context, key durable.Key, id string, now time.Time) (durable.Outcome, error) {
	return s.step(key, func(q *durable.Queue) durable.Outcome { return q.Unbind(id, now) })
}

// Append implements durable.Store.
func (s *Durable) Append(_ context.Context, key durable.Key, ents []durable.Entry, now time.Time) (durable.Outcome, error) {
	return s.step(key, func(q *durable.Queue) durable.Outcome { return q.Append(ents, now) })
}

// Ack implements durable.Store.
func (s *Durable) Ack(_ context.Context, key durable.Key, id string, pos stream.Position, now time.Time) (durable.AckResult, durable.Outcome, error) {
	var r durable.AckResult
	o, err := s.step(key, func(q *durable.Queue) durable.Outcome {
		var o durable.Outcome
		r, o = q.Ack(id, pos, now)
		return o
	})
	return r, o, err
}

// Expire implements durable.Store.
func (s *Durable) Expire(_ context.Context, key durable.Key, now time.Time) (durable.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subs[key]
	if sub == nil {
		return durable.Outcome{}, durable.ErrGone
	}
	if sub.q.Idle(now) {
		s.forgetLocked(key)
		return durable.Outcome{Gone: true}, nil
	}
	return sub.q.Expire(now), nil
}

// Touch implements durable.Store.
func (s *Durable) Touch(_ context.Context, key durable.Key, ids []string, now time.Time) error {
	_, err := s.step(key, func(q *durable.Queue) durable.Outcome { q.Touch(ids, now); return durable.Outcome{} })
	return err
}

// Claim implements durable.Store.
func (s *Durable) Claim(_ context.Context, key durable.Key, node string, now time.Time, ttl time.Duration) (string, stream.Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subs[key]
	if sub == nil {
		return "", stream.Position{}, durable.ErrGone
	}
	if sub.owner == node || !now.Before(sub.ownerUntil) {
		sub.owner, sub.ownerUntil = node, now.Add(ttl)
	}
	from := sub.q.Tail()
	if from.IsZero() {
		from = sub.start
	}
	return sub.owner, from, nil
}

// Forget implements durable.Store.
func (s *Durable) Forget(_ context.Context, key durable.Key) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[key] == nil {
		return false, nil
	}
	s.forgetLocked(key)
	return true, nil
}

func (s *Durable) forgetLocked(key durable.Key) {
	delete(s.subs, key)
	h := key.Holder()
	if s.holders[h]--; s.holders[h] <= 0 {
		delete(s.holders, h)
	}
}

// step runs f on key's queue under mu.
func (s *Durable) step(key durable.Key, f func(*durable.Queue) durable.Outcome) (durable.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := s.subs[key]
	if sub == nil {
		return durable.Outcome{}, durable.ErrGone
	}
	return f(sub.q), nil
}
