package channel

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/stream"
)

// captured is a Remote that keeps what a hub forwards, for the test to deliver to another hub
// in the order it chooses.
type captured struct {
	mu   sync.Mutex
	msgs []*stream.Message
}

func (c *captured) Forward(m *stream.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
}

func (c *captured) take() []*stream.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msgs
	c.msgs = nil
	return m
}

// anyRecorder records messages and gaps alike, as "pos" and "gap first..last reason".
type anyRecorder struct {
	mu  sync.Mutex
	got []string
}

func (r *anyRecorder) Push(_ string, it *stream.Item) {
	var s string
	switch {
	case it.Message != nil:
		s = it.Message.Pos.String()
	case it.Gap != nil:
		s = fmt.Sprintf("gap %s..%s lost %d %s", it.Gap.First, it.Gap.Last, it.Gap.Lost, it.Gap.Reason)
	}
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *anyRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

// twoNodes returns two hubs sharing one broker, as two nodes sharing Redis do, each with a
// Remote that captures what it forwards.
func twoNodes(t *testing.T, wait time.Duration) (a, b *Hub, ra, rb *captured) {
	t.Helper()
	broker := sharedBroker{NewMemoryBroker(MemoryBrokerConfig{NewEpoch: func() string { return "e1" }})}
	ra, rb = &captured{}, &captured{}
	mk := func(r *captured) *Hub {
		h, err := New(Config{Bus: bus.NewMemory(), Broker: broker, Remote: r, OrderWait: wait})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}
	return mk(ra), mk(rb), ra, rb
}

// sharedBroker stands for a broker shared by nodes: one node forgetting a channel does not end
// its stream while another holds it, so in this test nothing ends it.
type sharedBroker struct{ *MemoryBroker }

func (sharedBroker) Forget(string) {}

func deliver(t *testing.T, h *Hub, ms ...*stream.Message) {
	t.Helper()
	for _, m := range ms {
		if err := h.Deliver(m); err != nil {
			t.Fatalf("Deliver %s: %v", m.Pos, err)
		}
	}
}

// subscribe subscribes rec to pattern and event on h until the test ends, and returns the head.
func subscribe(t *testing.T, h *Hub, rec *anyRecorder, sub, pattern, event string) stream.Position {
	t.Helper()
	head, unsub, err := h.Subscribe(rec, sub, mustPattern(t, pattern, event))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsub)
	return head
}

func waitFor(t *testing.T, h *Hub, r *anyRecorder, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for {
		flush(t, h)
		got = append(got, r.take()...)
		if len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestOrderAcrossNodes(t *testing.T) {
	a, b, ra, _ := twoNodes(t, time.Hour)
	rec := &anyRecorder{}
	head := subscribe(t, b, rec, "s", "room/1", "")
	if head.String() != "e1:0" {
		t.Fatalf("head = %s, want e1:0", head)
	}
	// a takes offsets 1 and 2; b then takes 3 and hands it to its subscriber only after 1 and
	// 2 arrive from a.
	mustPublish(t, a, "room/1", "", `1`)
	mustPublish(t, a, "room/1", "", `2`)
	mustPublish(t, b, "room/1", "", `3`)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("b handed on %q before offsets 1 and 2 arrived", got)
	}
	fromA := ra.take()
	deliver(t, b, fromA[1]) // out of order on the way, too
	deliver(t, b, fromA[0])
	waitFor(t, b, rec, []string{"e1:1", "e1:2", "e1:3"})
	// A copy arriving again is dropped.
	deliver(t, b, fromA[0])
	flush(t, b)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a repeated publication was handed on again: %q", got)
	}
	if st := b.Stats(); st.Late != 1 || st.Gaps != 0 {
		t.Fatalf("stats = %+v, want Late 1, Gaps 0", st)
	}
}

