package durable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/ratelog"
	"github.com/heraldrt/herald/internal/stream"
)

// Channels is the channel hub as the registry takes a subscription's items from it.
type Channels interface {
	// Subscribe attaches r, as sub, to one channel with an event filter, resuming after from
	// when it is not zero (the history's replay, or one gap, comes back in Feed.Replay), and
	// starting at the channel's head otherwise.
	Subscribe(r stream.Receiver, sub, channel, event string, from stream.Position) (Feed, error)
}

// Feed is a subscription to the channel hub.
type Feed struct {
	Head        stream.Position
	Replay      []*stream.Item
	Unsubscribe func()
}

// Relay hands a step's delivery to a connection on another node (the cross-node transport);
// the node holding it hands it on with Registry.Receive. It must not block: it queues,
// bounded, and what a full queue drops is a single item's lease that expires and is offered
// again, or a broadcast's item lost (counted by the transport, which reports the loss).
type Relay interface {
	Deliver(node string, key Key, conn string, ents []Entry)
}

// Config configures a Registry. The zero value of each field means its default.
type Config struct {
	// Limits bound each subscription; the store applies them.
	Limits Limits
	// Node is this node's id among the nodes sharing the store; "" when it is alone.
	Node string
	// Relay carries deliveries to connections on other nodes; nil when the node is alone.
	Relay Relay
	// Tick is how often leases and idle subscriptions are looked at. Default Limits.Lease/4,
	// within 10ms and 1s: a lease ends at most a tick late.
	Tick time.Duration
	// InboxItems bounds a subscription's items on their way from the hub to the store. Past
	// it, they join one queue_full marker with their exact range. Default 4096.
	InboxItems int
	// OwnerTTL is how long a node's claim to feed a subscription outlives its last renewal
	// (every OwnerTTL/3): after a node dies, another holding a connection of the subscription
	// takes it over within about this long. Default 5s.
	OwnerTTL time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Limits = c.Limits.WithDefaults()
	if c.Tick <= 0 {
		c.Tick = min(max(c.Limits.Lease/4, 10*time.Millisecond), time.Second)
	}
	if c.InboxItems <= 0 {
		c.InboxItems = 4096
	}
	if c.OwnerTTL <= 0 {
		c.OwnerTTL = 5 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Stats are a registry's running totals: what its steps counted, and what it holds.
type Stats struct {
	Delivered, Acked, Retried, Parked, Dropped uint64
	// Depth is the items queued in the subscriptions this node feeds, as last seen.
	Depth int64
	// Subscriptions is the durable subscriptions this node feeds from its hub.
	Subscriptions int64
}

// Registry is one node's share of the durable subscriptions: it binds its connections to them
// (Bind), feeds the subscriptions it holds from its channel hub, steps them in the Store, and
// hands each step's deliveries to its own connections or, through the Relay, to the nodes
// holding them. See the package documentation.
type Registry struct {
	cfg   Config
	store Store
	chans Channels
	log   *slog.Logger
	// warn logs the store's failures, which repeat per subscription and tick while it does not
	// answer, each step's at most once per interval with the count held back.
	warn *ratelog.Limiter

	mu   sync.Mutex
	subs map[Key]*sub // guarded by mu: the subscriptions this node feeds or has connections bound to

	readyMu sync.Mutex
	ready   []*sub        // guarded by readyMu: subscriptions with items in their inbox
	wake    chan struct{} // one token: the worker has inbox items to take

	delivered, acked, retried, parked, dropped atomic.Uint64
	depth, fed                                 atomic.Int64
}

// sub is one durable subscription as this node knows it.
type sub struct {
	key Key
	// mu orders the subscription's steps on this node: held across each store step and the
	// pushes it makes, so a connection gets what the steps hand it in the order they made it.
	mu    sync.Mutex
	def   Def                 // guarded by mu
	local map[string]*Binding // guarded by mu: this node's connections bound, by connection id
	// unfeed ends the hub subscription that feeds it; nil when this node does not feed it.
	// A node feeds a subscription while it owns it (Store.Claim).
	unfeed func()  // guarded by mu
	depth  int     // guarded by mu: its depth as last seen, counted in Registry.depth
	gone   bool    // guarded by mu: forgotten; nothing steps it again
	retry  []Entry // guarded by mu: entries a failed Append left, tried again first
	// nextClaim and nextTouch are when this node next claims the subscription and renews its
	// connections bound to it. Guarded by mu.
	nextClaim, nextTouch time.Time

	inMu    sync.Mutex
	inbox   []Entry     // guarded by inMu: items from the hub not yet appended
	overGap *stream.Gap // guarded by inMu: items the inbox could not hold, one marker
	queued  bool        // guarded by inMu: on the registry's ready list
}

// New returns a registry over store, taking items from chans.
func New(cfg Config, store Store, chans Channels) (*Registry, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	return &Registry{cfg: cfg, store: store, chans: chans, log: cfg.Logger, warn: ratelog.New(cfg.Logger, ratelog.Config{}),
		subs: map[Key]*sub{}, wake: make(chan struct{}, 1)}, nil
}

// Stats returns the registry's running totals.
func (r *Registry) Stats() Stats {
	return Stats{Delivered: r.delivered.Load(), Acked: r.acked.Load(), Retried: r.retried.Load(),
		Parked: r.parked.Load(), Dropped: r.dropped.Load(), Depth: r.depth.Load(), Subscriptions: r.fed.Load()}
}

// Binding is one connection bound to a durable subscription.
type Binding struct {
	r     *Registry
	s     *sub
	conn  Conn
	rc    stream.Receiver
	name  string // the receiver's name for it: the subscription's sub
	end   func(*fault.Error)
	start stream.Position
	once  sync.Once
	// last is the last publication pushed to the connection; suspect is set when another
	// node's deliveries may have been lost on the way here (Lost), until the next publication
	// shows whether they were. Both guarded by the subscription's mu.
	last    stream.Position
	suspect bool
}

// pushLocked hands the connection one entry. After a loss on the way from another node, a
// broadcast's next publication that skips offsets first brings a marker for the ones skipped
// (upstream_gap, their count unknown: an event filter skips some of them on purpose); a single
// subscription needs none, its leases bring what was lost again. The caller holds the
// subscription's mu.
func (b *Binding) pushLocked(e Entry) {
	it := e.StreamItem()
	if it == nil {
		return
	}
	if m := e.Msg; m != nil {
		if b.suspect && b.s.def.Mode == Broadcast && m.Pos.Epoch == b.last.Epoch && m.Pos.Offset > b.last.Offset+1 {
			b.rc.Push(b.name, stream.NewGap(&stream.Gap{First: stream.ChannelPosition(m.Pos.Epoch, b.last.Offset+1),
				Last: stream.ChannelPosition(m.Pos.Epoch, m.Pos.Offset-1), Reason: stream.ReasonUpstreamGap}))
		}
		b.suspect, b.last = false, m.Pos
	}
	b.rc.Push(b.name, it)
}

// Start is where the subscription started: every item after it was delivered, is queued, or
// was marked lost.
func (b *Binding) Start() stream.Position { return b.start }

// BindRequest is a connection's bind.
type BindRequest struct {
	Key  Key
	Def  Def
	Conn Conn
	// Receiver gets the subscription's items as Name.
	Receiver stream.Receiver
	Name     string
	// End, when set, is called (holding no lock of the registry's) when the subscription is
	// deleted under the connection: forgotten by another of the holder's connections.
	End func(*fault.Error)
}

// Bind binds a connection to the holder's durable subscription, creating it when the holder
// has none of that name. A refusal is a *fault.Error: forbidden (no subject to hold it),
// durable_conflict (the name is taken by another definition), too_many_subscriptions (the
// holder's limit), unavailable (the store), or the hub's own refusal.
func (r *Registry) Bind(ctx context.Context, req BindRequest) (*Binding, error) {
	if req.Key.Subject == "" {
		return nil, &fault.Error{Code: fault.CodeForbidden, Field: "durable",
			Message: "a durable subscription belongs to an identity, and this connection has none (no token, or one without a sub claim); connect with a token"}
	}
	if strings.Contains(req.Def.Channel, "*") {
		return nil, &fault.Error{Code: fault.CodeBadFrame, Field: "channel",
			Message: "a durable subscription takes one channel, not a pattern: its items' positions must be one stream's"}
	}
	s := r.sub(req.Key)
	s.mu.Lock()
	b := &Binding{r: r, s: s, conn: req.Conn, rc: req.Receiver, name: req.Name, end: req.End}
	if s.local == nil {
		s.local = map[string]*Binding{}
	}
	// Before the store binds it: the bind's own step may hand it what waits.
	s.local[req.Conn.ID] = b
	bd, err := r.store.Bind(ctx, req.Key, req.Def, req.Conn, r.cfg.Now())
	if err != nil {
		delete(s.local, req.Conn.ID)
		r.dropIfIdleLocked(s)
		s.mu.Unlock()
		return nil, r.bindRefusal(req, bd.Def, err)
	}
	s.def, s.gone = req.Def, false
	s.nextTouch = r.cfg.Now().Add(r.cfg.Limits.ConnTTL / 3)
	if s.unfeed == nil {
		if err := r.claimLocked(ctx, s, &bd); err != nil {
			delete(s.local, req.Conn.ID)
			if o, uerr := r.store.Unbind(context.WithoutCancel(ctx), req.Key, req.Conn.ID, r.cfg.Now()); uerr == nil {
				r.handleLocked(s, o)
			}
			if bd.Created {
				_, _ = r.store.Forget(context.WithoutCancel(ctx), req.Key)
			}
			r.dropIfIdleLocked(s)
			s.mu.Unlock()
			return nil, err
		}
	}
	b.start = bd.Start
	r.handleLocked(s, bd.Outcome)
	s.mu.Unlock()
	return b, nil
}

// bindRefusal is the client-facing refusal of a bind the store refused.
func (r *Registry) bindRefusal(req BindRequest, had Def, err error) error {
	switch {
	case errors.Is(err, ErrConflict):
		return &fault.Error{Code: fault.CodeDurableConflict, Field: "sub", Err: err, Message: fmt.Sprintf(
			"your durable subscription %q is on channel %q, event %q, mode %s; this subscribe asks for channel %q, event %q, mode %s: subscribe with the same, use another sub, or delete it first (unsubscribe with forget)",
			req.Key.Name, had.Channel, had.Event, had.Mode, req.Def.Channel, req.Def.Event, req.Def.Mode)}
	case errors.Is(err, ErrTooMany):
		return &fault.Error{Code: fault.CodeTooManySubscriptions, Field: "sub", Err: err, Message: fmt.Sprintf(
			"you hold %d durable subscriptions, the most one identity and app may (durable.max_per_holder); delete one (unsubscribe with forget) first", r.cfg.Limits.MaxPerHolder)}
	}
	return r.unavailable("bind", req.Key, err)
}

func (r *Registry) unavailable(op string, key Key, err error) error {
	if fe, ok := fault.As(err); ok {
		return fe
	}
	r.warn.Warn(op, "durable: a store step failed", slog.String("op", op), slog.String("key", key.String()), slog.Any("error", err))
	return &fault.Error{Code: fault.CodeUnavailable, Err: err, Message: "the durable subscription's store did not answer; retry with backoff"}
}

// claimLocked claims s for this node at a bind, and feeds it when the claim makes this node
// its owner: after the last position it took, else where it started (bd's), else, for one just
// created, from the channel's head, recorded as its start. The caller holds s.mu.
func (r *Registry) claimLocked(ctx context.Context, s *sub, bd *Bound) error {
	now := r.cfg.Now()
	owner, _, err := r.store.Claim(ctx, s.key, r.cfg.Node, now, r.cfg.OwnerTTL)
	if err != nil {
		return r.unavailable("claim", s.key, err)
	}
	s.nextClaim = now.Add(r.cfg.OwnerTTL / 3)
	if owner != r.cfg.Node {
		return nil // another node feeds it
	}
	from := bd.Tail
	if from.IsZero() {
		from = bd.Start
	}
	head, err := r.feedLocked(ctx, s, from)
	if err != nil {
		return err
	}
	if bd.Start.IsZero() {
		bd.Start = head
		if err := r.store.Begin(ctx, s.key, head); err != nil {
			r.warn.Warn("begin", "durable: recording where a subscription starts failed", slog.String("key", s.key.String()), slog.Any("error", err))
		}
	}
	return nil
}

// feedLocked subscribes s to the hub after from (the history replays what it missed, or a gap
// says it cannot), or from the channel's head when from is zero, and returns the head. The
// caller holds s.mu.
func (r *Registry) feedLocked(ctx context.Context, s *sub, from stream.Position) (stream.Position, error) {
	f, err := r.chans.Subscribe(feedReceiver{r: r, s: s}, "durable", s.def.Channel, s.def.Event, from)
	if err != nil {
		return stream.Position{}, err
	}
	s.unfeed = f.Unsubscribe
	r.fed.Add(1)
	if len(f.Replay) > 0 {
		ents := make([]Entry, 0, len(f.Replay))
		for _, it := range f.Replay {
			ents = append(ents, entryOf(it))
		}
		// Just claimed: the store has it.
		_ = r.appendLocked(ctx, s, ents)
	}
	return f.Head, nil
}

// unfeedLocked ends the hub subscription that feeds s. The caller holds s.mu.
func (r *Registry) unfeedLocked(s *sub) {
	if s.unfeed == nil {
		return
	}
	// The hub's delivery to the feed takes only the inbox's lock, never s.mu.
	s.unfeed()
	s.unfeed = nil
	r.fed.Add(-1)
	r.depth.Add(int64(-s.depth))
	s.depth = 0
	s.inMu.Lock()
	s.inbox, s.overGap = nil, nil
	s.inMu.Unlock()
}

// sub returns key's subscription, made when this node knows none.
func (r *Registry) sub(key Key) *sub {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.subs[key]
	if s == nil {
		s = &sub{key: key}
		r.subs[key] = s
	}
	return s
}

// dropIfIdleLocked forgets s on this node when it neither feeds it nor has a connection bound
// to it. The caller holds s.mu.
func (r *Registry) dropIfIdleLocked(s *sub) {
	if s.unfeed != nil || len(s.local) > 0 {
		return
	}
	r.mu.Lock()
	if r.subs[s.key] == s {
		delete(r.subs, s.key)
	}
	r.mu.Unlock()
}

// Ack settles the item at pos for this connection. Acked and AlreadyAcked are nil; an item
// that is not this connection's to settle is not_found.
func (b *Binding) Ack(ctx context.Context, pos stream.Position) error {
	r, s := b.r, b.s
	s.mu.Lock()
	res, o, err := r.store.Ack(ctx, s.key, b.conn.ID, pos, r.cfg.Now())
	if err == nil {
		r.handleLocked(s, o)
	}
	s.mu.Unlock()
	switch {
	case errors.Is(err, ErrGone):
		return &fault.Error{Code: fault.CodeNotFound, Field: "sub", Message: fmt.Sprintf("the durable subscription %q no longer exists", b.name)}
	case err != nil:
		return r.unavailable("ack", s.key, err)
	case res == NotFound:
		return &fault.Error{Code: fault.CodeNotFound, Field: "pos", Message: fmt.Sprintf(
			"no item at %s of subscription %q is this connection's to acknowledge: another connection holds or settled it, or none was delivered there", pos, b.name)}
	}
	return nil
}

// Unbind unbinds the connection: the leases it holds end at once, and their items go to the
// holder's other connections. Idempotent.
func (b *Binding) Unbind() {
	b.once.Do(func() {
		r, s := b.r, b.s
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.local[b.conn.ID] == b {
			delete(s.local, b.conn.ID)
		}
		if !s.gone {
			ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
			o, err := r.store.Unbind(ctx, s.key, b.conn.ID, r.cfg.Now())
			cancel()
			switch {
			case err == nil:
				r.handleLocked(s, o)
			case !errors.Is(err, ErrGone):
				// Its leases end when they expire instead.
				r.warn.Warn("unbind", "durable: unbinding a connection failed; its leases end when they expire", slog.String("key", s.key.String()), slog.Any("error", err))
			}
		}
		r.dropIfIdleLocked(s)
	})
}

// stepTimeout bounds a step the registry takes on its own (an unbind, the worker's).
const stepTimeout = 5 * time.Second

// Forget deletes the holder's durable subscription key: its queue, its leases, and every
// binding of it on this node, each told why through its End. ok is false when it was not
// there.
func (r *Registry) Forget(ctx context.Context, key Key) (ok bool, err error) {
	r.mu.Lock()
	s := r.subs[key]
	r.mu.Unlock()
	if s == nil {
		ok, err = r.store.Forget(ctx, key)
		if err != nil {
			return false, r.unavailable("forget", key, err)
		}
		return ok, nil
	}
	s.mu.Lock()
	ok, err = r.store.Forget(ctx, key)
	var ends []*Binding
	if err == nil {
		ends = r.teardownLocked(s)
	}
	s.mu.Unlock()
	if err != nil {
		return false, r.unavailable("forget", key, err)
	}
	r.tellEnded(ends, key)
	return ok, nil
}

// tellEnded tells each binding's connection that its subscription was deleted.
func (r *Registry) tellEnded(ends []*Binding, key Key) {
	for _, b := range ends {
		if b.end != nil {
			b.end(&fault.Error{Code: fault.CodeNotFound, Sub: b.name, Message: fmt.Sprintf(
				"the durable subscription %q was deleted (unsubscribe with forget, or it stayed without a connection for durable.idle_ttl)", key.Name)})
		}
	}
}

// teardownLocked forgets s on this node once the store has: its feed ends and its bindings
// are returned, to be told. The caller holds s.mu.
func (r *Registry) teardownLocked(s *sub) []*Binding {
	s.gone = true
	r.unfeedLocked(s)
	ends := make([]*Binding, 0, len(s.local))
	for _, b := range s.local {
		ends = append(ends, b)
	}
	s.local = nil
	s.retry = nil
	r.dropIfIdleLocked(s)
	return ends
}

// handleLocked counts a step's outcome and hands its deliveries on: to this node's
// connections, under s.mu so each gets them in the order the steps made them, and to other
// nodes' through the Relay. The caller holds s.mu.
func (r *Registry) handleLocked(s *sub, o Outcome) {
	r.delivered.Add(uint64(o.Delivered))
	r.acked.Add(uint64(o.Acked))
	r.retried.Add(uint64(o.Retried))
	r.parked.Add(uint64(o.Parked))
	r.dropped.Add(uint64(o.Dropped))
	if s.unfeed != nil && o.Depth != s.depth {
		r.depth.Add(int64(o.Depth - s.depth))
		s.depth = o.Depth
	}
	for _, d := range o.Deliveries {
		if d.Conn.Node != r.cfg.Node {
			if r.cfg.Relay != nil {
				r.cfg.Relay.Deliver(d.Conn.Node, s.key, d.Conn.ID, d.Entries)
			}
			continue
		}
		b := s.local[d.Conn.ID]
		if b == nil {
			// Unbound as the step ran elsewhere: its leases end with the unbind, or expire.
			continue
		}
		for _, e := range d.Entries {
			b.pushLocked(e)
		}
	}
}

// Receive hands entries another node's step delivered to connection conn of key, bound here.
// A connection no longer here is passed over: its leases expire.
func (r *Registry) Receive(key Key, conn string, ents []Entry) {
	r.mu.Lock()
	s := r.subs[key]
	r.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.local[conn]; b != nil {
		for _, e := range ents {
			b.pushLocked(e)
		}
	}
}

// Lost is told that payloads from another node were lost on the way here: a broadcast's
// deliveries to this node's connections among them, perhaps. Each such binding is suspect
// until its next publication shows whether it missed any (pushLocked).
func (r *Registry) Lost(from string) {
	subs := r.allSubs()
	for _, s := range subs {
		s.mu.Lock()
		if s.def.Mode == Broadcast {
			for _, b := range s.local {
				b.suspect = true
			}
		}
		s.mu.Unlock()
	}
}

// feedReceiver takes a subscription's items from the hub into its inbox: it never blocks and
// takes no lock but the inbox's, for it runs on the hub's fan-out goroutine.
type feedReceiver struct {
	r *Registry
	s *sub
}

func (f feedReceiver) Push(_ string, it *stream.Item) {
	if it.Message == nil && it.Gap == nil {
		return
	}
	s := f.s
	s.inMu.Lock()
	if s.overGap == nil && len(s.inbox) < f.r.cfg.InboxItems {
		s.inbox = append(s.inbox, entryOf(it))
	} else {
		first, last := it.Position(), it.Position()
		lost := uint64(1)
		if g := it.Gap; g != nil {
			first, lost = g.First, g.Lost
		}
		if s.overGap == nil {
			s.overGap = &stream.Gap{First: first, Last: last, Lost: lost, Reason: ReasonQueueFull}
		} else {
			s.overGap.Last = last
			s.overGap.Lost = addLost(s.overGap.Lost, lost)
		}
	}
	wasQueued := s.queued
	s.queued = true
	s.inMu.Unlock()
	if !wasQueued {
		f.r.readyMu.Lock()
		f.r.ready = append(f.r.ready, s)
		f.r.readyMu.Unlock()
		select {
		case f.r.wake <- struct{}{}:
		default:
		}
	}
}

// entryOf is a hub item as a queue entry.
func entryOf(it *stream.Item) Entry {
	if it.Message != nil {
		return Entry{Msg: it.Message, Item: it}
	}
	return Entry{Gap: it.Gap}
}

// Run is the registry's worker: it appends what the hub fed to the subscriptions, and every
// Tick ends the leases past their deadline and forgets the subscriptions idle past their TTL.
// It returns when ctx ends, having ended the hub subscriptions that feed them.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	defer r.stopFeeds()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			r.drain(ctx)
		case <-t.C:
			r.drain(ctx)
			r.expire(ctx)
		}
	}
}

