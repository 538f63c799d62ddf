package channel

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Defaults for the zero value of the fan-out fields of Config.
const (
	// DefaultQueueLen, DefaultQueueDeliveries and DefaultQueueBytes bound each fan-out queue.
	// The deliveries bound sets how far behind a queue may fall, whatever the audience: 16,384
	// deliveries are a few tens of milliseconds of fan-out, and 16 publications to 1,000
	// subscribers, enough for each writer to take several in one write. A deeper queue would
	// only add to every publication's latency once publishers outpace the fan-out; holding them
	// back (they wait for room) is the better answer then. The publications bound keeps many
	// small fan-outs from queueing without end, the bytes bound their data.
	DefaultQueueLen        = 256
	DefaultQueueDeliveries = 16 << 10
	DefaultQueueBytes      = 8 << 20
	// DefaultQueueWait is how long a publish waits for room in a full queue before it is
	// refused: as long as a session lets a client stay too slow (session.Config.SlowTimeout).
	DefaultQueueWait = 10 * time.Second
)

// wakeAfter is how many deliveries a fan-out queue makes before it wakes the writers they made
// runnable, if its batch has not ended first. A batch is what the queue held, so it is about
// Config.QueueDeliveries long, a few milliseconds of pushes, and its writers wake at its end,
// each to every publication of the batch it receives. Only a publication reaching many more
// subscribers than that wakes its first writers while it is still being handed to the rest.
const wakeAfter = 32 << 10

// jobBytes is what a queued publication costs besides its data: the item, the message, their
// position text and the pooled slice header, roughly.
const jobBytes = 256

// ErrBusy is what Publish returns, wrapped in a *BusyError, when the fan-out queue of the
// channel's shard stayed full for Config.QueueWait: the node hands publications to subscribers
// more slowly than they are published. The publication got no position; publishing it again
// later is safe.
var ErrBusy = errors.New("channel: fan-out queue full")

// ErrHubClosed is what Publish returns once Close has begun.
var ErrHubClosed = errors.New("channel: hub closed")

// ErrBroker wraps the broker's failure to give a position: the publication or subscription
// took none and may be retried (a shared broker's Redis did not answer).
var ErrBroker = errors.New("channel: the broker did not answer")

