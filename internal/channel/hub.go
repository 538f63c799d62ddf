package channel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Bus carries the hub's messages to the subscriptions they reach: bus.Memory on one node.
// A channel's publications are handed to it from one fan-out queue, in offset order, so each
// subscription gets them in that order.
type Bus interface {
	// DeliverDeferred hands it to subscription sub of r, after everything delivered to r's
	// sub before, and may defer waking r's writer to w, which the hub wakes once the fan-out
	// is done. It must not block on the receiver.
	DeliverDeferred(r stream.Receiver, sub string, it *stream.Item, w *stream.Wakeups)
}

// Config configures a Hub.
type Config struct {
	// Bus carries messages to subscribers. Required.
	Bus Bus
	// Broker assigns channels' positions. Default: a MemoryBroker (a History), for one
	// node. A Broker that is a History keeps each channel's last publications too, and a
	// subscription that resumes is replayed what it missed from them (SubscribeFrom).
	Broker Broker
	// History bounds each channel's history in the default MemoryBroker; the zero value is the
	// default, and a negative History.Size keeps none. A Broker given above has its own.
	History HistoryConfig

	// Shards is the number of fan-out queues, each with a goroutine that hands its
	// publications to the bus. A channel always uses the queue its name hashes to. Default:
	// one per processor (GOMAXPROCS), at least 2.
	Shards int
	// QueueLen bounds each fan-out queue: the most publications waiting to be handed on, or
	// being handed on. Default DefaultQueueLen.
	QueueLen int
	// QueueDeliveries bounds each fan-out queue's deliveries: a publication waits while the
	// publications queued reach this many subscriptions in all, so the queue may pass it by the
	// publications admitted just before, one per publisher at most. Default
	// DefaultQueueDeliveries.
	QueueDeliveries int
	// QueueBytes bounds each fan-out queue's bytes: the publications' data, names and a fixed
	// cost each. Default DefaultQueueBytes.
	QueueBytes int
	// QueueWait is how long Publish waits for room in a full queue before it refuses the
	// publication with a *BusyError: the overflow rule is wait, then refuse. Default
	// DefaultQueueWait.
	QueueWait time.Duration

	// Remote, when set, carries every publication to the other nodes sharing Broker, and
	// makes the hub hand a channel's publications on in offset order, its own and those
	// Deliver brings (see Remote). Nil on one node.
	Remote Remote
	// OrderWait is how long a publication waits for an earlier offset to arrive from another
	// node before the earlier one is reported lost. Default DefaultOrderWait. Used only with
	// Remote.
	OrderWait time.Duration
}

// Hub is one node's channels: their offsets and epochs, the subscriptions to them, and the
// fan-out of each publication to the subscriptions it matches. See the package documentation
// for its concurrency model. The zero Hub is not usable; call New.
type Hub struct {
	bus    Bus      // read-only
	broker Broker   // read-only
	hist   History  // read-only: broker when it is a History, else nil
	cfg    Config   // read-only, defaults applied
	queues []*queue // read-only: the fan-out queues, one per shard

	// chMu guards the membership of channels; lookups take it shared. state.refs is decided
	// under it held exclusively: see release.
	chMu     sync.RWMutex
	channels map[string]*state

	// mu guards the subscription index: tokens, nsubs, every bucket's groups and byPattern,
	// every group's subs, and every subscription's g and i.
	mu     sync.RWMutex
	tokens map[string]*bucket
	nsubs  int

	// targets pools the slices a publish collects its matching subscriptions into, so a
	// publish that reaches fifty thousand of them does not allocate a slice that long.
	targets sync.Pool

	published, delivered, forgotten atomic.Uint64
	// late counts publications from other nodes that arrived after their offset was handed
	// on or reported lost; gaps, the holes reported lost (both with a Remote only).
	late, gaps atomic.Uint64
}

