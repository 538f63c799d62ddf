package cluster

import "sync"

// queue is a FIFO bounded by items and bytes, with one consumer that takes everything waiting
// at once. push never blocks: past a bound it refuses.
type queue[T any] struct {
	maxItems, maxBytes int // read-only

	mu     sync.Mutex
	items  []T   // guarded by mu
	costs  []int // guarded by mu: each item's cost, for done
	bytes  int   // guarded by mu: of items waiting or being handled
	n      int   // guarded by mu: items waiting or being handled
	closed bool  // guarded by mu
	wake   chan struct{}
}

func newQueue[T any](maxItems, maxBytes int) *queue[T] {
	return &queue[T]{maxItems: maxItems, maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// push queues v unless a bound would be passed (an empty queue takes anything).
func (q *queue[T]) push(v T, cost int) bool {
	q.mu.Lock()
	if q.closed || q.n > 0 && (q.n >= q.maxItems || q.bytes+cost > q.maxBytes) {
		q.mu.Unlock()
		return false
	}
	q.addLocked(v, cost)
	q.mu.Unlock()
	q.poke()
	return true
}

// force queues v whatever the bounds: for a small report that must not be lost.
func (q *queue[T]) force(v T) {
	q.mu.Lock()
	if !q.closed {
		q.addLocked(v, 0)
	}
	q.mu.Unlock()
	q.poke()
}

func (q *queue[T]) addLocked(v T, cost int) {
	q.items = append(q.items, v)
	q.costs = append(q.costs, cost)
	q.bytes += cost
	q.n++
}

func (q *queue[T]) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take waits for items and returns all of them; false once the queue is closed and empty.
// The consumer calls done with what take returned once it has handled it.
func (q *queue[T]) take() ([]T, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			batch := q.items
			q.items = nil
			q.mu.Unlock()
			return batch, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		<-q.wake
	}
}

// done frees the room of a batch take returned.
func (q *queue[T]) done(batch []T) {
	q.mu.Lock()
	k := len(batch)
	for _, c := range q.costs[:k] {
		q.bytes -= c
	}
	q.costs = q.costs[k:]
	q.n -= k
	q.mu.Unlock()
}

// close refuses new items; take returns what is left, then false.
func (q *queue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.poke()
}

// len is how many items wait or are being handled.
func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}
