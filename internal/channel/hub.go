package channel

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/heraldrt/herald/internal/wire"
)

// Subscriber receives the publications of its subscriptions. The session implements it by
// pushing a data frame onto its connection's lanes.
type Subscriber interface {
	// Deliver hands the subscriber one publication for its subscription sub (the id it gave
	// Subscribe). It runs on the publisher's goroutine while the hub holds the channel's lock,
	// so it must not block, must not call back into the Hub, and must be safe for concurrent
	// use: publications to different channels arrive concurrently. p and p.Body are shared by
	// every subscription the publication reaches: keep them if you like, never modify them.
	Deliver(sub string, p *Publication)
}

// Publication is one publication, as the hub hands it to every subscription it reaches.
type Publication struct {
	Channel string
	Event   string // "" when the publication has none
	// Pos is the publication's place in the channel's stream: the channel's epoch on this
	// node, and its offset there.
	Pos wire.Position
	// PosText is Pos's text form, what a delivery.Frame carries as its Pos. It is computed once
	// here so that each of ten thousand deliveries does not format it again.
	PosText string
	// Body is the shared body of the message frame, from wire.AppendMessageBody. A subscriber's
	// frame is wire.AppendDataHead(dst, wire.FrameMessage, sub) followed by Body.
	Body []byte
}

// Config configures a Hub. The zero value is the default.
type Config struct {
	// NewEpoch returns the epoch of a channel stream that starts on this node: when a channel's
	// state is created, and when its offsets would pass wire.MaxSafeOffset. It must return a
	// valid epoch (1 to wire.MaxEpochBytes bytes of A-Z a-z 0-9 "._~-") that differs from every
	// earlier epoch of the same channel, and be safe for concurrent use. Default: 16 random
	// hexadecimal digits.
	NewEpoch func() string
}

// Hub is one node's channels: their offsets and epochs, the subscriptions to them, and the
// fan-out of each publication to the subscriptions it matches. See the package documentation
// for its concurrency model. The zero Hub is not usable; call New.
type Hub struct {
	newEpoch  func() string // read-only
	maxOffset uint64        // read-only: wire.MaxSafeOffset, lowered by tests

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
}

