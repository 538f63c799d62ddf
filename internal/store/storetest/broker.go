package storetest

import (
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/stream"
)

// NewBroker returns a fresh broker, sharing nothing with the brokers of other subtests, whose
// offsets roll to a new epoch past maxOffset.
type NewBroker func(t *testing.T, maxOffset uint64) channel.Broker

// RunBroker runs the channel.Broker suite.
func RunBroker(t *testing.T, newBroker NewBroker) {
	t.Run("head before the first publication is offset 0; next counts from 1 in one epoch", func(t *testing.T) {
		b := newBroker(t, 0)
		h := must(t)(b.Head("a/b"))
		if !stream.ValidEpoch(h.Epoch) || h.Offset != 0 {
			t.Fatalf("Head = %v, want a valid epoch at offset 0", h)
		}
		for i := uint64(1); i <= 5; i++ {
			p := must(t)(b.Next("a/b"))
			if p.Epoch != h.Epoch || p.Offset != i {
				t.Fatalf("Next #%d = %v, want %s:%d", i, p, h.Epoch, i)
			}
		}
		if got := must(t)(b.Head("a/b")); got.Epoch != h.Epoch || got.Offset != 5 {
			t.Fatalf("Head after 5 = %v, want %s:5", got, h.Epoch)
		}
	})
	t.Run("next without head starts an epoch at offset 1", func(t *testing.T) {
		b := newBroker(t, 0)
		p := must(t)(b.Next("fresh"))
		if !stream.ValidEpoch(p.Epoch) || p.Offset != 1 {
			t.Fatalf("Next = %v, want a valid epoch at offset 1", p)
		}
	})
	t.Run("channels are independent", func(t *testing.T) {
		b := newBroker(t, 0)
		must(t)(b.Next("x"))
		must(t)(b.Next("x"))
		y := must(t)(b.Next("y"))
		if y.Offset != 1 {
			t.Fatalf("first Next of y = %v, want offset 1", y)
		}
		if x := must(t)(b.Head("x")); x.Offset != 2 {
			t.Fatalf("Head of x = %v, want offset 2", x)
		}
	})
	t.Run("past the max offset a new epoch starts at 1", func(t *testing.T) {
		b := newBroker(t, 3)
		first := must(t)(b.Next("r"))
		must(t)(b.Next("r"))
		third := must(t)(b.Next("r"))
		if third.Epoch != first.Epoch || third.Offset != 3 {
			t.Fatalf("third Next = %v, want %s:3", third, first.Epoch)
		}
		if h := must(t)(b.Head("r")); h != third {
			t.Fatalf("Head at the max = %v, want %v: only a publication rolls the epoch", h, third)
		}
		fourth := must(t)(b.Next("r"))
		if fourth.Epoch == first.Epoch || !stream.ValidEpoch(fourth.Epoch) || fourth.Offset != 1 {
			t.Fatalf("fourth Next = %v, want a new epoch (not %s) at offset 1", fourth, first.Epoch)
		}
	})
	t.Run("forget ends the stream", func(t *testing.T) {
		b := newBroker(t, 0)
		old := must(t)(b.Next("f"))
		b.Forget("f")
		h := must(t)(b.Head("f"))
		if h.Epoch == old.Epoch || h.Offset != 0 {
			t.Fatalf("Head after Forget = %v, want a new epoch (not %s) at offset 0", h, old.Epoch)
		}
		b.Forget("f")
		if p := must(t)(b.Next("f")); p.Epoch == h.Epoch || p.Offset != 1 {
			t.Fatalf("Next after a second Forget = %v, want a third epoch at offset 1", p)
		}
		b.Forget("never-seen") // forgetting a channel with no stream is harmless
	})
	t.Run("concurrent next hands out every offset once", func(t *testing.T) {
		// The hub serializes one node's calls per channel; a shared broker also sees other
		// nodes' calls at the same time.
		b := newBroker(t, 0)
		const workers, each = 8, 40
		var mu sync.Mutex
		var got []uint64
		epochs := map[string]bool{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					p, err := b.Next("c")
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					got = append(got, p.Offset)
					epochs[p.Epoch] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
		for i, o := range got {
			if o != uint64(i+1) {
				t.Fatalf("offset #%d is %d: want each of 1..%d exactly once", i, o, workers*each)
			}
		}
		if len(epochs) != 1 {
			t.Fatalf("epochs %v, want one", epochs)
		}
	})
}

func must(t *testing.T) func(stream.Position, error) stream.Position {
	return func(p stream.Position, err error) stream.Position {
		t.Helper()
		if err != nil {
			t.Fatal(fmt.Errorf("broker: %w", err))
		}
		return p
	}
}