// state is one channel on this node: the lock that orders its publications, and what holds
// it. Its stream's position is the broker's.
type state struct {
	name string // read-only

	// refs counts the callers between acquire and release: publishers, exact subscribers, and
	// the drop of a bucket that holds it. It is changed atomically, and a state leaves
	// Hub.channels only when release finds it zero with Hub.chMu held exclusively, which no
	// acquire can overlap.
	refs atomic.Int32

	// mu serializes the publishes to this channel, from asking the broker for a position to
	// the last delivery, so every subscriber sees them in offset order. It guards holders.
	mu sync.Mutex
	// holders[k] is the bucket at this name's depth-k ancestor token (0 is the root, the last
	// is the name itself) when a subscription in it has matched a publish here, or exactly
	// subscribed here, since the bucket was created. The state lives while it has a holder.
	holders [MaxDepth + 1]*bucket
	// seq orders the channel's publications across nodes (with a Remote only; see Remote).
	seq sequence
}

func (st *state) heldLocked() bool {
	for _, b := range st.holders {
		if b != nil {
			return true
		}
	}
	return false
}

// New returns an empty hub. It starts no goroutine and needs no closing.
func New(cfg Config) (*Hub, error) {
	if cfg.Bus == nil {
		return nil, errors.New("channel: no bus")
	}
	if err := cfg.History.Validate(); err != nil {
		return nil, err
	}
	if cfg.Broker == nil {
		cfg.Broker = NewMemoryBroker(MemoryBrokerConfig{History: cfg.History})
	}
	if cfg.Shards <= 0 {
		cfg.Shards = defaultShards()
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if cfg.QueueDeliveries <= 0 {
		cfg.QueueDeliveries = DefaultQueueDeliveries
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = DefaultQueueBytes
	}
	if cfg.QueueWait <= 0 {
		cfg.QueueWait = DefaultQueueWait
	}
	if cfg.OrderWait <= 0 {
		cfg.OrderWait = DefaultOrderWait
	}
	h := &Hub{
		bus:      cfg.Bus,
		broker:   cfg.Broker,
		hist:     history(cfg.Broker),
		cfg:      cfg,
		channels: make(map[string]*state),
		tokens:   make(map[string]*bucket),
	}
	h.targets.New = func() any { return new([]*subscription) }
	h.queues = make([]*queue, cfg.Shards)
	for i := range h.queues {
		h.queues[i] = newQueue(h)
	}
	return h, nil
}

// Close stops the hub's fan-out: Publish refuses with ErrHubClosed from now on, and Close
// returns once the publications already queued have been handed to the bus and the fan-out
// goroutines have returned. Subscriptions are not touched. Safe to call more than once.
func (h *Hub) Close() {
	for _, q := range h.queues {
		q.close()
	}
	for _, q := range h.queues {
		<-q.stopped
	}
}

// Flush waits until every publication whose Publish returned before Flush was called has been
// handed to the bus, or ctx ends.
func (h *Hub) Flush(ctx context.Context) error {
	for _, q := range h.queues {
		if err := q.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Subscribe adds a subscription with id sub and pattern p for s, live when it returns, and
// returns the function that ends it. The hub does not look at sub beyond handing it back with
// each item; keeping ids unique per connection is the session's business.
//
// For an exact pattern, pos is the channel's position at the moment the subscription went
// live: s receives every publication after it, and none at or before it. Offset 0 means before
// the channel's first publication in that epoch. For a pattern with wildcards pos is zero:
// the subscription spans many streams, and each message carries its own position.
//
// unsubscribe ends the subscription. Once it returns, no delivery to it is running and none
// will start. It may be called more than once, from any goroutine, but not from inside Push,
// nor while holding a lock that a delivery takes: it waits for a delivery that is running to
// return. err is the broker's, when it cannot say an exact channel's position.
//
// p must come from ParsePattern: Subscribe panics on the zero Pattern or a nil receiver.
func (h *Hub) Subscribe(s stream.Receiver, sub string, p Pattern) (pos stream.Position, unsubscribe func(), err error) {
	start, unsubscribe, err := h.SubscribeFrom(s, sub, p, stream.Position{})
	return start.Pos, unsubscribe, err
}

// SubscribeFrom is Subscribe for a subscription that resumes after from, the position of the
// last item of the channel its client received (zero: it does not resume). For an exact
// pattern, the Start it returns says where live delivery starts and what to hand the
// subscription first: the publications after from, up to Start.Pos, that its event filter
// passes, when the channel's history still holds them all, or else one gap for them
// (stream.ReasonHistoryExpired, stream.ReasonStreamReset). The caller delivers Start.Replay
// ahead of everything s receives for sub; the hub's deliveries start after Start.Pos, so
// replay and live items meet with no gap and no duplicate.
//
// from is the caller's to check: a from of the channel's epoch past its head (from a client
// bug, or another deployment) comes back with Start.Pos before it and no replay, and should
// be refused. A pattern with wildcards spans channels whose positions are unrelated, so from
// means nothing to it and is ignored: Start is zero.
func (h *Hub) SubscribeFrom(s stream.Receiver, sub string, p Pattern, from stream.Position) (start Start, unsubscribe func(), err error) {
	if p.IsZero() {
		panic("channel: Subscribe with the zero Pattern; build one with ParsePattern")
	}
	if s == nil {
		panic("channel: Subscribe with a nil Subscriber")
	}
	sn := &subscription{s: s, id: sub, live: true}
	unsubscribe = sync.OnceFunc(func() { h.unsubscribe(sn) })
	if !p.exact {
		h.mu.Lock()
		h.addLocked(sn, p)
		h.mu.Unlock()
		return Start{}, unsubscribe, nil
	}
	// An exact subscription takes the channel's lock, so no publish is between assigning its
	// offset and collecting its subscribers while the subscription reads the history and
	// joins: every publication after the position it starts at finds it, none before does,
	// and the history holds every one up to it. Its bucket holds the state from now on, so
	// the epoch stays the channel's while the subscription lives.
	st := h.acquire(p.glob)
	st.mu.Lock()
	defer st.mu.Unlock()
	defer h.release(st)
	if start, err = h.startLocked(st, sn, p, from); err != nil {
		return Start{}, nil, err
	}
	h.mu.Lock()
	b := h.addLocked(sn, p)
	if st.holders[b.depth] != b {
		b.hold(st)
		st.holders[b.depth] = b
	}
	h.mu.Unlock()
	return start, unsubscribe, nil
}

// unsubscribe takes sn out of the index, waits out a Deliver to it that is running, and when
// that emptied its bucket, releases the channels the bucket held.
func (h *Hub) unsubscribe(sn *subscription) {
	h.mu.Lock()
	emptied := h.removeLocked(sn)
	h.mu.Unlock()
	sn.end()
	if emptied != nil {
		h.drop(emptied)
	}
}

// drop releases the channel states that name b, which has left the index, as a holder. Each
// one that has no other holder and no caller is forgotten.
func (h *Hub) drop(b *bucket) {
	// No publish can add to b.channels now: it would have to find b in Hub.tokens.
	b.chMu.Lock()
	held := b.channels
	b.channels = nil
	b.chMu.Unlock()
	for st := range held {
		// st is normally still held by b, so still in Hub.channels and safe to count in. It
		// may instead have been let go since, by a publish no pattern matched or by a newer
		// bucket's drop, and forgotten: then nothing else reaches it, and release's identity
		// check makes this visit harmless.
		st.refs.Add(1)
		st.mu.Lock()
		if st.holders[b.depth] == b {
			st.holders[b.depth] = nil
		}
		h.release(st)
		st.mu.Unlock()
	}
}

// Publish publishes data to the channel named channel, with event name event ("" for none),
// and returns the publication's position. It assigns the position, collects the live
// subscriptions that match, and queues the publication on its channel's fan-out queue, which
// hands it to each of them after every earlier publication to the channel: Publish returns
// without waiting for the deliveries, and never waits for a subscriber. What it may wait for
// is bounded: room in a full fan-out queue, up to Config.QueueWait (then it returns a
// *BusyError, and the publication has no position), another publish to the same channel
// queueing, and a Subscribe or unsubscribe finishing an index update. A subscription that ends
// after Publish returns may still not receive it; one that ends before unsubscribe returns
// receives nothing more.
//
// It returns an *Error of reason ReasonBadName or ReasonBadEvent when channel or event does not
// follow its grammar, and ErrHubClosed once Close has begun. data must be valid JSON
// (wire.Decode's Publish.Data is; an HTTP handler must check); nil is sent as null.
//
// A publication to a channel that no subscription on this node matches still gets a position
// (and a place in the channel's history, with a History), and the channel's state is then
// forgotten at once; its epoch with it unless the history keeps it: see the package
// documentation.
func (h *Hub) Publish(channel, event string, data json.RawMessage) (stream.Position, error) {
	if e := checkName(channel); e != nil {
		return stream.Position{}, e
	}
	if event != "" {
		if e := checkEvent(event); e != nil {
			return stream.Position{}, e
		}
	}
	// Room first, outside the channel's lock: a publish waiting for it holds up no Subscribe,
	// and one refused has taken no position.
	q := h.shard(channel)
	cost := jobBytes + len(channel) + len(event) + len(data)
	if err := q.reserve(channel, cost); err != nil {
		return stream.Position{}, err
	}
	st := h.acquire(channel)
	st.mu.Lock()
	defer st.mu.Unlock()
	defer h.release(st)

	// With a History the broker keeps the publication as it takes its position, and makes
	// its item; without one the item is made only when someone receives it.
	var (
		it  *stream.Item
		pos stream.Position
		err error
	)
	if h.hist != nil {
		if it, err = h.hist.Append(channel, event, data); err == nil {
			pos = it.Message.Pos
		}
	} else {
		pos, err = h.broker.Next(channel)
	}
	if err != nil {
		q.unreserve(cost)
		return stream.Position{}, fmt.Errorf("%w: %w", ErrBroker, err)
	}
	h.published.Add(1)
	if h.cfg.Remote != nil {
		if it == nil {
			it = stream.NewMessage(&stream.Message{Pos: pos, Channel: channel, Event: event, Data: data})
		}
		h.cfg.Remote.Forward(it.Message)
		h.sequenceLocked(st, q, it, cost)
		return pos, nil
	}
	ts := h.collect(st, channel, event, false)
	if len(*ts) == 0 {
		q.unreserve(cost)
		h.targets.Put(ts)
		return pos, nil
	}
	if it == nil {
		it = stream.NewMessage(&stream.Message{Pos: pos, Channel: channel, Event: event, Data: data})
	}
	// Queued under st.mu: the queue then holds the channel's publications in offset order.
	q.push(job{it: it, subs: ts, bytes: cost}, cost)
	return pos, nil
}

// collect returns the subscriptions a publication to name with event reaches, in a pooled
// slice, and keeps st's holders up to date. The caller holds st.mu.
//
// It looks up each ancestor token of name once: the root, each prefix ending before a "/",
// and name itself, so at most MaxDepth+1 lookups, whatever the number of subscriptions. Only
// the groups under those tokens are candidates, and each candidate's pattern is evaluated once
// per group. Hub.mu is held shared only for this; deliveries happen after it is released.
func (h *Hub) collect(st *state, name, event string, anyEvent bool) *[]*subscription {
	ts := h.targets.Get().(*[]*subscription)
	h.mu.RLock()
	defer h.mu.RUnlock()
	hit := false
	if len(h.tokens) > 0 {
		hit = h.collectAt(st, ts, "", 0, false, name, event, anyEvent)
		k := 0
		for i := 0; i < len(name); i++ {
			if name[i] == '/' {
				k++
				hit = h.collectAt(st, ts, name[:i], k, false, name[i+1:], event, anyEvent) || hit
			}
		}
		hit = h.collectAt(st, ts, name, k+1, true, "", event, anyEvent) || hit
	}
	if !hit {
		// No subscription's pattern matches the channel any more, whatever the event: the
		// subscriptions that held it have gone, though their tokens are still watched. Nobody
		// has a stream of it to keep, so let go of it now rather than when those tokens empty.
		for k, b := range st.holders {
			if b != nil {
				b.unhold(st)
				st.holders[k] = nil
			}
		}
	}
	return ts
}

// collectAt adds to ts the subscriptions anchored at token, the depth-k ancestor of the
// published name (at when it is the name itself; below is the rest of the name under it),
// whose pattern and event filter match. It reports whether any pattern there matches the name,
// whatever the event: a subscription holds a channel whose publications it filters out by
// event, so the channel's epoch lasts for it too.
func (h *Hub) collectAt(st *state, ts *[]*subscription, token string, k int, at bool, below, event string, anyEvent bool) bool {
	b := h.tokens[token]
	if b == nil {
		return false
	}
	hit := false
	for _, g := range b.groups {
		if !g.pat.matchAt(at, below) {
			continue
		}
		hit = true
		if anyEvent || g.pat.wants(event) {
			*ts = append(*ts, g.subs...)
		}
	}
	if hit && st.holders[k] != b {
		b.hold(st)
		st.holders[k] = b
	}
	return hit
}

// acquire returns the state of the channel name, creating it with a new epoch if this node
// has none, and counts the caller in its refs. The caller must release it.
func (h *Hub) acquire(name string) *state {
	h.chMu.RLock()
	st := h.channels[name]
	if st != nil {
		st.refs.Add(1)
	}
	h.chMu.RUnlock()
	if st != nil {
		return st
	}
	h.chMu.Lock()
	defer h.chMu.Unlock()
	if st = h.channels[name]; st == nil {
		st = &state{name: name}
		h.channels[name] = st
	}
	st.refs.Add(1)
	return st
}

// release ends the caller's acquire of st, forgetting st when it has no holder and no other
// caller. The caller holds st.mu.
func (h *Hub) release(st *state) {
	if st.heldLocked() {
		st.refs.Add(-1)
		return
	}
	h.chMu.Lock()
	// The identity check matters for a state that drop reaches after it was already
	// forgotten: its name may belong to a newer state by now.
	if st.refs.Add(-1) == 0 && h.channels[st.name] == st {
		delete(h.channels, st.name)
		st.dropHeldLocked(h.shard(st.name))
		// Nobody on this node holds the channel's stream: its next publication starts a new
		// epoch. The broker forgets it under chMu, so no new state for the name can ask it
		// for a position first.
		h.broker.Forget(st.name)
		h.forgotten.Add(1)
	}
	h.chMu.Unlock()
}

// Head returns the position of the last publication to the channel name on this node (offset
// 0 before the first), and false when the node holds no state for it: it has no subscriber,
// and its next publication starts a new epoch unless the channel's history keeps it. The
// answer may be stale by the time the caller reads it, unless the caller holds an exact
// subscription to the channel, which keeps the epoch.
func (h *Hub) Head(name string) (stream.Position, bool) {
	h.chMu.RLock()
	st := h.channels[name]
	h.chMu.RUnlock()
	if st == nil {
		return stream.Position{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	pos, err := h.broker.Head(name)
	return pos, err == nil
}

// Stats is a snapshot of a hub's gauges and counters.
type Stats struct {
	Channels      int    // channel states held
	Tokens        int    // anchor tokens with at least one subscription
	Subscriptions int    // live subscriptions
	Published     uint64 // publications, ever
	Delivered     uint64 // Deliver calls, ever: one per publication and subscription it reached
	Forgotten     uint64 // channel states forgotten, ever
	Queued        int    // publications in the fan-out queues: waiting, being handed on, or about to be queued
	Refused       uint64 // publications refused because their fan-out queue stayed full, ever
	// With a Remote: publications from other nodes that came after their offset was handed on
	// or reported lost (dropped), and holes reported lost (each a gap to the channel's
	// subscribers), ever.
	Late, Gaps uint64
}

// Stats returns a snapshot of the hub's gauges and counters. Safe for concurrent use.
func (h *Hub) Stats() Stats {
	h.chMu.RLock()
	channels := len(h.channels)
	h.chMu.RUnlock()
	h.mu.RLock()
	tokens, subs := len(h.tokens), h.nsubs
	h.mu.RUnlock()
	queued, refused := 0, uint64(0)
	for _, q := range h.queues {
		q.mu.Lock()
		queued += q.n
		refused += q.refused
		q.mu.Unlock()
	}
	return Stats{
		Queued:        queued,
		Refused:       refused,
		Late:          h.late.Load(),
		Gaps:          h.gaps.Load(),
		Channels:      channels,
		Tokens:        tokens,
		Subscriptions: subs,
		Published:     h.published.Load(),
		Delivered:     h.delivered.Load(),
		Forgotten:     h.forgotten.Load(),
	}
}