// BusyError is Publish's refusal when the fan-out queue stayed full.
type BusyError struct {
	Channel  string
	Waited   time.Duration
	Queued   int // publications queued or reserved in the shard when it gave up
	MaxQueue int // Config.QueueLen
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("channel: the fan-out queue for %q stayed full for %s (%d publications in it, at most %d): subscribers on this node are being handed publications more slowly than they are published",
		e.Channel, e.Waited, e.Queued, e.MaxQueue)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// job is one publication waiting for its fan-out: the item and the subscriptions it reaches,
// collected when its position was assigned.
type job struct {
	it    *stream.Item
	subs  *[]*subscription // pooled in Hub.targets
	bytes int              // what it counts against the queue's byte bound
}

// queue is one shard's fan-out: a bounded FIFO of publications and the goroutine that hands
// each to the bus. Every publication to one channel goes through the same queue, appended
// under the channel's lock, so each subscriber receives a channel's publications in offset
// order.
type queue struct {
	h *Hub // read-only

	mu sync.Mutex
	// The fields below are guarded by mu.
	jobs  []job // waiting, oldest first
	spare []job // the previous batch's storage, reused
	// n and bytes count the publications queued or being handed on, and those reserved but not
	// yet queued, with what they cost; deliveries counts the deliveries of those queued or
	// being handed on.
	n, bytes, deliveries int
	done                 uint64 // publications handed on, ever
	queued               uint64 // publications queued, ever
	refused              uint64 // publications refused as busy, ever
	// waiters are the publications waiting for room, first come first served.
	waiters []*waiter
	// changed is closed, and cleared, when the queue hands a publication on: what a Flush
	// waits on. Nil while nobody waits.
	changed chan struct{}
	closed  bool
	started bool // the goroutine was started, by the first push
	idle    bool // the goroutine waits on work

	work    chan struct{} // one token: the goroutine has something to do
	stopped chan struct{} // closed when the goroutine has returned
}

func newQueue(h *Hub) *queue {
	return &queue{h: h, work: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// changedLocked returns the channel closed at the next change.
func (q *queue) changedLocked() <-chan struct{} {
	if q.changed == nil {
		q.changed = make(chan struct{})
	}
	return q.changed
}

func (q *queue) notifyLocked() {
	if q.changed != nil {
		close(q.changed)
		q.changed = nil
	}
}

// waiter is a publication waiting for room in a full queue.
type waiter struct {
	cost    int
	granted chan struct{} // closed once the room is taken for it, or the queue closed
	err     error         // set before granted is closed: nil, or ErrHubClosed
}

// fitsLocked reports whether a publication of cost bytes fits now: the queue is below its
// bounds of publications and deliveries, and has room for its bytes. Its own deliveries are
// not known until it has its position, so it may take the queue past the deliveries bound,
// by one publication per publisher at most. An empty queue always has room, so a publication
// larger than the byte bound is not refused for ever.
func (q *queue) fitsLocked(cost int) bool {
	cfg := &q.h.cfg
	return q.n == 0 || q.n < cfg.QueueLen && q.deliveries < cfg.QueueDeliveries && q.bytes+cost <= cfg.QueueBytes
}

// reserve takes room for one publication of cost bytes. When there is none, or other
// publishers are already waiting, it waits its turn, first come first served, up to the hub's
// QueueWait, and then gives up with a *BusyError.
func (q *queue) reserve(channel string, cost int) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrHubClosed
	}
	if len(q.waiters) == 0 && q.fitsLocked(cost) {
		q.n++
		q.bytes += cost
		q.mu.Unlock()
		return nil
	}
	w := &waiter{cost: cost, granted: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	q.mu.Unlock()

	timer := time.NewTimer(q.h.cfg.QueueWait)
	defer timer.Stop()
	select {
	case <-w.granted:
		return w.err
	case <-timer.C:
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.granted: // granted as the timer fired
		return w.err
	default:
	}
	for i, o := range q.waiters {
		if o == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
	}
	q.refused++
	// A smaller publication behind this one may fit now that it no longer waits ahead.
	q.grantLocked()
	return &BusyError{Channel: channel, Waited: q.h.cfg.QueueWait, Queued: q.n, MaxQueue: q.h.cfg.QueueLen}
}

// grantLocked hands the room there is to the waiting publishers, in the order they came, and
// stops at the first that does not fit. Once the queue is closed it releases them all.
func (q *queue) grantLocked() {
	for len(q.waiters) > 0 {
		w := q.waiters[0]
		switch {
		case q.closed:
			w.err = ErrHubClosed
		case q.fitsLocked(w.cost):
			q.n++
			q.bytes += w.cost
		default:
			return
		}
		q.waiters[0] = nil
		q.waiters = q.waiters[1:]
		close(w.granted)
	}
}

// unreserve gives back what reserve took, for a publication that is not queued after all.
func (q *queue) unreserve(cost int) {
	q.mu.Lock()
	q.n--
	q.bytes -= cost
	q.grantLocked()
	wake := q.closed && q.idle // a closing queue's goroutine waits for the reservations to end
	q.idle = q.idle && !wake
	q.mu.Unlock()
	if wake {
		q.poke()
	}
}

// force takes room for cost whatever the bounds: for a gap marker, which is small and must
// not wait behind the publications it is about.
func (q *queue) force(cost int) {
	q.mu.Lock()
	q.n++
	q.bytes += cost
	q.mu.Unlock()
}

// poke wakes the goroutine, without blocking.
func (q *queue) poke() {
	select {
	case q.work <- struct{}{}:
	default:
	}
}

// push queues j, for which reserve took cost. The caller holds the channel's lock, which is
// what keeps one channel's publications in order in the queue.
func (q *queue) push(j job, cost int) {
	q.mu.Lock()
	q.jobs = append(q.jobs, j)
	q.bytes += j.bytes - cost
	q.deliveries += len(*j.subs)
	q.queued++
	if !q.started {
		// Started by the first publication that needs it, so a hub nobody publishes through
		// holds no goroutine.
		q.started = true
		go q.run()
	}
	wake := q.idle
	q.idle = false
	q.mu.Unlock()
	if wake {
		q.poke()
	}
}

// run hands the queued publications to the bus, oldest first, until the queue is closed,
// empty, and no publication that reserved room before the close is still to be queued. It
// takes every publication waiting at once, delivers them, deferring the writers' wake-ups
// (stream.Wakeups), and wakes the writers after every wakeAfter deliveries and at the end of
// the batch: a subscriber's writer then wakes once for several publications, not once per
// publication.
func (q *queue) run() {
	defer close(q.stopped)
	var w stream.Wakeups
	woke := false
	for {
		if woke {
			// Let the writers just woken run before the next batch is taken: when they are what
			// holds the node back, the publications that arrive meanwhile join the next batch,
			// and each writer takes them in one write. On an idle node it is one pass through
			// the scheduler per batch, not one per writer.
			runtime.Gosched()
		}
		q.mu.Lock()
		for len(q.jobs) == 0 {
			if q.closed && q.n == 0 {
				q.mu.Unlock()
				return
			}
			q.idle = true
			q.mu.Unlock()
			<-q.work
			q.mu.Lock()
		}
		batch := q.jobs
		q.jobs = q.spare[:0]
		q.spare = nil
		q.mu.Unlock()

		pushed := 0
		for i := range batch {
			j := &batch[i]
			n := 0
			for _, sn := range *j.subs {
				if sn.deliver(q.h.bus, j.it, &w) {
					n++
				}
				if pushed++; pushed >= wakeAfter {
					w.Wake()
					pushed = 0
				}
			}
			q.h.delivered.Add(uint64(n))
			deliveries := len(*j.subs)
			clear(*j.subs) // the pool must not keep subscriptions alive
			*j.subs = (*j.subs)[:0]
			q.h.targets.Put(j.subs)
			if i == len(batch)-1 {
				woke = w.Len() > 0
				w.Wake()
			}
			q.mu.Lock()
			q.n--
			q.bytes -= j.bytes
			q.deliveries -= deliveries
			q.done++
			q.notifyLocked()
			q.grantLocked()
			q.mu.Unlock()
		}
		clear(batch) // nor the items
		q.mu.Lock()
		q.spare = batch[:0]
		q.mu.Unlock()
	}
}

// flush waits until every publication queued before it was called has been handed on.
func (q *queue) flush(ctx context.Context) error {
	q.mu.Lock()
	target := q.queued
	for q.done < target {
		ch := q.changedLocked()
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	return nil
}

// close stops taking publications; the goroutine hands on what is queued, and what was
// reserved before and is queued after, then returns. A queue that never started its goroutine
// starts it now, to do the same.
func (q *queue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	q.notifyLocked()
	q.grantLocked()
	if !q.started {
		q.started = true
		go q.run()
	}
	q.mu.Unlock()
	q.poke()
}

// shard returns the queue of the channel name: FNV-1a of the name, so one channel always has
// the same queue.
func (h *Hub) shard(name string) *queue {
	hash := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		hash ^= uint32(name[i])
		hash *= 16777619
	}
	return h.queues[hash%uint32(len(h.queues))]
}

// defaultShards is Config.Shards' default: one fan-out goroutine per processor, at least two,
// so one busy channel leaves others a queue of their own.
func defaultShards() int { return max(2, runtime.GOMAXPROCS(0)) }
