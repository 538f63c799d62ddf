package storetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/stream"
)

// NewPresenceNodes returns two stores over one fresh backend, each as one node would hold it
// (for Redis, two clients on one key prefix), sharing nothing with other subtests'.
type NewPresenceNodes func(t *testing.T) (a, b presence.Store)

// RunPresenceNodes runs presence.Presence on two nodes over one shared store: a join or leave
// one node makes reaches the other's subscribers through a Relay standing for the server's
// transport, only a channel's sweep leader announces expiries, a leader that takes over
// announces the leaves of the members gone with the dead one, and a member gone while its node
// stalled joins again, relayed. Node a is "n1" and leads wherever it claims; both share a
// clock, so nothing sleeps.
func RunPresenceNodes(t *testing.T, newStores NewPresenceNodes) {
	const ttl = 3 * time.Second
	ctx := context.Background()

	t.Run("EventsCrossNodes", func(t *testing.T) {
		n := newNodes(t, newStores, ttl)
		wa, wb := n.watch(t, n.a, "room"), n.watch(t, n.b, "room")
		wa.want(t, "roster:")
		wb.want(t, "roster:")
		n.track(t, n.a, "room", "x", `{"s":1}`)
		n.track(t, n.b, "room", "y", "")
		if ok, err := n.a.Untrack(ctx, "room", "x"); !ok || err != nil {
			t.Fatalf("Untrack = %v, %v", ok, err)
		}
		wa.want(t, `join:x{"s":1}`, "join:y", "leave:x")
		wb.want(t, `join:x{"s":1}`, "join:y", "leave:x")
		// Each node relayed its own events, and none of those it applied.
		n.relayed(t, n.la, `room join:x{"s":1}`, "room leave:x")
		n.relayed(t, n.lb, "room join:y")
		// A watcher's roster on either node is the shared store's.
		late := n.watch(t, n.a, "room")
		late.want(t, "roster:y")
	})

	t.Run("OnlyTheLeaderAnnouncesExpiry", func(t *testing.T) {
		n := newNodes(t, newStores, ttl)
		wa, wb := n.watch(t, n.a, "room"), n.watch(t, n.b, "room")
		n.track(t, n.b, "room", "y", "")
		// A member of a third node that stopped: in the store, renewed by nobody.
		if _, err := n.sa.Track(ctx, "room", presence.Member{ID: "z", Subject: "u-z"}, n.clock.Now(), ttl, 10); err != nil {
			t.Fatal(err)
		}
		wa.want(t, "roster:", "join:y")
		wb.want(t, "roster:", "join:y")
		for range 4 {
			n.clock.add(ttl / 3)
			n.b.Sweep(ctx) // b first: once a has claimed, b follows, and must not expire z
			n.a.Sweep(ctx)
		}
		wa.want(t, "leave:z")
		wb.want(t, "leave:z")
		n.relayed(t, n.la, "room leave:z")
		n.relayed(t, n.lb, "room join:y")
	})

	t.Run("TakeoverAnnouncesTheDeadLeadersMembers", func(t *testing.T) {
		n := newNodes(t, newStores, ttl)
		wb := n.watch(t, n.b, "room")
		n.track(t, n.a, "room", "a1", "")
		n.track(t, n.a, "room", "a2", "")
		n.track(t, n.b, "room", "b1", "")
		wb.want(t, "roster:", "join:a1", "join:a2", "join:b1")
		n.sweep(ctx) // a leads and writes a1 a2 b1 on its lease; b follows and records it
		// a dies: a2's untrack reached the store, its leave never left the node; a1 stays,
		// renewed by nobody.
		n.la.cut()
		if ok, err := n.a.Untrack(ctx, "room", "a2"); !ok || err != nil {
			t.Fatalf("Untrack = %v, %v", ok, err)
		}
		wb.want(t)
		// b follows while a's claim lives, then takes over: a1 expired with the claim, a2 is
		// named by the dead leader's roster and no longer stored.
		for range 3 {
			n.clock.add(ttl / 3)
			n.b.Sweep(ctx)
		}
		wb.want(t, "leave:a1", "leave:a2")
		n.relayed(t, n.lb, "room join:b1", "room leave:a1", "room leave:a2")
		for range 3 {
			n.clock.add(ttl / 3)
			n.b.Sweep(ctx)
		}
		wb.want(t)
		if ms := n.members(t, "room"); len(ms) != 1 || ms[0].ID != "b1" {
			t.Fatalf("members = %v; want b1, renewed by its node", ms)
		}
	})

	t.Run("StoppedNodeHandsOverAtOnce", func(t *testing.T) {
		n := newNodes(t, newStores, ttl)
		wb := n.watch(t, n.b, "room")
		n.watch(t, n.a, "room")
		n.track(t, n.b, "room", "b1", "")
		n.sweep(ctx)
		// a stops: Run releases its claims as it ends, so b leads at its next pass, and has
		// nothing to announce.
		stop, cancel := context.WithCancel(ctx)
		cancel()
		n.a.Run(stop)
		n.clock.add(time.Millisecond)
		n.b.Sweep(ctx)
		wb.want(t, "roster:", "join:b1")
		if _, err := n.sa.Track(ctx, "room", presence.Member{ID: "z"}, n.clock.Now(), time.Millisecond, 10); err != nil {
			t.Fatal(err)
		}
		n.clock.add(time.Second)
		n.b.Sweep(ctx) // well within a's claim, had it not let go
		wb.want(t, "leave:z")
	})

	t.Run("GoneMemberJoinsAgainRelayed", func(t *testing.T) {
		n := newNodes(t, newStores, ttl)
		wb := n.watch(t, n.b, "room")
		n.track(t, n.a, "room", "x", `{"k":1}`)
		wb.want(t, "roster:", `join:x{"k":1}`)
		n.sweep(ctx)
		// a stalls past the TTL: its member and its claim expire; b leads and announces x's
		// leave; a's next heartbeat finds x gone, is told to join again, and does, relayed.
		n.clock.add(ttl + time.Second)
		if err := n.a.Heartbeat(ctx, "room", "x"); err != presence.ErrGone {
			t.Fatalf("Heartbeat after the TTL: %v; want ErrGone (join again)", err)
		}
		n.b.Sweep(ctx)
		n.a.Sweep(ctx)
		wb.want(t, "leave:x", `join:x{"k":1}`)
		n.relayed(t, n.la, `room join:x{"k":1}`, `room join:x{"k":1}`)
		if ms := n.members(t, "room"); len(ms) != 1 || ms[0].ID != "x" {
			t.Fatalf("members = %v; want x again", ms)
		}
	})

	t.Run("EmptyChannelForgottenEverywhere", func(t *testing.T) {
		n := newNodes(t, newStores, ttl)
		wa := n.watch(t, n.a, "room")
		n.track(t, n.b, "room", "y", "")
		n.sweep(ctx)
		if _, err := n.b.Untrack(ctx, "room", "y"); err != nil {
			t.Fatal(err)
		}
		wa.want(t, "roster:", "join:y", "leave:y")
		wa.unwatch()
		n.sweep(ctx) // neither node holds anything in room: both let their claims go
		for name, p := range map[string]*presence.Presence{"a": n.a, "b": n.b} {
			if c := p.Channels(); c != 0 {
				t.Errorf("node %s keeps %d channels; want 0", name, c)
			}
		}
		for name, s := range map[string]presence.Store{"a": n.sa, "b": n.sb} {
			if c, ok := s.(ChannelCounter); ok && c.Channels() != 0 {
				t.Errorf("store %s holds %d channels; want 0", name, c.Channels())
			}
		}
	})
}