// state is one channel's stream on this node.
type state struct {
	name string // read-only

	// refs counts the callers between acquire and release: publishers, exact subscribers, and
	// the drop of a bucket that holds it. It is changed atomically, and a state leaves
	// Hub.channels only when release finds it zero with Hub.chMu held exclusively, which no
	// acquire can overlap.
	refs atomic.Int32

	// mu serializes the publishes to this channel, from assigning an offset to the last
	// delivery, so every subscriber sees them in offset order. It guards the fields below.
	mu     sync.Mutex
	epoch  string
	offset uint64 // of the last publication; 0 before the first
	// holders[k] is the bucket at this name's depth-k ancestor token (0 is the root, the last
	// is the name itself) when a subscription in it has matched a publish here, or exactly
	// subscribed here, since the bucket was created. The state lives while it has a holder.
	holders [MaxDepth + 1]*bucket
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
func New(cfg Config) *Hub {
	h := &Hub{
		newEpoch:  cfg.NewEpoch,
		maxOffset: wire.MaxSafeOffset,
		channels:  make(map[string]*state),
		tokens:    make(map[string]*bucket),
	}
	if h.newEpoch == nil {
		h.newEpoch = randomEpoch
	}
	h.targets.New = func() any { return new([]*subscription) }
	return h
}

// randomEpoch returns 16 random hexadecimal digits. An epoch needs to differ from the earlier
// epochs of its channel, not to be secret, so the runtime's generator (seeded from the OS,
// never repeating across processes) is enough: two incarnations of a channel share an epoch
// with probability 2^-64.
func randomEpoch() string {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

// Subscribe adds a subscription with id sub and pattern p for s, live when it returns, and
// returns the function that ends it. The hub does not look at sub beyond handing it back to
// Deliver; keeping ids unique per connection is the session's business.
//
// For an exact pattern, pos is the channel's position at the moment the subscription went
// live: s receives every publication after it, and none at or before it. Offset 0 means before
// the channel's first publication in that epoch. For a pattern with wildcards pos is zero:
// the subscription spans many streams, and each message carries its own position.
//
// unsubscribe ends the subscription. Once it returns, Deliver is not running for it and will
// not be called for it again. It may be called more than once, from any goroutine, but not
// from inside Deliver, nor while holding a lock that Deliver takes: it waits for a Deliver that
// is running to return.
//
// p must come from ParsePattern: Subscribe panics on the zero Pattern or a nil Subscriber.
func (h *Hub) Subscribe(s Subscriber, sub string, p Pattern) (pos wire.Position, unsubscribe func()) {
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
		return wire.Position{}, unsubscribe
	}
	// An exact subscription takes the channel's lock, so no publish is between assigning its
	// offset and collecting its subscribers while the subscription joins: every publication
	// after pos finds it, and none before does. Its bucket holds the state from now on, so
	// the epoch in pos stays the channel's while the subscription lives.
	st := h.acquire(p.glob)
	st.mu.Lock()
	defer st.mu.Unlock()
	h.mu.Lock()
	b := h.addLocked(sn, p)
	if st.holders[b.depth] != b {
		b.hold(st)
		st.holders[b.depth] = b
	}
	h.mu.Unlock()
	pos = wire.ChannelPosition(st.epoch, st.offset)
	h.release(st)
	return pos, unsubscribe
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
// and returns the publication's position. It delivers to every live subscription that matches
// before it returns, on the caller's goroutine, and never waits for a subscriber: Deliver does
// not block. What it may wait for is bounded: another publish to the same channel finishing
// its deliveries, and a Subscribe or unsubscribe finishing an index update.
//
// It returns an *Error of reason ReasonBadName or ReasonBadEvent when channel or event does not
// follow its grammar. data must be valid JSON (wire.Decode's Publish.Data is; an HTTP handler
// must check); nil is sent as null.
//
// A publication to a channel that no subscription on this node matches still gets a position,
// and the channel's state, epoch included, is then forgotten at once: see the package
// documentation.
func (h *Hub) Publish(channel, event string, data json.RawMessage) (wire.Position, error) {
	if e := checkName(channel); e != nil {
		return wire.Position{}, e
	}
	if event != "" {
		if e := checkEvent(event); e != nil {
			return wire.Position{}, e
		}
	}
	st := h.acquire(channel)
	st.mu.Lock()
	defer st.mu.Unlock()

	if st.offset >= h.maxOffset {
		// Offsets must stay exact in a JavaScript number, so the stream starts again. A
		// subscriber sees the epoch change; nothing was lost.
		st.epoch, st.offset = h.newEpoch(), 0
	}
	st.offset++
	pos := wire.ChannelPosition(st.epoch, st.offset)
	var text [32 + wire.MaxEpochBytes]byte
	p := &Publication{Channel: channel, Event: event, Pos: pos, PosText: string(pos.AppendText(text[:0]))}
	// Room for the position, the keys and the names, so the body is one allocation.
	const overhead = len(`"pos":{"epoch":"","offset":},"channel":"","event":"","data":}`) + 20
	p.Body = wire.AppendMessageBody(
		make([]byte, 0, overhead+len(st.epoch)+len(channel)+len(event)+len(data)),
		&wire.Message{Pos: pos, Channel: channel, Event: event, Data: data})

	ts := h.collect(st, channel, event)
	n := 0
	for _, sn := range *ts {
		if sn.deliver(p) {
			n++
		}
	}
	clear(*ts) // the pool must not keep subscriptions alive
	*ts = (*ts)[:0]
	h.targets.Put(ts)

	h.published.Add(1)
	h.delivered.Add(uint64(n))
	h.release(st)
	return pos, nil
}

// collect returns the subscriptions a publication to name with event reaches, in a pooled
// slice, and keeps st's holders up to date. The caller holds st.mu.
//
// It looks up each ancestor token of name once: the root, each prefix ending before a "/",
// and name itself, so at most MaxDepth+1 lookups, whatever the number of subscriptions. Only
// the groups under those tokens are candidates, and each candidate's pattern is evaluated once
// per group. Hub.mu is held shared only for this; deliveries happen after it is released.
func (h *Hub) collect(st *state, name, event string) *[]*subscription {
	ts := h.targets.Get().(*[]*subscription)
	h.mu.RLock()
	defer h.mu.RUnlock()
	hit := false
	if len(h.tokens) > 0 {
		hit = h.collectAt(st, ts, "", 0, false, name, event)
		k := 0
		for i := 0; i < len(name); i++ {
			if name[i] == '/' {
				k++
				hit = h.collectAt(st, ts, name[:i], k, false, name[i+1:], event) || hit
			}
		}
		hit = h.collectAt(st, ts, name, k+1, true, "", event) || hit
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
func (h *Hub) collectAt(st *state, ts *[]*subscription, token string, k int, at bool, below, event string) bool {
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
		if g.pat.wants(event) {
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
	epoch := h.newEpoch() // outside the lock; wasted only if another caller creates it first
	h.chMu.Lock()
	defer h.chMu.Unlock()
	if st = h.channels[name]; st == nil {
		st = &state{name: name, epoch: epoch}
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
		h.forgotten.Add(1)
	}
	h.chMu.Unlock()
}

// Head returns the position of the last publication to the channel name on this node (offset
// 0 before the first), and false when the node holds no state for it: it has no subscriber,
// and its next publication starts a new epoch. The answer may be stale by the time the caller
// reads it, unless the caller holds an exact subscription to the channel, which keeps the
// epoch.
func (h *Hub) Head(name string) (wire.Position, bool) {
	h.chMu.RLock()
	st := h.channels[name]
	h.chMu.RUnlock()
	if st == nil {
		return wire.Position{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return wire.ChannelPosition(st.epoch, st.offset), true
}

// Stats is a snapshot of a hub's gauges and counters.
type Stats struct {
	Channels      int    // channel states held
	Tokens        int    // anchor tokens with at least one subscription
	Subscriptions int    // live subscriptions
	Published     uint64 // publications, ever
	Delivered     uint64 // Deliver calls, ever: one per publication and subscription it reached
	Forgotten     uint64 // channel states forgotten, ever
}

// Stats returns a snapshot of the hub's gauges and counters. Safe for concurrent use.
func (h *Hub) Stats() Stats {
	h.chMu.RLock()
	channels := len(h.channels)
	h.chMu.RUnlock()
	h.mu.RLock()
	tokens, subs := len(h.tokens), h.nsubs
	h.mu.RUnlock()
	return Stats{
		Channels:      channels,
		Tokens:        tokens,
		Subscriptions: subs,
		Published:     h.published.Load(),
		Delivered:     h.delivered.Load(),
		Forgotten:     h.forgotten.Load(),
	}
}
