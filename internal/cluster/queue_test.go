package cluster

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestQueueBounds(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxItems, bytes int
		costs           []int
		want            []bool // what each push answers
	}{
		{"by items", 2, 1000, []int{1, 1, 1}, []bool{true, true, false}},
		{"by bytes", 100, 10, []int{6, 5, 4, 1}, []bool{true, false, true, false}},
		{"bytes to the brim", 100, 10, []int{4, 6, 0}, []bool{true, true, true}},
		{"an empty queue takes anything", 1, 10, []int{1000, 1}, []bool{true, false}},
		{"an empty queue takes past the item bound", 0, 10, []int{3, 1}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue[int](tc.maxItems, tc.bytes)
			var got []bool
			for i, c := range tc.costs {
				got = append(got, q.push(i, c))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("pushes of costs %v answered %v, want %v", tc.costs, got, tc.want)
			}
		})
	}
}

func TestQueueTakeDone(t *testing.T) {
	q := newQueue[string](3, 100)
	for _, s := range []string{"a", "b", "c"} {
		if !q.push(s, 10) {
			t.Fatalf("push %s refused", s)
		}
	}
	if q.push("d", 1) {
		t.Fatal("a push past the item bound was taken")
	}
	batch, ok := q.take()
	if !ok || !slices.Equal(batch, []string{"a", "b", "c"}) {
		t.Fatalf("take = %q, %v; want [a b c], true", batch, ok)
	}
	// Taken but not done: still room the consumer holds.
	if q.len() != 3 || q.push("d", 1) {
		t.Fatalf("before done: len %d, a push taken; want 3, refused", q.len())
	}
	q.done(batch)
	if q.len() != 0 {
		t.Fatalf("after done: len %d, want 0", q.len())
	}
	if !q.push("d", 90) || q.push("e", 11) {
		t.Fatal("after done: want room for 100 bytes")
	}
	// A second batch frees only its own room.
	batch, _ = q.take()
	if !q.push("f", 5) || !q.push("g", 5) {
		t.Fatal("pushes behind a batch being handled were refused")
	}
	q.done(batch)
	if q.len() != 2 {
		t.Fatalf("len %d, want 2", q.len())
	}
	if q.push("h", 91) || !q.push("h", 90) {
		t.Fatal("want room for exactly 90 bytes besides f and g")
	}
}

func TestQueueForce(t *testing.T) {
	q := newQueue[string](1, 10)
	q.push("a", 10)
	q.force("gap")
	if q.push("b", 0) {
		t.Fatal("a push into a full queue was taken")
	}
	batch, ok := q.take()
	if !ok || !slices.Equal(batch, []string{"a", "gap"}) {
		t.Fatalf("take = %q, %v; want [a gap], true", batch, ok)
	}
	q.done(batch)
	if q.len() != 0 || !q.push("c", 10) {
		t.Fatalf("after done: len %d or no room; want an empty queue", q.len())
	}
}

func TestQueueClose(t *testing.T) {
	q := newQueue[string](10, 100)
	q.push("a", 1)
	q.push("b", 1)
	q.close()
	if q.push("c", 1) {
		t.Error("a closed queue took a push")
	}
	q.force("d")
	batch, ok := q.take()
	if !ok || !slices.Equal(batch, []string{"a", "b"}) {
		t.Fatalf("take after close = %q, %v; want [a b], true", batch, ok)
	}
	q.done(batch)
	if batch, ok := q.take(); ok || batch != nil {
		t.Fatalf("take of a closed, drained queue = %q, %v; want nil, false", batch, ok)
	}
}

func TestQueueTakeWaits(t *testing.T) {
	q := newQueue[int](10, 100)
	got := make(chan []int)
	go func() {
		var all []int
		for {
			batch, ok := q.take()
			if !ok {
				got <- all
				return
			}
			all = append(all, batch...)
			q.done(batch)
		}
	}()
	for i := range 5 {
		q.push(i, 1)
	}
	q.close()
	if all := <-got; !slices.Equal(all, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("took %v, want [0 1 2 3 4]", all)
	}
}

// TestQueueConcurrent has producers push against a small bound while the consumer takes: each
// producer's accepted items arrive once, in its order, and the bounds are never passed.
func TestQueueConcurrent(t *testing.T) {
	const producers, each, maxItems, maxBytes = 8, 2000, 64, 64 * 3
	type item struct{ p, i int }
	q := newQueue[item](maxItems, maxBytes)
	accepted := make([]int, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				if q.push(item{p, i}, 1+i%5) {
					accepted[p]++
				}
			}
		})
	}
	done := make(chan struct{})
	last := make([]int, producers)
	counts := make([]int, producers)
	var fault error
	go func() {
		defer close(done)
		for i := range last {
			last[i] = -1
		}
		for {
			batch, ok := q.take()
			if !ok {
				return
			}
			q.mu.Lock()
			n, b := q.n, q.bytes
			q.mu.Unlock()
			if fault == nil && (n > maxItems || b > maxBytes) {
				fault = fmt.Errorf("the queue holds %d items of %d bytes, past %d and %d", n, b, maxItems, maxBytes)
			}
			for _, it := range batch {
				if fault == nil && it.i <= last[it.p] {
					fault = fmt.Errorf("producer %d: item %d after %d", it.p, it.i, last[it.p])
				}
				last[it.p] = it.i
				counts[it.p]++
			}
			q.done(batch)
		}
	}()
	wg.Wait()
	q.close()
	<-done
	if fault != nil {
		t.Fatal(fault)
	}
	if !slices.Equal(counts, accepted) {
		t.Fatalf("took %v items per producer, want the %v accepted", counts, accepted)
	}
	if q.len() != 0 {
		t.Fatalf("len %d after everything was done, want 0", q.len())
	}
}
