package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/stream"
)

func TestNewRequires(t *testing.T) {
	w := newWorld(t)
	full := Config{Node: "A", Interest: w.store, Transport: w.tr, Hub: &fakeHub{calls: w.calls}}
	for name, edit := range map[string]func(*Config){
		"node":      func(c *Config) { c.Node = "" },
		"interest":  func(c *Config) { c.Interest = nil },
		"transport": func(c *Config) { c.Transport = nil },
		"hub":       func(c *Config) { c.Hub = nil },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := full
			edit(&cfg)
			if _, err := New(cfg); err == nil {
				t.Fatal("New took a Config without it")
			}
		})
	}
	n, err := New(full)
	if err != nil {
		t.Fatalf("New without Tables and Presence: %v", err)
	}
	if n.ID() != "A" {
		t.Fatalf("ID() = %q, want A", n.ID())
	}
}

// decodeAll decodes the publications in payloads.
func decodeAll(t *testing.T, payloads [][]byte) []*stream.Message {
	t.Helper()
	var out []*stream.Message
	for _, b := range payloads {
		if len(b) == 0 || b[0] != kindMessage {
			t.Fatalf("payload %q is not a publication", b)
		}
		m, err := decodeMessage(b[1:])
		if err != nil {
			t.Fatalf("payload %q: %v", b, err)
		}
		out = append(out, m)
	}
	return out
}

func TestForwardOncePerNode(t *testing.T) {
	w := newWorld(t)
	a, b, c := w.node(t, "A", nil), w.node(t, "B", nil), w.node(t, "C", nil)
	run(t, a.Node)
	// B holds the channel three ways: exactly, by a pattern anchored in its namespace, and by
	// one anchored at the root.
	watchChannel(t, b.Node, "a/b")
	watchChannel(t, b.Node, "a/*")
	watchChannel(t, b.Node, "**")
	watchChannel(t, a.Node, "a/b")   // the producer itself: served by its own hub
	watchChannel(t, c.Node, "x/y")   // another namespace
	watchChannel(t, c.Node, "a/b/*") // below the channel, not it

	m1, m2 := message("a/b", 1, `{"n":1}`), message("a/b", 2, `{"n":2}`)
	a.Forward(m1)
	a.Forward(m2)
	routed(t, a.Node)

	if diff := cmp.Diff([]*stream.Message{m1, m2}, decodeAll(t, w.tr.to("B"))); diff != "" {
		t.Errorf("sent to B (-want +got):\n%s", diff)
	}
	for _, node := range []string{"A", "C"} {
		if got := w.tr.to(node); len(got) != 0 {
			t.Errorf("sent %d payloads to %s, which holds nothing the publications match", len(got), node)
		}
	}
	if s := a.Stats(); s.Sent[KindChannel] != 2 || s.Dropped[KindChannel] != 0 {
		t.Errorf("stats: sent %d, dropped %d; want 2, 0", s.Sent[KindChannel], s.Dropped[KindChannel])
	}
}

func TestForwardWithoutInterest(t *testing.T) {
	w := newWorld(t)
	a := w.node(t, "A", nil)
	w.node(t, "B", nil)
	run(t, a.Node)
	a.Forward(message("a/b", 1, `1`))
	a.Relay("a/b", stream.PresenceJoin, stream.Member{ID: "m"})
	routed(t, a.Node)
	if n := w.tr.total(); n != 0 {
		t.Fatalf("sent %d payloads with no interest anywhere, want 0", n)
	}
}

func TestReleaseRemovesInterest(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(t, "A", nil), w.node(t, "B", nil)
	run(t, a.Node)
	exact, pattern := watchChannel(t, b.Node, "a/b"), watchChannel(t, b.Node, "a/*")

	a.Forward(message("a/b", 1, `1`))
	routed(t, a.Node)
	if n := len(w.tr.to("B")); n != 1 {
		t.Fatalf("sent %d payloads to B, want 1", n)
	}

	exact()
	pattern()
	exact() // a second release changes nothing
	if rows := rowsOf(t, w.store, "c:a", "x:a/b", "p:a"); len(rows) != 0 {
		t.Fatalf("rows after release: %v, want none", rows)
	}
	a.Forward(message("a/b", 2, `2`))
	routed(t, a.Node)
	if n := len(w.tr.to("B")); n != 1 {
		t.Fatalf("sent %d payloads to B, want still 1: it released its interest", n)
	}
}