func TestOrderHoleBecomesGap(t *testing.T) {
	a, b, ra, _ := twoNodes(t, 20*time.Millisecond)
	rec := &anyRecorder{}
	subscribe(t, b, rec, "s", "room/1", "only-this-event")
	for i := 0; i < 3; i++ {
		if _, err := a.Publish("room/1", "only-this-event", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	fromA := ra.take()
	// Offset 2 is lost on the way: after the wait, b reports exactly it, even to a
	// subscription whose event filter the lost one might not have matched, and hands on 3.
	deliver(t, b, fromA[0], fromA[2])
	waitFor(t, b, rec, []string{"e1:1", "gap e1:2..e1:2 lost 1 upstream_gap", "e1:3"})
	deliver(t, b, fromA[1]) // too late: inside the gap already reported
	flush(t, b)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a publication inside a reported gap was handed on: %q", got)
	}
	if st := b.Stats(); st.Late != 1 || st.Gaps != 1 {
		t.Fatalf("stats = %+v, want Late 1, Gaps 1", st)
	}
}

func TestOrderSubscriberStartsAfterWhatTheNodeHandedOn(t *testing.T) {
	a, b, ra, _ := twoNodes(t, time.Hour)
	first := &anyRecorder{}
	subscribe(t, b, first, "s1", "room/1", "")
	mustPublish(t, a, "room/1", "", `1`)
	mustPublish(t, a, "room/1", "", `2`)
	fromA := ra.take()
	deliver(t, b, fromA[0])
	waitFor(t, b, first, []string{"e1:1"})
	// A second subscriber joins while offset 2 is on its way: it starts after 1, what this
	// node handed on, not after the broker's head 2, so 2 reaches it.
	second := &anyRecorder{}
	head := subscribe(t, b, second, "s2", "room/1", "")
	if head.String() != "e1:1" {
		t.Fatalf("second head = %s, want e1:1", head)
	}
	deliver(t, b, fromA[1])
	waitFor(t, b, second, []string{"e1:2"})
	waitFor(t, b, first, []string{"e1:2"})
}

func TestOrderPatternStartsAtFirstArrival(t *testing.T) {
	a, b, ra, _ := twoNodes(t, time.Hour)
	rec := &anyRecorder{}
	subscribe(t, b, rec, "s", "room/*", "")
	for i := 0; i < 3; i++ {
		mustPublish(t, a, "room/7", "", `{}`)
	}
	fromA := ra.take()
	deliver(t, b, fromA[1], fromA[2])
	waitFor(t, b, rec, []string{"e1:2", "e1:3"})
}

func TestOrderTrailingLossFoundByVerify(t *testing.T) {
	a, b, ra, _ := twoNodes(t, 20*time.Millisecond)
	rec := &anyRecorder{}
	subscribe(t, b, rec, "s", "room/1", "")
	mustPublish(t, a, "room/1", "", `1`)
	mustPublish(t, a, "room/1", "", `2`)
	fromA := ra.take()
	deliver(t, b, fromA[0])
	waitFor(t, b, rec, []string{"e1:1"})
	// Offset 2 is lost and nothing is published after it: only asking the broker finds it.
	b.Verify()
	waitFor(t, b, rec, []string{"gap e1:2..e1:2 lost 1 upstream_gap"})
	// And a Verify with nothing missing reports nothing.
	mustPublish(t, b, "room/1", "", `3`)
	waitFor(t, b, rec, []string{"e1:3"})
	b.Verify()
	time.Sleep(60 * time.Millisecond)
	flush(t, b)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("Verify with nothing missing reported %q", got)
	}
}

