// Package heartbeat runs each connection's periodic beat (a WebSocket ping, an SSE keepalive) on
// one clock shared by all the connections of a transport: the connections due in the same tick
// are beaten together, so an idle node wakes once a tick rather than once per connection per
// interval, and no connection needs a goroutine or a timer of its own between beats.
//
// # Concurrency
//
// A Wheel has no goroutine of its own. While it has members, one timer fires every tick; its
// callback takes the tick's members under Wheel.mu and calls their beats after releasing it, one
// after another. A beat therefore must not block: one that writes to a connection that may not
// be read writes what the socket takes at once (WriteNow) and starts a goroutine only for a
// write that would wait, which its owner waits for. Each member's beat runs
// under that member's own mutex, which Stop also takes, so once Stop has returned the beat is
// not running and never runs again. Lock order: Wheel.mu is never held while a member's mutex
// is taken.
//
// # Lifecycle
//
// New makes an idle wheel. Add arms its timer if it was idle; the timer stops re-arming itself
// once the last member has stopped, so an empty wheel costs nothing and needs no closing.
package heartbeat

import (
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"
)

// maxTick bounds a tick, which bounds how late a beat can be against its exact period and how
// early the first one can come.
const maxTick = time.Second

// minSlots is the fewest ticks an interval is cut into.
const minSlots = 25

// Wheel beats its members once every interval. Safe for concurrent use.
type Wheel struct {
	tick time.Duration // interval / len(slots)

	mu    sync.Mutex
	slots [][]*Member // guarded by mu: the members of each tick's slot, a ring
	cur   int         // guarded by mu: the slot beaten last
	n     int         // guarded by mu: members
	timer *time.Timer // guarded by mu; nil until first armed
	armed bool        // guarded by mu: the timer is set, or its callback is running
	next  time.Time   // guarded by mu: when the next tick is due
	due   []*Member   // owned by the running tick: the members it beats
}

// New returns a wheel that beats each member every interval, which must be positive. The
// interval is cut into at least 25 ticks of at most a second; a member's first beat comes up
// to one tick before a full interval has passed since it was added, and the later ones an
// interval apart, or later by as long as the beats before them in their tick took.
func New(interval time.Duration) *Wheel {
	n := max(minSlots, int((interval+maxTick-1)/maxTick))
	return &Wheel{tick: max(interval/time.Duration(n), time.Nanosecond), slots: make([][]*Member, n)}
}

// Member is one connection's place on a wheel.
type Member struct {
	w    *Wheel
	beat func()
	slot int // guarded by w.mu: its slot, or -1 once removed
	idx  int // guarded by w.mu: its index in the slot

	mu      sync.Mutex // held while beat runs
	stopped bool       // guarded by mu
}

// Add calls beat once every interval from now on until the returned member is stopped. beat
// runs on the wheel's timer goroutine, serially with the other members' beats: it must not
// block.
func (w *Wheel) Add(beat func()) *Member {
	m := &Member{w: w, beat: beat}
	w.mu.Lock()
	defer w.mu.Unlock()
	// The slot just beaten comes round again a whole interval from its tick.
	m.slot = w.cur
	m.idx = len(w.slots[m.slot])
	w.slots[m.slot] = append(w.slots[m.slot], m)
	w.n++
	if !w.armed {
		w.armed = true
		w.next = time.Now().Add(w.tick)
		if w.timer == nil {
			w.timer = time.AfterFunc(w.tick, w.fire)
		} else {
			w.timer.Reset(w.tick)
		}
	}
	return m
}

// Stop removes m from its wheel. Once Stop has returned, m's beat is not running and never
// runs again. It may be called more than once, but not from m's own beat.
func (m *Member) Stop() {
	w := m.w
	w.mu.Lock()
	if m.slot >= 0 {
		s := w.slots[m.slot]
		last := len(s) - 1
		s[m.idx] = s[last]
		s[m.idx].idx = m.idx
		s[last] = nil
		w.slots[m.slot] = s[:last]
		m.slot = -1
		w.n--
	}
	w.mu.Unlock()
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
}

// fire is the timer's callback: it beats the next slot's members and re-arms the timer for the
// tick after, unless the wheel has emptied.
func (w *Wheel) fire() {
	w.mu.Lock()
	w.cur = (w.cur + 1) % len(w.slots)
	w.due = append(w.due[:0], w.slots[w.cur]...)
	w.mu.Unlock()

	for _, m := range w.due {
		m.mu.Lock()
		if !m.stopped {
			m.beat()
		}
		m.mu.Unlock()
	}
	clear(w.due) // hold no stopped member until the next tick

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		w.armed = false
		return
	}
	// Ticks keep to their schedule; one that is late runs at once, until they have caught up.
	w.next = w.next.Add(w.tick)
	w.timer.Reset(max(time.Until(w.next), 0))
}

// WriteNow writes b to raw's descriptor in one write(2) if the socket has room for it now, never
// waiting for room: a beat runs on the wheel's goroutine, and a transport writes most of its
// beats this way, leaving only those that would wait to a goroutine. It reports whether b was
// dealt with: written whole (nil error), or cut, the socket having had room for part of it only
// (an error wrapping io.ErrShortWrite: the stream is broken mid-frame). false means nothing went
// out (no room, or an error the caller's waiting write meets again).
func WriteNow(raw syscall.RawConn, b []byte) (bool, error) {
	var n int
	var werr error
	if err := raw.Write(func(fd uintptr) bool {
		n, werr = syscall.Write(int(fd), b)
		return true // one try
	}); err != nil {
		return false, nil
	}
	switch {
	case n == len(b) && werr == nil:
		return true, nil
	case n > 0:
		return true, fmt.Errorf("cut after %d of %d bytes: %w", n, len(b), io.ErrShortWrite)
	default:
		return false, nil
	}
}