func TestWatchRefusals(t *testing.T) {
	w := newWorld(t)
	s, err := newLimitedStore(1)
	if err != nil {
		t.Fatal(err)
	}
	b := w.node(t, "B", func(c *Config) { c.Interest = s })
	if _, err := b.Watch(context.Background(), "c:a", "x:a", "alice"); err != nil {
		t.Fatal(err)
	}
	_, err = b.Watch(context.Background(), "c:a", "x:a/b", "alice")
	if fe := (*fault.Error)(nil); !errors.As(err, &fe) || fe.Code != fault.CodeTooManySubscriptions {
		t.Fatalf("Watch past the identity's limit: %v, want too_many_subscriptions", err)
	}
	// Anonymous connections are not one identity: each subscription counts alone, so they
	// do not share one budget across the cluster.
	for i := 0; i < 3; i++ {
		if _, err := b.Watch(context.Background(), "c:a", "x:a", ""); err != nil {
			t.Fatalf("anonymous subscription %d under a limit of 1 per identity: %v", i+1, err)
		}
	}
}

// TestRowsCache checks that a batch probes each owner, and reads the rows of watched tokens
// again only when the owner's generation moved.
func TestRowsCache(t *testing.T) {
	w := newWorld(t)
	a, b, c := w.node(t, "A", nil), w.node(t, "B", nil), w.node(t, "C", nil)
	run(t, a.Node)
	watchChannel(t, b.Node, "a/b")
	publish := func(offset uint64) {
		t.Helper()
		a.Forward(message("a/b", offset, `1`))
		routed(t, a.Node)
	}

	publish(1)
	first := a.Stats().Lookups
	if first != 1 {
		t.Fatalf("%d lookups for the first publication, want 1: the namespace's watched token (the root owner has none)", first)
	}
	publish(2)
	publish(3)
	if got := a.Stats().Lookups; got != first {
		t.Fatalf("%d lookups after two more publications, want still %d: no generation moved", got, first)
	}

	// A new subscription moves its owner's generation: the next publication reads that
	// owner's rows again, and reaches the new node.
	release := watchChannel(t, c.Node, "a/*")
	publish(4)
	if got := a.Stats().Lookups; got != first+1 {
		t.Fatalf("%d lookups, want %d: one owner's generation moved", got, first+1)
	}
	release()
	publish(5)
	if got := a.Stats().Lookups; got != first+2 {
		t.Fatalf("%d lookups, want %d", got, first+2)
	}

	want := map[string][]uint64{"B": {1, 2, 3, 4, 5}, "C": {4}}
	for node, offsets := range want {
		var got []uint64
		for _, m := range decodeAll(t, w.tr.to(node)) {
			got = append(got, m.Pos.Offset)
		}
		if !slices.Equal(got, offsets) {
			t.Errorf("offsets sent to %s: %v, want %v", node, got, offsets)
		}
	}
}

// TestRouteStoreFails checks that what cannot be routed for want of the interest store is
// dropped and counted, and that the next batch reads the store again.
func TestRouteStoreFails(t *testing.T) {
	w := newWorld(t)
	spy := &spyStore{Store: w.store, calls: &calls{}, rowsErr: errors.New("redis down")}
	a, b := w.node(t, "A", func(c *Config) { c.Interest = spy }), w.node(t, "B", nil)
	run(t, a.Node)
	watchChannel(t, b.Node, "a/b")
	a.Forward(message("a/b", 1, `1`))
	a.Relay("a/b", stream.PresenceJoin, stream.Member{ID: "m"})
	routed(t, a.Node)
	if s := a.Stats(); s.Dropped != [kinds]uint64{1, 0, 1} || w.tr.total() != 0 {
		t.Fatalf("dropped %v, %d sent; want [1 0 1] and none", s.Dropped, w.tr.total())
	}
	spy.mu.Lock()
	spy.rowsErr = nil
	spy.mu.Unlock()
	a.Forward(message("a/b", 2, `2`))
	routed(t, a.Node)
	if got := decodeAll(t, w.tr.to("B")); len(got) != 1 || got[0].Pos.Offset != 2 {
		t.Fatalf("sent %v to B, want the second publication", got)
	}
}