// nodes is two presence nodes over one store, each relaying to the other.
type nodes struct {
	clock  *fakeClock
	sa, sb presence.Store
	a, b   *presence.Presence
	la, lb *link
}

func newNodes(t *testing.T, newStores NewPresenceNodes, ttl time.Duration) *nodes {
	t.Helper()
	n := &nodes{clock: &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, la: &link{}, lb: &link{}}
	n.sa, n.sb = newStores(t)
	var err error
	if n.a, err = presence.New(presence.Config{TTL: ttl, Node: "n1", Relay: n.la, Now: n.clock.Now}, n.sa); err != nil {
		t.Fatal(err)
	}
	if n.b, err = presence.New(presence.Config{TTL: ttl, Node: "n2", Relay: n.lb, Now: n.clock.Now}, n.sb); err != nil {
		t.Fatal(err)
	}
	n.la.to, n.lb.to = n.b, n.a
	return n
}

func (n *nodes) sweep(ctx context.Context) {
	n.a.Sweep(ctx)
	n.b.Sweep(ctx)
}

func (n *nodes) track(t *testing.T, p *presence.Presence, channel, id, meta string) {
	t.Helper()
	m := presence.Member{ID: id, Subject: "u-" + id}
	if meta != "" {
		m.Meta = []byte(meta)
	}
	if err := p.Track(context.Background(), channel, m); err != nil {
		t.Fatalf("Track(%s, %s): %v", channel, id, err)
	}
}

func (n *nodes) members(t *testing.T, channel string) []presence.Member {
	t.Helper()
	ms, err := n.sb.Members(context.Background(), channel, n.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func (n *nodes) watch(t *testing.T, p *presence.Presence, channel string) *watchLog {
	t.Helper()
	w := &watchLog{}
	unwatch, err := p.Watch(context.Background(), channel, w, "s")
	if err != nil {
		t.Fatalf("Watch(%s): %v", channel, err)
	}
	w.unwatch = unwatch
	return w
}

func (n *nodes) relayed(t *testing.T, l *link, want ...string) {
	t.Helper()
	if got := l.take(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("relayed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// link is a Relay standing for the server's transport: it hands each event to the other
// node's Apply at once, until cut (the node died with what it had queued).
type link struct {
	to *presence.Presence

	mu   sync.Mutex
	down bool
	sent []string
}

func (l *link) Relay(channel string, ev presence.Event) {
	l.mu.Lock()
	if l.down {
		l.mu.Unlock()
		return
	}
	s := channel + " " + string(ev.Kind) + ":" + ev.Member.ID + string(ev.Member.Meta)
	l.sent = append(l.sent, s)
	l.mu.Unlock()
	l.to.Apply(channel, ev)
}

func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
}

func (l *link) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sent
	l.sent = nil
	return s
}

// watchLog is a presence subscriber that writes down what it is pushed, as "kind:ids".
type watchLog struct {
	unwatch func()

	mu  sync.Mutex
	got []string
}

func (w *watchLog) Push(_ string, it *stream.Item) {
	p := it.Presence
	ids := make([]string, len(p.Members))
	for i, m := range p.Members {
		ids[i] = m.ID + string(m.Meta)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, string(p.Kind)+":"+strings.Join(ids, ","))
}

func (w *watchLog) want(t *testing.T, want ...string) {
	t.Helper()
	w.mu.Lock()
	got := w.got
	w.got = nil
	w.mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
