// Package bustest is the conformance suite every bus runs: the memory bus now, the Redis bus
// when it comes. It checks the contract in the bus package's documentation.
package bustest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Bus is what the suite drives: the methods producers use.
type Bus interface {
	Deliver(r stream.Receiver, sub string, it *stream.Item)
	DeliverDeferred(r stream.Receiver, sub string, it *stream.Item, w *stream.Wakeups)
	Flush(ctx context.Context) error
}

// deferring is a receiver whose writer's wake-ups can be deferred: like a session, it asks for
// one wake-up for everything pushed since its writer last woke.
type deferring struct {
	*receiver
	mu      sync.Mutex
	claimed bool // a wake-up is owed: guarded by mu
	woken   int  // guarded by mu
}

func (d *deferring) PushDeferred(sub string, it *stream.Item, w *stream.Wakeups) {
	d.Push(sub, it)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.claimed {
		d.claimed = true
		w.Add(d)
	}
}

func (d *deferring) Wake() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.claimed = false
	d.woken++
}

func (d *deferring) wakes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.woken
}

// receiver records what reaches it, per subscription, in arrival order.
type receiver struct {
	mu  sync.Mutex
	got map[string][]*stream.Item
}

func newReceiver() *receiver { return &receiver{got: map[string][]*stream.Item{}} }

func (r *receiver) Push(sub string, it *stream.Item) {
	r.mu.Lock()
	r.got[sub] = append(r.got[sub], it)
	r.mu.Unlock()
}

func (r *receiver) items(sub string) []*stream.Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*stream.Item(nil), r.got[sub]...)
}

func message(channel string, offset uint64) *stream.Item {
	return stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition("e", offset), Channel: channel, Data: []byte("1")})
}

// Run runs the suite against buses made by newBus, one per subtest.
func Run(t *testing.T, newBus func(t *testing.T) Bus) {
	t.Run("order and once per subscription, under concurrent producers", func(t *testing.T) {
		b := newBus(t)
		const producers, items = 8, 500
		rs := []*receiver{newReceiver(), newReceiver()}
		var wg sync.WaitGroup
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sub := fmt.Sprintf("s%d", p)
				for i := range items {
					it := message(sub, uint64(i+1))
					for _, r := range rs {
						b.Deliver(r, sub, it)
					}
				}
			}()
		}
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		for ri, r := range rs {
			for p := range producers {
				sub := fmt.Sprintf("s%d", p)
				got := r.items(sub)
				if len(got) != items {
					t.Fatalf("receiver %d sub %s got %d items, want %d: each delivery arrives once", ri, sub, len(got), items)
				}
				for i, it := range got {
					if want := uint64(i + 1); it.Message.Pos.Offset != want {
						t.Fatalf("receiver %d sub %s item %d has offset %d, want %d: items arrive in delivery order", ri, sub, i, it.Message.Pos.Offset, want)
					}
				}
			}
		}
	})
	t.Run("the item is shared, not copied", func(t *testing.T) {
		b := newBus(t)
		r1, r2 := newReceiver(), newReceiver()
		it := message("c", 1)
		b.Deliver(r1, "a", it)
		b.Deliver(r2, "b", it)
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := r1.items("a"); len(got) != 1 || got[0].PosText() != "e:1" || got[0].Message.Channel != "c" {
			t.Errorf("receiver 1 got %v", got)
		}
		if got := r2.items("b"); len(got) != 1 || got[0].Message != it.Message {
			t.Errorf("receiver 2 got %v, want the same message", got)
		}
	})
	t.Run("a deferred delivery arrives in order and wakes its receiver only at Wake", func(t *testing.T) {
		b := newBus(t)
		d := &deferring{receiver: newReceiver()}
		plain := newReceiver()
		var w stream.Wakeups
		for i := uint64(1); i <= 3; i++ {
			it := message("c", i)
			b.DeliverDeferred(d, "s", it, &w)
			b.DeliverDeferred(plain, "s", it, &w)
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := d.wakes(); n != 0 {
			t.Errorf("receiver woken %d times before Wake, want 0", n)
		}
		if w.Len() != 1 {
			t.Errorf("%d wake-ups deferred, want 1: one per receiver whose writer was made runnable", w.Len())
		}
		w.Wake()
		if n := d.wakes(); n != 1 {
			t.Errorf("receiver woken %d times after Wake, want 1", n)
		}
		for _, r := range []*receiver{d.receiver, plain} {
			got := r.items("s")
			if len(got) != 3 {
				t.Fatalf("got %d items, want 3", len(got))
			}
			for i, it := range got {
				if it.Message.Pos.Offset != uint64(i+1) {
					t.Errorf("item %d has offset %d, want %d", i, it.Message.Pos.Offset, i+1)
				}
			}
		}
	})
	t.Run("gaps pass like any item", func(t *testing.T) {
		b := newBus(t)
		r := newReceiver()
		b.Deliver(r, "s", message("c", 1))
		b.Deliver(r, "s", stream.NewGap(&stream.Gap{First: stream.ChannelPosition("e", 2), Last: stream.ChannelPosition("e", 9), Reason: stream.ReasonTooLarge}))
		b.Deliver(r, "s", message("c", 10))
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := r.items("s")
		if len(got) != 3 || got[1].Gap == nil || got[1].Gap.Last.Offset != 9 || got[2].Message.Pos.Offset != 10 {
			t.Errorf("got %v, want message 1, the gap 2-9, message 10", got)
		}
	})
}