// drain appends each ready subscription's inbox.
func (r *Registry) drain(ctx context.Context) {
	r.readyMu.Lock()
	ready := r.ready
	r.ready = nil
	r.readyMu.Unlock()
	for _, s := range ready {
		s.inMu.Lock()
		ents := s.inbox
		if g := s.overGap; g != nil {
			ents = append(ents, Entry{Gap: g})
		}
		s.inbox, s.overGap, s.queued = nil, nil, false
		s.inMu.Unlock()
		s.mu.Lock()
		var ends []*Binding
		if !s.gone {
			ends = r.appendLocked(ctx, s, ents)
		}
		s.mu.Unlock()
		r.tellEnded(ends, s.key)
	}
	// Entries a failed append left are tried again at the next tick.
}

// appendLocked appends ents after what an earlier append left. When the subscription is gone
// it returns its bindings here, for the caller to tell once it has let go of s.mu. The caller
// holds s.mu.
func (r *Registry) appendLocked(ctx context.Context, s *sub, ents []Entry) []*Binding {
	if len(s.retry) > 0 {
		ents = append(s.retry, ents...)
		s.retry = nil
	}
	if len(ents) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	o, err := r.store.Append(sctx, s.key, ents, r.cfg.Now())
	cancel()
	switch {
	case err == nil:
		r.handleLocked(s, o)
	case errors.Is(err, ErrGone):
		return r.teardownLocked(s)
	default:
		// Kept, bounded: appends are idempotent by position, so one that did land is not
		// queued twice.
		if len(ents) > r.cfg.InboxItems {
			ents = ents[len(ents)-r.cfg.InboxItems:]
		}
		s.retry = ents
		r.warn.Warn("append", "durable: appending to a subscription failed; retrying", slog.String("key", s.key.String()), slog.Any("error", err))
	}
	return nil
}

