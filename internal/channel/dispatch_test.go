package channel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/stream"
)

// gate is a receiver whose Push blocks until it is opened: it holds a fan-out queue's goroutine
// in the middle of a delivery, as nothing real may, so a test can fill the queue behind it.
type gate struct {
	entered chan struct{} // one token per Push that started
	open    chan struct{}
	recorder
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 64), open: make(chan struct{})}
}

func (g *gate) Push(sub string, it *stream.Item) {
	g.entered <- struct{}{}
	<-g.open
	g.recorder.Push(sub, it)
}

func queueHub(t *testing.T, cfg Config) *Hub {
	t.Helper()
	cfg.Bus = bus.NewMemory()
	cfg.Broker = NewMemoryBroker(MemoryBrokerConfig{NewEpoch: counterEpochs()})
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// Publish returns once the publication is queued, not once it is delivered: a receiver that
// has not taken it does not hold the publisher.
func TestPublishDoesNotWaitForTheFanout(t *testing.T) {
	h := queueHub(t, Config{Shards: 1})
	g := newGate()
	_, unsub, err := h.Subscribe(g, "s", mustPattern(t, "rooms/1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	done := make(chan error, 1)
	go func() {
		_, err := h.Publish("rooms/1", "", []byte("1"))
		done <- err
	}()
	<-g.entered // the queue's goroutine is delivering it
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Publish waited for the delivery")
	}
	if got := h.Stats().Queued; got != 1 {
		t.Errorf("Queued = %d while the delivery runs, want 1", got)
	}
	close(g.open)
	flush(t, h)
	if got := g.take(); len(got) != 1 || got[0].Pos.Offset != 1 {
		t.Errorf("delivered %v, want offset 1", got)
	}
}

// The overflow rule: a full queue makes a publisher wait for room up to QueueWait, then refuses
// it with a *BusyError, and a refused publication takes no position.
func TestFullQueueWaitsThenRefuses(t *testing.T) {
	h := queueHub(t, Config{Shards: 1, QueueLen: 2, QueueWait: 50 * time.Millisecond})
	g := newGate()
	_, unsub, err := h.Subscribe(g, "s", mustPattern(t, "rooms/1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if _, err := h.Publish("rooms/1", "", []byte("1")); err != nil {
		t.Fatal(err)
	}
	<-g.entered // offset 1 is being handed on and still counts
	if _, err := h.Publish("rooms/1", "", []byte("2")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = h.Publish("rooms/1", "", []byte("3"))
	var busy *BusyError
	if !errors.As(err, &busy) || !errors.Is(err, ErrBusy) {
		t.Fatalf("Publish to a full queue = %v, want a *BusyError", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("refused after %s, want a wait of QueueWait (50ms) first", waited)
	}
	if busy.Channel != "rooms/1" || busy.Queued != 2 || busy.MaxQueue != 2 {
		t.Errorf("BusyError = %+v", busy)
	}
	if got := h.Stats().Refused; got != 1 {
		t.Errorf("Refused = %d, want 1", got)
	}

	close(g.open)
	if _, err := h.Publish("rooms/1", "", []byte("4")); err != nil {
		t.Fatal(err)
	}
	flush(t, h)
	var offsets []uint64
	for _, d := range g.take() {
		offsets = append(offsets, d.Pos.Offset)
	}
	if fmt.Sprint(offsets) != "[1 2 3]" {
		t.Errorf("delivered offsets %v, want [1 2 3]: the refused publication took no position", offsets)
	}
}

// A publisher waiting for room goes on once the queue frees some.
func TestFullQueueWaitsForRoom(t *testing.T) {
	h := queueHub(t, Config{Shards: 1, QueueLen: 1, QueueWait: time.Minute})
	g := newGate()
	_, unsub, err := h.Subscribe(g, "s", mustPattern(t, "rooms/1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if _, err := h.Publish("rooms/1", "", []byte("1")); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	done := make(chan error, 1)
	go func() {
		_, err := h.Publish("rooms/1", "", []byte("2"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Publish to a full queue returned (%v) without waiting", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(g.open)
	if err := <-done; err != nil {
		t.Fatalf("Publish once room freed = %v", err)
	}
	flush(t, h)
	if got := g.take(); len(got) != 2 || got[1].Pos.Offset != 2 {
		t.Errorf("delivered %v, want offsets 1 and 2", got)
	}
}

// Each subscriber receives each channel's publications in offset order, every one once, with
// many publishers on many channels sharing few queues, and queues small enough to fill.
func TestFanoutKeepsOffsetOrderUnderConcurrentPublishers(t *testing.T) {
	h := queueHub(t, Config{Shards: 2, QueueLen: 4, QueueWait: time.Minute})
	const channels, publishers, each = 5, 3, 200
	// Two receivers on patterns spanning the channels, two on each channel exactly.
	rs := []*recorder{{}, {}, {}, {}}
	var unsubs []func()
	defer func() {
		for _, u := range unsubs {
			u()
		}
	}()
	subscribe := func(r *recorder, sub, glob string) {
		_, u, err := h.Subscribe(r, sub, mustPattern(t, glob, ""))
		if err != nil {
			t.Fatal(err)
		}
		unsubs = append(unsubs, u)
	}
	subscribe(rs[0], "all", "rooms/**")
	subscribe(rs[1], "all", "rooms/*")
	for c := range channels {
		subscribe(rs[2], fmt.Sprintf("c%d", c), fmt.Sprintf("rooms/%d", c))
		subscribe(rs[3], fmt.Sprintf("c%d", c), fmt.Sprintf("rooms/%d", c))
	}
	var wg sync.WaitGroup
	for c := range channels {
		for range publishers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if _, err := h.Publish(fmt.Sprintf("rooms/%d", c), "", []byte("1")); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	flush(t, h)
	for ri, r := range rs {
		next := map[string]uint64{}
		for _, d := range r.take() {
			next[d.Channel]++
			if d.Pos.Offset != next[d.Channel] {
				t.Fatalf("receiver %d: %s offset %d, want %d: out of order or repeated", ri, d.Channel, d.Pos.Offset, next[d.Channel])
			}
		}
		for c := range channels {
			if n := next[fmt.Sprintf("rooms/%d", c)]; n != publishers*each {
				t.Errorf("receiver %d got %d of rooms/%d, want %d", ri, n, c, publishers*each)
			}
		}
	}
}

// Close hands on what was queued, then refuses publications; Flush waits for the hand-off.
func TestCloseDrainsTheQueues(t *testing.T) {
	h := queueHub(t, Config{Shards: 1})
	g := newGate()
	_, unsub, err := h.Subscribe(g, "s", mustPattern(t, "rooms/1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	for range 3 {
		if _, err := h.Publish("rooms/1", "", []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	<-g.entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush while a delivery is held = %v, want the context's deadline", err)
	}
	closed := make(chan struct{})
	go func() { h.Close(); close(closed) }()
	close(g.open)
	<-closed
	if got := g.take(); len(got) != 3 {
		t.Errorf("delivered %d before Close returned, want the 3 queued", len(got))
	}
	if _, err := h.Publish("rooms/1", "", []byte("1")); !errors.Is(err, ErrHubClosed) {
		t.Errorf("Publish after Close = %v, want ErrHubClosed", err)
	}
}

// Publishers waiting for room get it in the order they came, whatever order they wake in.
func TestWaitingPublishersGoInTurn(t *testing.T) {
	h := queueHub(t, Config{Shards: 1, QueueLen: 1, QueueWait: time.Minute})
	g := newGate()
	_, unsub, err := h.Subscribe(g, "s", mustPattern(t, "rooms/1", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if _, err := h.Publish("rooms/1", "", []byte("1")); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	const n = 5
	offsets := make([]chan uint64, n)
	for i := range n {
		offsets[i] = make(chan uint64, 1)
		go func() {
			pos, err := h.Publish("rooms/1", "", []byte("1"))
			if err != nil {
				t.Error(err)
			}
			offsets[i] <- pos.Offset
		}()
		// The next publisher starts once this one waits.
		for waiting := 0; waiting != i+1; {
			time.Sleep(time.Millisecond)
			q := h.queues[0]
			q.mu.Lock()
			waiting = len(q.waiters)
			q.mu.Unlock()
		}
	}
	close(g.open)
	for i := range n {
		if got, want := <-offsets[i], uint64(i+2); got != want {
			t.Errorf("publisher %d to wait got offset %d, want %d: first come, first served", i, got, want)
		}
	}
}

// The deliveries bound holds a publisher back while the publications queued reach that many
// subscriptions, however few publications they are.
func TestQueueDeliveriesBound(t *testing.T) {
	h := queueHub(t, Config{Shards: 1, QueueDeliveries: 2, QueueWait: 50 * time.Millisecond})
	g := newGate()
	for _, r := range []stream.Receiver{g, &recorder{}} {
		_, unsub, err := h.Subscribe(r, "s", mustPattern(t, "rooms/1", ""))
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
	}
	if _, err := h.Publish("rooms/1", "", []byte("1")); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	if _, err := h.Publish("rooms/1", "", []byte("2")); !errors.Is(err, ErrBusy) {
		t.Errorf("Publish behind 2 queued deliveries with a bound of 2 = %v, want ErrBusy", err)
	}
	close(g.open)
	flush(t, h)
	if _, err := h.Publish("rooms/1", "", []byte("3")); err != nil {
		t.Errorf("Publish once the queue emptied = %v", err)
	}
}