// TestRowsCacheBound checks that the rows cache lets owners go past maxCachedOwners.
func TestRowsCacheBound(t *testing.T) {
	w := newWorld(t)
	a := w.node(t, "A", nil)
	run(t, a.Node)
	for i := range maxCachedOwners + 10 {
		a.Forward(message(fmt.Sprintf("ns%d/x", i), 1, `1`))
	}
	routed(t, a.Node)
	// routed read the queue under its lock after the router's last done: the cache is
	// quiet and its writes are visible here.
	if n := len(a.cache); n > maxCachedOwners {
		t.Fatalf("%d owners cached, want at most %d", n, maxCachedOwners)
	}
}

func TestRelayToExactHolders(t *testing.T) {
	w := newWorld(t)
	a, b, c := w.node(t, "A", nil), w.node(t, "B", nil), w.node(t, "C", nil)
	run(t, a.Node)
	watchChannel(t, b.Node, "a/b")
	watchChannel(t, b.Node, "a/*")
	watchChannel(t, c.Node, "a/*") // a pattern: presence subscribers subscribe exactly
	member := stream.Member{ID: "alice.c1", Subject: "alice", Meta: json.RawMessage(`{"s":1}`)}
	a.Relay("a/b", stream.PresenceJoin, member)
	a.Relay("a/b", stream.PresenceLeave, stream.Member{ID: "alice.c1", Subject: "alice"})
	routed(t, a.Node)

	var got []*wirePresence
	for _, p := range w.tr.to("B") {
		if p[0] != kindPresence {
			t.Fatalf("payload %q is not a presence event", p)
		}
		wp, err := decodePresence(p[1:])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wp)
	}
	want := []*wirePresence{
		{Channel: "a/b", Kind: stream.PresenceJoin, Member: member},
		{Channel: "a/b", Kind: stream.PresenceLeave, Member: stream.Member{ID: "alice.c1", Subject: "alice"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sent to B (-want +got):\n%s", diff)
	}
	if n := len(w.tr.to("C")); n != 0 {
		t.Errorf("sent %d presence events to C, which holds the channel by a pattern only", n)
	}
	if s := a.Stats(); s.Sent[KindPresence] != 2 {
		t.Errorf("stats: %d presence events sent, want 2", s.Sent[KindPresence])
	}
}

// TestReceiveInOrder checks that what another node sent reaches the hub, presence and the
// router in the order it was sent, decoded as it was encoded.
func TestReceiveInOrder(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", nil)
	run(t, b.Node)
	m1, m2 := message("a/b", 1, `{"n":1}`), message("a/b", 2, `{"n":2}`)
	txn := testTxn()
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b.Receive("A", must(encodeMessage(m1)))
	b.Receive("A", must(encodePresence("a/b", stream.PresenceJoin, stream.Member{ID: "m1"})))
	b.Receive("A", must(encodeTxn(txn, []int{0, 3})))
	b.Receive("A", must(encodePresence("a/b", stream.PresenceLeave, stream.Member{ID: "m1"})))
	b.Receive("A", must(encodeMessage(m2)))
	received(t, b.Node)

	want := []string{
		"deliver a/b ep1:1",
		"apply a/b join m1",
		"accept " + txn.CommitLSN.String(),
		"apply a/b leave m1",
		"deliver a/b ep1:2",
	}
	if diff := cmp.Diff(want, w.calls.all()); diff != "" {
		t.Fatalf("calls (-want +got):\n%s", diff)
	}
	b.hub.mu.Lock()
	delivered := b.hub.delivered
	b.hub.mu.Unlock()
	if diff := cmp.Diff([]*stream.Message{m1, m2}, delivered); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if got := b.tables.txns()[0]; len(got.Events) != 4 || got.Events[0].Table != "public.orders" || got.Events[1].Op != change.Message {
		t.Errorf("accepted %+v, want the transaction's 4 events with the first one at its place", got.Events)
	}
	if s := b.Stats(); s.Received != [kinds]uint64{2, 1, 2} {
		t.Errorf("received %v, want [2 1 2]", s.Received)
	}
}

// TestReceiveRefuses checks that what cannot be handed on is counted, a publication the hub
// refused is reported to it as lost, and a transaction lost so is told to the table
// subscriptions.
func TestReceiveRefuses(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", nil)
	run(t, b.Node)
	b.hub.mu.Lock()
	b.hub.deliverErr = errors.New("closed")
	b.hub.mu.Unlock()
	msg, err := encodeMessage(message("a/b", 1, `1`))
	if err != nil {
		t.Fatal(err)
	}
	b.Receive("A", []byte("m{"))      // does not decode
	b.Receive("A", msg)               // the hub refuses it
	b.Receive("A", []byte("p[]"))     // does not decode
	b.Receive("A", []byte("t{\"n\"")) // does not decode: the table subscriptions are told
	b.Receive("A", []byte("z{}"))     // an unknown kind
	b.Receive("A", nil)               // empty: nothing
	received(t, b.Node)
	if s := b.Stats(); s.Dropped != [kinds]uint64{3, 1, 1} {
		t.Errorf("dropped %v, want [3 1 1]", s.Dropped)
	}
	if diff := cmp.Diff([]string{"deliver a/b ep1:1", "lost a/b ep1:1", "stale upstream_gap"}, w.calls.all()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestReceiveTxnWithoutTables(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", func(c *Config) { c.Tables = nil; c.Presence = nil })
	run(t, b.Node)
	txn, err := encodeTxn(testTxn(), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	pres, err := encodePresence("a", stream.PresenceJoin, stream.Member{ID: "m"})
	if err != nil {
		t.Fatal(err)
	}
	b.Receive("A", txn)
	b.Receive("A", pres)
	received(t, b.Node)
	if s := b.Stats(); s.Dropped[KindTable] != 1 || s.Received[KindPresence] != 1 {
		t.Errorf("dropped %v, received %v; want the transaction dropped, the presence event received", s.Dropped, s.Received)
	}
	if calls := w.calls.all(); len(calls) != 0 {
		t.Errorf("calls %q, want none", calls)
	}
}

func TestReceiveAcceptFails(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", nil)
	b.tables.acceptErr = errors.New("bus closed")
	run(t, b.Node)
	txn := testTxn()
	data, err := encodeTxn(txn, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	b.Receive("A", data)
	received(t, b.Node)
	if diff := cmp.Diff([]string{"accept " + txn.CommitLSN.String(), "stale upstream_gap"}, w.calls.all()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestGap checks that a loss the transport reports tells the table subscriptions and the hub,
// and has the node's rows checked at once, filing again what the store lost.
func TestGap(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", nil) // RowTTL is an hour: only the gap makes it renew
	watchChannel(t, b.Node, "a/b")
	if _, err := b.Watch(context.Background(), TableOwner("public.orders"), "*", "alice"); err != nil {
		t.Fatal(err)
	}
	run(t, b.Node)
	for _, owner := range []string{"c:a", "t:public.orders"} {
		if _, err := w.store.Reap(context.Background(), owner, "B"); err != nil {
			t.Fatal(err)
		}
	}

	b.Gap("A", "trimmed")
	eventually(t, func() bool {
		return len(rowsOf(t, w.store, "c:a", "x:a/b")) == 1 && len(rowsOf(t, w.store, "t:public.orders", "*")) == 1
	}, func() string { return "the rows the store lost were not filed again" })
	// Once for the gap, once for the rows lost: the table owner's and the channel owner's.
	eventually(t, func() bool { return w.calls.count("stale upstream_gap") == 2 && w.calls.count("verify") == 2 },
		func() string { return fmt.Sprintf("calls %q, want stale and verify twice each", w.calls.all()) })
	if s := b.Stats(); s.Gaps[KindTable] != 1 {
		t.Errorf("gaps %v, want one", s.Gaps)
	}
}

// TestReceiveQueueFull checks that a payload refused by a full receive queue is reported as a
// gap from its sender, after what the queue held.
func TestReceiveQueueFull(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", func(c *Config) { c.QueueItems = 1 })
	m1, err := encodeMessage(message("a/b", 1, `1`))
	if err != nil {
		t.Fatal(err)
	}
	m2, err := encodeMessage(message("a/b", 2, `2`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := encodePresence("a/b", stream.PresenceJoin, stream.Member{ID: "m"})
	if err != nil {
		t.Fatal(err)
	}
	b.Receive("A", m1)
	b.Receive("A", m2)
	b.Receive("A", p)
	if s := b.Stats(); s.Dropped != [kinds]uint64{1, 0, 1} || s.Receiving != 3 {
		t.Fatalf("dropped %v, %d waiting; want [1 0 1] and 3 (the first and two gaps)", s.Dropped, s.Receiving)
	}
	run(t, b.Node)
	received(t, b.Node)
	want := []string{"deliver a/b ep1:1", "stale upstream_gap", "verify", "stale upstream_gap", "verify"}
	if diff := cmp.Diff(want, w.calls.all()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestForwardQueueFull checks that a publication or presence event refused by a full routing
// queue is counted, not sent, and the nodes holding a lost publication's channel are told its
// position (the last lost of the channel), which their hub reports lost.
func TestForwardQueueFull(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(t, "A", func(c *Config) { c.QueueItems = 1 }), w.node(t, "B", nil)
	watchChannel(t, b.Node, "a/b")
	a.Forward(message("a/b", 1, `1`))
	a.Forward(message("a/b", 2, `2`))
	a.Forward(message("a/b", 3, `3`))
	a.Relay("a/b", stream.PresenceJoin, stream.Member{ID: "m"})
	if s := a.Stats(); s.Dropped != [kinds]uint64{2, 0, 1} || s.Routing != 2 {
		t.Fatalf("dropped %v, %d waiting; want [2 0 1] and 2 (the first, and the report of the lost)", s.Dropped, s.Routing)
	}
	run(t, a.Node)
	routed(t, a.Node)
	sent := w.tr.to("B")
	if len(sent) != 2 || sent[1][0] != kindLost {
		t.Fatalf("sent %q to B, want the first publication and a report of the lost", sent)
	}
	if got := decodeAll(t, sent[:1]); got[0].Pos.Offset != 1 {
		t.Fatalf("sent %v to B first, want the first publication", got)
	}
	if lost, err := decodeMessage(sent[1][1:]); err != nil || lost.Pos.Offset != 3 || lost.Channel != "a/b" || lost.Data != nil {
		t.Fatalf("the report %q: %+v, %v; want the position of the last lost, 3, without data", sent[1], lost, err)
	}
	run(t, b.Node)
	b.Receive("A", sent[1])
	received(t, b.Node)
	if diff := cmp.Diff([]string{"send B", "send B", "lost a/b ep1:3"}, w.calls.all()); diff != "" {
		t.Errorf("calls on B (-want +got):\n%s", diff)
	}
}

// TestRenew checks that renewing files again exactly what the store lost, and tells the
// subscriptions of the kind of owner that lost rows.
func TestRenew(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", nil)
	ctx := context.Background()
	watchChannel(t, b.Node, "a/b")
	watchChannel(t, b.Node, "a/*")
	if _, err := b.Watch(ctx, TableOwner("public.orders"), "k:id=1", "alice"); err != nil {
		t.Fatal(err)
	}

	b.renew(ctx)
	if calls := w.calls.all(); len(calls) != 0 {
		t.Fatalf("renewing with nothing lost: calls %q, want none", calls)
	}

	reap := func(owner string) {
		t.Helper()
		if _, err := w.store.Reap(ctx, owner, "B"); err != nil {
			t.Fatal(err)
		}
	}
	reap("c:a")
	b.renew(ctx)
	if got := rowsOf(t, w.store, "c:a", "x:a/b", "p:a"); !slices.Equal(got, []string{"B", "B"}) {
		t.Fatalf("channel rows after renew: %v, want both of B's", got)
	}
	if diff := cmp.Diff([]string{"verify"}, w.calls.all()); diff != "" {
		t.Fatalf("after a channel owner's loss, calls (-want +got):\n%s", diff)
	}

	reap("t:public.orders")
	reap("c:a")
	b.renew(ctx)
	if got := rowsOf(t, w.store, "t:public.orders", "k:id=1"); !slices.Equal(got, []string{"B"}) {
		t.Fatalf("table rows after renew: %v, want B's", got)
	}
	if n, m := w.calls.count("stale upstream_gap"), w.calls.count("verify"); n != 1 || m != 2 {
		t.Fatalf("calls %q: want one stale and a second verify", w.calls.all())
	}
}

// TestRenewRacesRelease checks that a subscription released while the node renews is not
// filed again: the renewer's snapshot still held it, and the store no longer did.
func TestRenewRacesRelease(t *testing.T) {
	for _, tc := range []struct {
		name, owner, token, told string
		alone                    bool // the released subscription is the owner's only one
	}{
		{"channel", "c:a", "x:a/b", "verify", false},
		{"table", "t:public.orders", "k:id=1", "stale upstream_gap", false},
		{"the owner's last", "c:a", "x:a/b", "verify", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			spy := &spyStore{Store: w.store, calls: &calls{}}
			b := w.node(t, "B", func(c *Config) { c.Interest = spy })
			ctx := context.Background()
			if !tc.alone {
				if _, err := b.Watch(ctx, tc.owner, "*", "alice"); err != nil {
					t.Fatal(err)
				}
			}
			release, err := b.Watch(ctx, tc.owner, tc.token, "alice")
			if err != nil {
				t.Fatal(err)
			}
			spy.mu.Lock()
			spy.onRefresh = release // after the renewer took its snapshot
			spy.mu.Unlock()
			b.renew(ctx)

			if got := rowsOf(t, w.store, tc.owner, tc.token); len(got) != 0 {
				t.Errorf("rows under %s after its release: %v, want none", tc.token, got)
			}
			if got := rowsOf(t, w.store, tc.owner, "*"); !tc.alone && len(got) != 1 {
				t.Errorf("rows under *: %v, want the one still held", got)
			}
			if n := w.calls.count(tc.told); n != 0 {
				t.Errorf("%q %d times: nothing was lost", tc.told, n)
			}
		})
	}
}

// TestRenewLossAndRelease checks that a loss is still seen and filed again when a release
// races the renewer on the same owner.
func TestRenewLossAndRelease(t *testing.T) {
	w := newWorld(t)
	spy := &spyStore{Store: w.store, calls: &calls{}}
	b := w.node(t, "B", func(c *Config) { c.Interest = spy })
	watchChannel(t, b.Node, "a/b")
	release := watchChannel(t, b.Node, "a/*")
	ctx := context.Background()
	if _, err := w.store.Reap(ctx, "c:a", "B"); err != nil {
		t.Fatal(err)
	}
	spy.mu.Lock()
	spy.onRefresh = release
	spy.mu.Unlock()
	b.renew(ctx)
	if got := rowsOf(t, w.store, "c:a", "x:a/b", "p:a"); !slices.Equal(got, []string{"B"}) {
		t.Errorf("rows after renew: %v, want the one still held", got)
	}
	if got := rowsOf(t, w.store, "c:a", "p:a"); len(got) != 0 {
		t.Errorf("rows of the released pattern: %v, want none", got)
	}
	if diff := cmp.Diff([]string{"verify"}, w.calls.all()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestMark(t *testing.T) {
	w := newWorld(t)
	b := w.node(t, "B", nil)
	ctx := context.Background()
	if m, err := b.Mark(ctx, "t:public.orders"); err != nil || m != 0 {
		t.Fatalf("Mark before any stamp = %d, %v; want 0", m, err)
	}
	if _, _, err := w.store.Stamp(ctx, "t:public.orders", 77, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Mark(ctx, "t:public.orders"); err != nil || m != 77 {
		t.Fatalf("Mark = %d, %v; want 77", m, err)
	}
}

// TestForwardEndToEnd hands what one node sends to the other's Receive: the publication
// reaches the other node's hub as it was published.
func TestForwardEndToEnd(t *testing.T) {
	w := newWorld(t)
	a, b := w.node(t, "A", nil), w.node(t, "B", nil)
	run(t, a.Node)
	run(t, b.Node)
	watchChannel(t, b.Node, "docs/*/inbox")
	m := message("docs/alice/inbox", 9, `{"subject":"hello"}`)
	a.Forward(m)
	routed(t, a.Node)
	for _, p := range w.tr.to("B") {
		b.Receive("A", p)
	}
	received(t, b.Node)
	b.hub.mu.Lock()
	defer b.hub.mu.Unlock()
	if diff := cmp.Diff([]*stream.Message{m}, b.hub.delivered); diff != "" {
		t.Errorf("delivered on B (-want +got):\n%s", diff)
	}
}

func newLimitedStore(limit int) (interest.Store, error) {
	return memory.NewInterest(interest.Config{MaxPerIdentity: limit})
}