// expire steps every subscription this node knows at the tick (keep), one after the other.
func (r *Registry) expire(ctx context.Context) {
	subs := r.allSubs()
	for _, s := range subs {
		ends := r.keep(ctx, s)
		r.tellEnded(ends, s.key)
	}
}

// keep is a subscription's tick on this node: it renews this node's connections bound to it
// (every ConnTTL/3), claims it (every OwnerTTL/3: the owner renews, another node takes it over
// once the owner's claim has run out) and feeds it or stops as the claim says, and, as its
// owner, ends the leases past their deadline and the connections past theirs, and forgets it
// when it has been idle for its TTL. It returns the bindings to tell when the subscription is
// gone.
func (r *Registry) keep(ctx context.Context, s *sub) []*Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	step := func(f func(ctx context.Context) error) error {
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		defer cancel()
		return f(sctx)
	}
	gone := func(err error) bool { return errors.Is(err, ErrGone) }
	now := r.cfg.Now()
	if len(s.local) > 0 && !now.Before(s.nextTouch) {
		ids := make([]string, 0, len(s.local))
		for id := range s.local {
			ids = append(ids, id)
		}
		err := step(func(ctx context.Context) error { return r.store.Touch(ctx, s.key, ids, now) })
		switch {
		case gone(err):
			return r.teardownLocked(s)
		case err != nil:
			r.warn.Warn("touch", "durable: renewing this node's connections failed", slog.String("key", s.key.String()), slog.Any("error", err))
		default:
			s.nextTouch = now.Add(r.cfg.Limits.ConnTTL / 3)
		}
	}
	if !now.Before(s.nextClaim) {
		var owner string
		var from stream.Position
		err := step(func(ctx context.Context) (err error) {
			owner, from, err = r.store.Claim(ctx, s.key, r.cfg.Node, now, r.cfg.OwnerTTL)
			return err
		})
		switch {
		case gone(err):
			return r.teardownLocked(s)
		case err != nil:
			r.warn.Warn("claim", "durable: claiming a subscription failed", slog.String("key", s.key.String()), slog.Any("error", err))
		default:
			s.nextClaim = now.Add(r.cfg.OwnerTTL / 3)
			switch {
			case owner == r.cfg.Node && s.unfeed == nil:
				if _, err := r.feedLocked(ctx, s, from); err != nil {
					r.warn.Warn("feed", "durable: feeding a subscription taken over failed; retrying", slog.String("key", s.key.String()), slog.Any("error", err))
					s.nextClaim = now
				}
			case owner != r.cfg.Node && s.unfeed != nil:
				// Another node took it over (this one stalled past its claim): it feeds it now.
				r.unfeedLocked(s)
			}
		}
	}
	if s.unfeed == nil {
		r.dropIfIdleLocked(s)
		return nil
	}
	var ends []*Binding
	if len(s.retry) > 0 {
		if ends = r.appendLocked(ctx, s, nil); s.gone {
			return ends
		}
	}
	var o Outcome
	err := step(func(ctx context.Context) (err error) { o, err = r.store.Expire(ctx, s.key, now); return err })
	switch {
	case err == nil && o.Gone, gone(err):
		return r.teardownLocked(s)
	case err == nil:
		r.handleLocked(s, o)
	default:
		r.warn.Warn("expire", "durable: expiring leases failed", slog.String("key", s.key.String()), slog.Any("error", err))
	}
	return ends
}

// stopFeeds ends every hub subscription this node feeds, as the registry stops.
func (r *Registry) stopFeeds() {
	subs := r.allSubs()
	for _, s := range subs {
		s.mu.Lock()
		if s.unfeed != nil {
			s.unfeed()
			s.unfeed = nil
			r.fed.Add(-1)
		}
		s.mu.Unlock()
	}
}

// allSubs returns the subscriptions the registry holds now, taken under its lock, for a walk
// that takes each one's own lock after letting go of the registry's.
func (r *Registry) allSubs() []*sub {
	r.mu.Lock()
	defer r.mu.Unlock()
	subs := make([]*sub, 0, len(r.subs))
	for _, s := range r.subs {
		subs = append(subs, s)
	}
	return subs
}
