package durable

import (
	"errors"
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Mode is how a durable subscription hands its items to its holder's connections.
type Mode string

const (
	// Broadcast: every connection bound to the subscription gets each item. An item no
	// connection was bound for waits in the queue until one binds.
	Broadcast Mode = "broadcast"
	// Single: exactly one connection gets each item, under a lease that its ack settles; a
	// lease that ends without one (it expired, or its connection went) offers the item to
	// another connection, until Config.MaxAttempts deliveries park it.
	Single Mode = "single"
)

// Key names one durable subscription: its holder (the identity's subject and the app its
// token names) and the name the client gave it (the subscribe's sub). The holder is the unit
// every store key of the subscription shares a hash tag with.
type Key struct {
	Subject string
	App     string
	Name    string
}

// Holder is the key's holder alone, as a store groups a holder's subscriptions (the per-holder
// limit counts them).
func (k Key) Holder() Key { return Key{Subject: k.Subject, App: k.App} }

// String is the key for logs: subject, app and name, each quoted.
func (k Key) String() string { return fmt.Sprintf("%q/%q/%q", k.Subject, k.App, k.Name) }

// Def is what a durable subscription is: the one channel it takes items from, its event
// filter, and its mode. A bind that names the same key with another Def is refused
// (ErrConflict): two clients that disagree on what a name means must not share its queue.
type Def struct {
	Channel string
	Event   string // "" takes every event
	Mode    Mode
}

// Conn is one connection bound to a durable subscription.
type Conn struct {
	// ID is the connection's id, unique among every node's connections (the session id).
	ID string
	// Node is the node holding the connection; "" when the node is alone.
	Node string
}

// Entry is one thing a durable subscription's queue holds and hands on: a channel
// publication, or a gap marker standing for items it lost (its queue overflowed, an item was
// parked, the channel's stream lost items before they reached it).
type Entry struct {
	// Msg is the publication; nil for a marker.
	Msg *stream.Message
	// Gap is the marker; nil for a publication.
	Gap *stream.Gap
	// Item is the hub's item for Msg, when the store kept it (memory): handing it on shares
	// its encodings with every other subscriber of the publication. Nil otherwise.
	Item *stream.Item
	// Attempt is which delivery of a single subscription's item this is, from 1; 0 for a
	// broadcast's and for a marker.
	Attempt int
}

// Pos is the entry's position: the publication's, or the marker's last.
func (e Entry) Pos() stream.Position {
	if e.Msg != nil {
		return e.Msg.Pos
	}
	if e.Gap != nil {
		return e.Gap.Last
	}
	return stream.Position{}
}

// StreamItem is the entry as a stream item, for a session: the hub's item when the store kept
// it, else one made for it.
func (e Entry) StreamItem() *stream.Item {
	switch {
	case e.Item != nil:
		return e.Item
	case e.Msg != nil:
		return stream.NewMessage(e.Msg)
	case e.Gap != nil:
		return stream.NewGap(e.Gap)
	}
	return nil
}

// entryOverhead is what one queued entry is counted as beside its publication's own bytes:
// its position, names and bookkeeping. It keeps a queue of empty publications bounded by bytes
// too.
const entryOverhead = 64

// Size is what the entry counts toward Config.MaxBytes.
func (e Entry) Size() int {
	if e.Msg == nil {
		return 0
	}
	return entryOverhead + len(e.Msg.Pos.Epoch) + len(e.Msg.Channel) + len(e.Msg.Event) + len(e.Msg.Data)
}

// Delivery is what one step hands one connection, in order.
type Delivery struct {
	Conn    Conn
	Entries []Entry
}

// Outcome is what one step of a durable subscription did: what to hand to which connection,
// and what it counted.
type Outcome struct {
	Deliveries []Delivery
	// Delivered counts the items handed out: one per connection for a broadcast, one per
	// lease for a single.
	Delivered int
	// Acked counts the items an ack settled.
	Acked int
	// Retried counts the leases that ended without an ack (expired, or their connection went)
	// whose item will be offered again.
	Retried int
	// Parked counts the items parked: delivered Config.MaxAttempts times without an ack.
	Parked int
	// Dropped counts the items the queue shed to stay within its bounds.
	Dropped int
	// Depth is how many publications the queue holds after the step, leased ones included.
	Depth int
	// Gone is true when the subscription no longer exists: forgotten, or idle past its TTL.
	Gone bool
}

// add folds o into the running totals of t (Outcome's counters only).
func (t *Outcome) add(o Outcome) {
	t.Deliveries = append(t.Deliveries, o.Deliveries...)
	t.Delivered += o.Delivered
	t.Acked += o.Acked
	t.Retried += o.Retried
	t.Parked += o.Parked
	t.Dropped += o.Dropped
	t.Depth = o.Depth
	t.Gone = t.Gone || o.Gone
}

// AckResult is what an ack found.
type AckResult int

const (
	// Acked: the ack settled the item.
	Acked AckResult = iota + 1
	// AlreadyAcked: this connection had settled the item already: an ack is idempotent.
	AlreadyAcked
	// NotFound: the item is not this connection's to settle: another connection holds its
	// lease or settled it, or the position names no item the subscription holds or recently
	// settled.
	NotFound
)

func (r AckResult) String() string {
	switch r {
	case Acked:
		return "acked"
	case AlreadyAcked:
		return "already_acked"
	case NotFound:
		return "not_found"
	}
	return fmt.Sprintf("ack_result_%d", int(r))
}

// The reasons a durable subscription's markers give, beside the stream's own (a gap the hub
// reported reaches the queue as it is).
const (
	// ReasonQueueFull: the queue held Config.MaxItems publications or Config.MaxBytes bytes,
	// and shed its oldest not in a connection's hands to take a new one.
	ReasonQueueFull = stream.ReasonQueueFull
	// ReasonParked: a single subscription's item was delivered Config.MaxAttempts times
	// without an ack, and is offered no more.
	ReasonParked = stream.ReasonParked
)

// Errors a store refuses a bind with.
var (
	// ErrConflict: the holder has a durable subscription of that name with another Def.
	ErrConflict = errors.New("durable: the name is taken by a subscription with another definition")
	// ErrTooMany: the holder already has Config.MaxPerHolder durable subscriptions.
	ErrTooMany = errors.New("durable: the holder has the most durable subscriptions it may")
	// ErrGone: the subscription no longer exists (forgotten, or idle past its TTL).
	ErrGone = errors.New("durable: the subscription no longer exists")
)

// Defaults.
const (
	DefaultMaxItems     = 1000
	DefaultMaxBytes     = 1 << 20
	DefaultLease        = 30 * time.Second
	DefaultMaxAttempts  = 5
	DefaultMaxInFlight  = 16
	DefaultIdleTTL      = 24 * time.Hour
	DefaultMaxPerHolder = 16
	DefaultConnTTL      = 15 * time.Second
)

// SettledMemory is how many settled positions a subscription remembers, so that an ack sent
// again (a client that did not see its first answer) is still answered as a success.
const SettledMemory = 1024

// Limits bound one durable subscription; the zero value of each field means its default.
type Limits struct {
	// MaxItems bounds the publications a queue holds, leased ones included. Default 1000.
	MaxItems int
	// MaxBytes bounds their bytes (Entry.Size). Default 1 MiB.
	MaxBytes int
	// Lease is how long a connection holds a single subscription's item before it is offered
	// to another. Default 30s.
	Lease time.Duration
	// MaxAttempts is how many deliveries of one item are made before it is parked. Default 5.
	MaxAttempts int
	// MaxInFlight is how many leased items one connection holds at once; past it, items go to
	// other connections or wait. Default 16.
	MaxInFlight int
	// IdleTTL is how long a subscription outlives its last connection. Default 24h.
	IdleTTL time.Duration
	// MaxPerHolder bounds the durable subscriptions one holder keeps. Default 16.
	MaxPerHolder int
	// ConnTTL is how long a bound connection outlives its node's last renewal (Registry renews
	// its own every ConnTTL/3): a node that dies takes its connections with it, their leases
	// with them. Default 15s.
	ConnTTL time.Duration
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxItems <= 0 {
		l.MaxItems = DefaultMaxItems
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.Lease <= 0 {
		l.Lease = DefaultLease
	}
	if l.MaxAttempts <= 0 {
		l.MaxAttempts = DefaultMaxAttempts
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.IdleTTL <= 0 {
		l.IdleTTL = DefaultIdleTTL
	}
	if l.MaxPerHolder <= 0 {
		l.MaxPerHolder = DefaultMaxPerHolder
	}
	if l.ConnTTL <= 0 {
		l.ConnTTL = DefaultConnTTL
	}
	return l
}

// Validate reports a bound that cannot work.
func (l Limits) Validate() error {
	l = l.WithDefaults()
	switch {
	case l.Lease < 10*time.Millisecond:
		return fmt.Errorf("durable: lease %s is shorter than 10ms", l.Lease)
	case l.IdleTTL < time.Second:
		return fmt.Errorf("durable: idle_ttl %s is shorter than 1s", l.IdleTTL)
	case l.MaxBytes < 1024:
		return fmt.Errorf("durable: max_bytes %d is less than 1 KiB", l.MaxBytes)
	}
	return nil
}

// after reports whether p comes after q in a channel's stream: a later offset of the same
// epoch, or any position of another epoch (a new epoch follows the old one: the hub reports
// the change as a gap first).
func after(p, q stream.Position) bool {
	if q.IsZero() || p.Epoch != q.Epoch {
		return true
	}
	return p.Offset > q.Offset
}