func TestOrderEpochChangeIsAReset(t *testing.T) {
	epochs := []string{"e1", "e2"}
	var mu sync.Mutex
	broker := NewMemoryBroker(MemoryBrokerConfig{NewEpoch: func() string {
		mu.Lock()
		defer mu.Unlock()
		e := epochs[0]
		epochs = epochs[1:]
		return e
	}})
	r := &captured{}
	b, err := New(Config{Bus: bus.NewMemory(), Broker: broker, Remote: r, OrderWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	rec := &anyRecorder{}
	subscribe(t, b, rec, "s", "room/1", "")
	mustPublish(t, b, "room/1", "", `1`)
	waitFor(t, b, rec, []string{"e1:1"})
	// The broker lost the stream (Redis restarted empty): the next publication is in a new
	// epoch, and what the old one held after offset 1 is reported gone.
	deliver(t, b, &stream.Message{Pos: stream.ChannelPosition("e2", 1), Channel: "room/1", Data: []byte(`2`)})
	waitFor(t, b, rec, []string{"gap e1:2..e2:0 lost 0 stream_reset", "e2:1"})
	// A publication of the old epoch arriving late lies inside that gap: it is dropped, and
	// the channel stays in the new epoch.
	deliver(t, b, &stream.Message{Pos: stream.ChannelPosition("e1", 2), Channel: "room/1", Data: []byte(`late`)})
	deliver(t, b, &stream.Message{Pos: stream.ChannelPosition("e2", 2), Channel: "room/1", Data: []byte(`3`)})
	waitFor(t, b, rec, []string{"e2:2"})
}

// TestOrderLost: a publication this node could not hand on (Deliver refused it) is reported
// lost once the order wait passes, though nothing is published after it; one already handed
// on, or of another epoch, is not.
func TestOrderLost(t *testing.T) {
	broker := sharedBroker{NewMemoryBroker(MemoryBrokerConfig{NewEpoch: func() string { return "e1" }})}
	h, err := New(Config{Bus: bus.NewMemory(), Broker: broker, Remote: &captured{}, OrderWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	rec := &anyRecorder{}
	subscribe(t, h, rec, "s", "room/1", "")
	deliver(t, h, &stream.Message{Pos: stream.ChannelPosition("e1", 1), Channel: "room/1", Data: []byte(`1`)})
	waitFor(t, h, rec, []string{"e1:1"})
	h.Lost(&stream.Message{Pos: stream.ChannelPosition("e1", 1), Channel: "room/1"}) // handed on already
	h.Lost(&stream.Message{Pos: stream.ChannelPosition("e0", 7), Channel: "room/1"}) // another epoch
	h.Lost(&stream.Message{Pos: stream.ChannelPosition("e1", 2), Channel: "room/1"})
	waitFor(t, h, rec, []string{"gap e1:2..e1:2 lost 1 upstream_gap"})
	deliver(t, h, &stream.Message{Pos: stream.ChannelPosition("e1", 3), Channel: "room/1", Data: []byte(`3`)})
	waitFor(t, h, rec, []string{"e1:3"})
}

// lostBroker is a broker shared by nodes whose Head, once lost is set, answers it: the
// stream Redis lost and another node started again.
type lostBroker struct {
	sharedBroker
	mu   sync.Mutex
	lost stream.Position // guarded by mu
}

func (b *lostBroker) Head(channel string) (stream.Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lost.Epoch != "" {
		return b.lost, nil
	}
	return b.sharedBroker.Head(channel)
}

// TestOrderNewSubscriptionFindsTheStreamLost: a new subscription that reads a head of another
// epoch, the stream having been lost and started again before this node heard of it, resets
// the channel: its subscribers are told (stream_reset), and are owed the new epoch's offsets
// up to the head, each reported lost once the order wait passes without it; the new
// subscription starts after the head and is given neither.
func TestOrderNewSubscriptionFindsTheStreamLost(t *testing.T) {
	broker := &lostBroker{sharedBroker: sharedBroker{NewMemoryBroker(MemoryBrokerConfig{NewEpoch: func() string { return "e1" }})}}
	h, err := New(Config{Bus: bus.NewMemory(), Broker: broker, Remote: &captured{}, OrderWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	old, newer := &anyRecorder{}, &anyRecorder{}
	subscribe(t, h, old, "s1", "room/1", "")
	mustPublish(t, h, "room/1", "", `1`)
	waitFor(t, h, old, []string{"e1:1"})

	broker.mu.Lock()
	broker.lost = stream.ChannelPosition("e2", 2) // two publications of the new epoch, taken elsewhere
	broker.mu.Unlock()
	if head := subscribe(t, h, newer, "s2", "room/1", ""); head != stream.ChannelPosition("e2", 2) {
		t.Errorf("the new subscription starts after %s, want e2:2", head)
	}
	// The first of the two arrives; the second never does.
	deliver(t, h, &stream.Message{Pos: stream.ChannelPosition("e2", 1), Channel: "room/1", Data: []byte(`a`)})
	waitFor(t, h, old, []string{"gap e1:2..e2:0 lost 0 stream_reset", "e2:1", "gap e2:2..e2:2 lost 1 upstream_gap"})
	deliver(t, h, &stream.Message{Pos: stream.ChannelPosition("e2", 3), Channel: "room/1", Data: []byte(`b`)})
	waitFor(t, h, old, []string{"e2:3"})
	waitFor(t, h, newer, []string{"e2:3"})
}

// TestOrderNewEpochArrivesOutOfOrder: the new epoch's first offsets, taken on several nodes,
// may arrive in any order; none of them is taken for lost while it is on its way.
func TestOrderNewEpochArrivesOutOfOrder(t *testing.T) {
	_, b, _, _ := twoNodes(t, time.Hour)
	rec := &anyRecorder{}
	subscribe(t, b, rec, "s", "room/1", "")
	deliver(t, b, &stream.Message{Pos: stream.ChannelPosition("e1", 1), Channel: "room/1", Data: []byte(`1`)})
	waitFor(t, b, rec, []string{"e1:1"})
	deliver(t, b, &stream.Message{Pos: stream.ChannelPosition("e9", 2), Channel: "room/1", Data: []byte(`b`)})
	deliver(t, b, &stream.Message{Pos: stream.ChannelPosition("e9", 1), Channel: "room/1", Data: []byte(`a`)})
	waitFor(t, b, rec, []string{"gap e1:2..e9:0 lost 0 stream_reset", "e9:1", "e9:2"})
}
