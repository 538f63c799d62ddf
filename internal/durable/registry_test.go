package durable_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/stream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hub is a channel hub with one channel, e1, whose publications the test makes.
type hub struct {
	mu   sync.Mutex
	subs map[stream.Receiver]string
	off  uint64
}

func newHub() *hub { return &hub{subs: map[stream.Receiver]string{}} }

func (h *hub) Subscribe(r stream.Receiver, sub, channel, event string, from stream.Position) (durable.Feed, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[r] = sub
	return durable.Feed{Head: stream.ChannelPosition("e1", h.off), Unsubscribe: func() {
		h.mu.Lock()
		delete(h.subs, r)
		h.mu.Unlock()
	}}, nil
}

func (h *hub) publish(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for range n {
		h.off++
		it := stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition("e1", h.off), Channel: "jobs", Data: []byte(fmt.Sprint(h.off))})
		for r, sub := range h.subs {
			r.Push(sub, it)
		}
	}
}

// conn records what the registry pushes it.
type conn struct {
	mu    sync.Mutex
	items []string
}

func (c *conn) Push(sub string, it *stream.Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case it.Message != nil:
		c.items = append(c.items, fmt.Sprintf("%d", it.Message.Pos.Offset))
	case it.Gap != nil:
		c.items = append(c.items, fmt.Sprintf("gap(%d-%d,%d,%s)", it.Gap.First.Offset, it.Gap.Last.Offset, it.Gap.Lost, it.Gap.Reason))
	}
}

func (c *conn) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.items...)
}

func (c *conn) waitFor(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(c.got()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %v, want %d items", c.got(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return c.got()
}

// clock is a clock that moves when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func run(t *testing.T, r *durable.Registry) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestInboxOverflowIsOneExactMarker: the hub hands a durable subscription more than its inbox
// holds before the worker takes them: the surplus becomes one queue_full marker naming exactly
// the items it stands for, after the ones the inbox held; what comes once the worker took it
// goes through.
func TestInboxOverflowIsOneExactMarker(t *testing.T) {
	h := newHub()
	lim := durable.Limits{Lease: time.Hour}
	r, err := durable.New(durable.Config{Limits: lim, InboxItems: 3, Tick: time.Hour}, memory.NewDurable(lim), h)
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{}
	key := durable.Key{Subject: "alice", Name: "feed"}
	if _, err := r.Bind(context.Background(), durable.BindRequest{Key: key, Def: durable.Def{Channel: "jobs", Mode: durable.Broadcast},
		Conn: durable.Conn{ID: "c1"}, Receiver: c, Name: "feed"}); err != nil {
		t.Fatal(err)
	}
	h.publish(7) // the worker is not running yet: they wait in the inbox
	run(t, r)    // it takes them at once: the first push left it a wake-up
	got := c.waitFor(t, 4)
	if want := "1 2 3 gap(4-7,4,queue_full)"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	h.publish(1)
	if got := c.waitFor(t, 5); got[4] != "8" {
		t.Fatalf("got %v, want 8 last", got)
	}
}

// TestLeaseExpiresOnTheTick: a single's message not acked goes to the other connection once
// its lease has passed by the registry's clock, at the next tick; an unbound connection's
// lease ends at once.
func TestLeaseExpiresOnTheTick(t *testing.T) {
	h := newHub()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	lim := durable.Limits{Lease: time.Minute, ConnTTL: time.Hour}
	r, err := durable.New(durable.Config{Limits: lim, Tick: 5 * time.Millisecond, Now: clk.Now}, memory.NewDurable(lim), h)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	key := durable.Key{Subject: "alice", Name: "jobs"}
	def := durable.Def{Channel: "jobs", Mode: durable.Single}
	a, b := &conn{}, &conn{}
	bind := func(id string, c *conn) *durable.Binding {
		bd, err := r.Bind(context.Background(), durable.BindRequest{Key: key, Def: def, Conn: durable.Conn{ID: id}, Receiver: c, Name: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		return bd
	}
	bind("a", a)
	bb := bind("b", b)
	h.publish(1)
	b.waitFor(t, 1)
	clk.add(time.Minute) // the lease has passed: the next tick offers it to a
	if got := a.waitFor(t, 1); got[0] != "1" {
		t.Fatalf("a got %v", got)
	}
	if err := bb.Ack(context.Background(), stream.ChannelPosition("e1", 1)); err == nil {
		t.Fatal("b's late ack of a message a holds now succeeded; want not_found")
	} else if fe, ok := fault.As(err); !ok || fe.Code != fault.CodeNotFound {
		t.Fatalf("b's late ack: %v, want not_found", err)
	}
	// A new message goes to the most recent again: b had only the other in its round.
	h.publish(1)
	if got := b.waitFor(t, 2); got[1] != "2" {
		t.Fatalf("b got %v", got)
	}
	bb.Unbind() // its lease ends at once
	if got := a.waitFor(t, 2); got[1] != "2" {
		t.Fatalf("a got %v", got)
	}
	if st := r.Stats(); st.Retried != 2 || st.Delivered != 4 || st.Depth != 2 || st.Subscriptions != 1 {
		t.Fatalf("stats %+v", st)
	}
}
