package channel

// The subscription index: every live subscription, grouped by pattern, under the anchor token of
// its pattern. It is the hub's "watched tokens": a publish asks for each ancestor token of its
// channel name whether anyone watches it, and only the groups found that way are candidates.
//
// Everything here is guarded by Hub.mu unless a field says otherwise.

import (
	"sync"

	"github.com/heraldrt/herald/internal/stream"
)

// bucket holds the subscriptions anchored at one token. It is in Hub.tokens exactly while it
// holds a subscription: the last one out removes it, so a token nobody watches costs a publish
// one failed map lookup and nothing else.
type bucket struct {
	token     string
	depth     int                // segments in token: the index of this bucket in state.holders
	groups    []*group           // every group, in no order; iterated by publish
	byPattern map[Pattern]*group // the same groups by pattern, for subscribe

	// chMu guards channels. It is separate from Hub.mu because a publish adds to channels while
	// it holds Hub.mu shared.
	chMu sync.Mutex
	// channels are the channel states that name this bucket a holder (state.holders). When the
	// bucket empties, its last unsubscribe releases each of them, so a channel whose subscribers
	// have all gone is forgotten without anyone scanning every channel.
	channels map[*state]struct{}
}

// hold records that st names b a holder. The caller holds Hub.mu (shared or exclusive) and
// st.mu, and has found b in Hub.tokens, so b is not being dropped.
func (b *bucket) hold(st *state) {
	b.chMu.Lock()
	b.channels[st] = struct{}{}
	b.chMu.Unlock()
}

// unhold undoes hold, when a publish finds that no pattern in b matches st's channel any more.
// The caller holds Hub.mu shared and st.mu. b may have left the index already; its drop then
// finds st no longer naming it.
func (b *bucket) unhold(st *state) {
	b.chMu.Lock()
	delete(b.channels, st)
	b.chMu.Unlock()
}

// group is the subscriptions of one bucket with one Pattern. A publish evaluates the pattern
// once per group, not once per subscription: ten thousand connections watching "rooms/1" cost
// one comparison, then ten thousand deliveries.
type group struct {
	pat  Pattern
	b    *bucket
	i    int // index in b.groups
	subs []*subscription
}

// subscription is one Subscribe call: a subscriber, its subscription id and the group it is in.
type subscription struct {
	s  stream.Receiver // read-only
	id string          // read-only
	// skipTo, when not 0, is the offset of epoch skipEpoch up to which the subscription was
	// already given its channel's publications (on another node) when it started: those
	// still on their way here are not delivered to it. Read-only once it joins the index.
	skipTo    uint64
	skipEpoch string

	g *group // guarded by Hub.mu; nil once removed from the index
	i int    // guarded by Hub.mu; index in g.subs

	// mu is held shared around every Deliver and exclusively to end the subscription, so that
	// once unsubscribe has set live to false no Deliver is running and none will start.
	mu   sync.RWMutex
	live bool // guarded by mu
}

// deliver hands it to the subscriber over bus unless the subscription has ended, and reports
// whether it did.
func (sn *subscription) deliver(bus Bus, it *stream.Item, w *stream.Wakeups) bool {
	sn.mu.RLock()
	defer sn.mu.RUnlock()
	if !sn.live || sn.skipTo != 0 && sn.before(it) {
		return false
	}
	bus.DeliverDeferred(sn.s, sn.id, it, w)
	return true
}

// before reports whether it lies at or before where sn started: a message, or a gap that ends,
// at or before skipTo in skipEpoch. A gap reaching past it is delivered: the subscriber may
// have missed its end.
func (sn *subscription) before(it *stream.Item) bool {
	var p stream.Position
	switch {
	case it.Message != nil:
		p = it.Message.Pos
	case it.Gap != nil:
		p = it.Gap.Last
	default:
		return false
	}
	return p.Epoch == sn.skipEpoch && p.Offset <= sn.skipTo
}

// end stops deliveries to sn, waiting out one that is running. sn is already out of the index,
// so no later publish can find it.
func (sn *subscription) end() {
	sn.mu.Lock()
	sn.live = false
	sn.mu.Unlock()
}

// addLocked puts sn into the index under p and returns its bucket. The caller holds Hub.mu.
func (h *Hub) addLocked(sn *subscription, p Pattern) *bucket {
	token := p.Anchor()
	b := h.tokens[token]
	if b == nil {
		b = &bucket{
			token:     token,
			depth:     int(p.depth),
			byPattern: make(map[Pattern]*group, 1),
			channels:  make(map[*state]struct{}),
		}
		h.tokens[token] = b
	}
	g := b.byPattern[p]
	if g == nil {
		g = &group{pat: p, b: b, i: len(b.groups)}
		b.groups = append(b.groups, g)
		b.byPattern[p] = g
	}
	sn.g, sn.i = g, len(g.subs)
	g.subs = append(g.subs, sn)
	h.nsubs++
	return b
}

// removeLocked takes sn out of the index. When that empties its bucket, the bucket leaves
// Hub.tokens and removeLocked returns it, for the caller to drop once it has released Hub.mu.
// The caller holds Hub.mu.
func (h *Hub) removeLocked(sn *subscription) (emptied *bucket) {
	g := sn.g
	g.subs = swapRemove(g.subs, sn.i, func(moved *subscription, i int) { moved.i = i })
	sn.g = nil
	h.nsubs--
	if len(g.subs) > 0 {
		return nil
	}
	b := g.b
	b.groups = swapRemove(b.groups, g.i, func(moved *group, i int) { moved.i = i })
	delete(b.byPattern, g.pat)
	if len(b.groups) > 0 {
		return nil
	}
	delete(h.tokens, b.token)
	return b
}

// swapRemove removes s[i] by moving the last element into its place, telling setIndex where
// it went. It gives back memory once the slice is mostly empty, so a group that once held
// fifty thousand subscriptions does not keep their slots for ever.
func swapRemove[T any](s []*T, i int, setIndex func(*T, int)) []*T {
	last := len(s) - 1
	if i != last {
		s[i] = s[last]
		setIndex(s[i], i)
	}
	s[last] = nil
	s = s[:last]
	if cap(s) > 64 && len(s) < cap(s)/4 {
		s = append(make([]*T, 0, 2*len(s)), s...)
	}
	return s
}
