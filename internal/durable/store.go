package durable

import (
	"context"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Store keeps every durable subscription: its Def, its queue, its bound connections and its
// leases, and applies Queue's rules to them, one step at a time and atomically per
// subscription: two nodes stepping the same subscription at once see one step after the
// other. Implementations: store/memory.Durable (one node) and store/redis.Durable (shared by
// nodes); the conformance suite is storetest.RunDurable.
//
// Every step answers what it hands to which connection (Outcome.Deliveries): the caller hands
// it on, to its own connections or, through the cross-node transport, to the node holding
// one. Deadlines are the callers' clocks (now): the nodes' clocks must agree to well within
// Limits.Lease.
type Store interface {
	// Bind binds c to key's subscription, defining it as def at now when the holder has none
	// of that name (Bound.Created; ErrTooMany when the holder already has Limits.MaxPerHolder),
	// and refusing with ErrConflict when it has one with another Def.
	Bind(ctx context.Context, key Key, def Def, c Conn, now time.Time) (Bound, error)
	// Begin records where a subscription just created starts: its first Tail, which what it
	// takes from the channel follows. A subscription that has a start keeps it.
	Begin(ctx context.Context, key Key, start stream.Position) error
	// Unbind unbinds connection id (Queue.Unbind). ErrGone when the subscription is not there.
	Unbind(ctx context.Context, key Key, id string, now time.Time) (Outcome, error)
	// Append queues ents (Queue.Append). ErrGone when the subscription is not there.
	Append(ctx context.Context, key Key, ents []Entry, now time.Time) (Outcome, error)
	// Ack settles pos for connection id (Queue.Ack). ErrGone when the subscription is not
	// there.
	Ack(ctx context.Context, key Key, id string, pos stream.Position, now time.Time) (AckResult, Outcome, error)
	// Expire unbinds the connections past their deadline and ends the leases past theirs at
	// now (Queue.Expire), and forgets the subscription when it has been idle (no connection
	// bound) for Limits.IdleTTL: then Outcome.Gone. ErrGone when the subscription is not
	// there.
	Expire(ctx context.Context, key Key, now time.Time) (Outcome, error)
	// Touch renews the bound connections ids (Queue.Touch). ErrGone when the subscription is
	// not there.
	Touch(ctx context.Context, key Key, ids []string, now time.Time) error
	// Claim makes node the owner of the subscription, the one node that feeds it from its
	// channel and expires its leases, until now+ttl, when no other node owns it then; an
	// owner's claim renews it. owner is the owner after the claim; from is where an owner
	// feeds it from: the last position it took, else where it started.
	Claim(ctx context.Context, key Key, node string, now time.Time, ttl time.Duration) (owner string, from stream.Position, err error)
	// Forget deletes the subscription, its queue and its leases; ok is false when it was not
	// there.
	Forget(ctx context.Context, key Key) (ok bool, err error)
}

// Bound is what a bind found.
type Bound struct {
	Def     Def
	Created bool
	// Start is where the subscription started: the channel's position when it was created
	// (Store.Begin); zero until then.
	Start stream.Position
	// Tail is the last position the subscription took from its channel; zero when none.
	Tail stream.Position
	Outcome
}
