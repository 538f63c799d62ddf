package durable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// model is what a test knows of one item from what the Queue handed out.
type model struct {
	lease    string    // the connection holding its lease, per the deliveries seen
	deadline time.Time // that lease's end
	last     string    // the connection it was last delivered to
	attempts int
	fate     string // "", "acked", "parked", "dropped", "broadcast"
	ackedBy  string
}

// run is one random run of a Queue against the model.
type run struct {
	t     *testing.T
	q     *Queue
	lim   Limits
	mode  Mode
	now   time.Time
	next  uint64 // the next offset to publish
	items map[uint64]*model
	bound []string             // bound connections, in bind order
	alive map[string]time.Time // each bound connection's deadline: Touch renews it
	conns int                  // connections made
	// markers received, by reason: lost counts and ranges.
	lost    map[stream.Reason]uint64
	ranges  map[stream.Reason][][2]uint64
	dropped int                  // Outcome.Dropped summed
	parked  int                  // Outcome.Parked summed
	seen    map[string]uint64    // broadcast: the last offset each connection got
	gaps    map[*stream.Gap]bool // markers counted: one goes to every bound connection
}

const epoch = "e1"

func (r *run) pos(off uint64) stream.Position { return stream.ChannelPosition(epoch, off) }

func (r *run) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("at %s: %s", r.now.Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// take checks one step's outcome against the model and folds it in.
func (r *run) take(o Outcome) {
	r.t.Helper()
	r.dropped += o.Dropped
	r.parked += o.Parked
	if o.Depth > r.lim.MaxItems || r.q.Bytes() > r.lim.MaxBytes {
		r.fail("queue holds %d items, %d bytes: past its bounds %d, %d", o.Depth, r.q.Bytes(), r.lim.MaxItems, r.lim.MaxBytes)
	}
	if o.Depth != r.q.Depth() {
		r.fail("outcome says depth %d, queue %d", o.Depth, r.q.Depth())
	}
	for _, d := range o.Deliveries {
		if !slices.Contains(r.bound, d.Conn.ID) {
			r.fail("delivery to %s, which is not bound", d.Conn.ID)
		}
		for _, e := range d.Entries {
			if g := e.Gap; g != nil {
				if r.gaps[g] {
					continue
				}
				r.gaps[g] = true
				r.lost[g.Reason] += g.Lost
				r.ranges[g.Reason] = append(r.ranges[g.Reason], [2]uint64{g.First.Offset, g.Last.Offset})
				continue
			}
			off := e.Msg.Pos.Offset
			m := r.items[off]
			if m == nil {
				r.fail("delivered %d, never appended", off)
			}
			if r.mode == Broadcast {
				if e.Attempt != 0 {
					r.fail("broadcast entry with attempt %d", e.Attempt)
				}
				if off <= r.seen[d.Conn.ID] {
					r.fail("%s got %d after %d: out of order", d.Conn.ID, off, r.seen[d.Conn.ID])
				}
				r.seen[d.Conn.ID] = off
				m.fate = "broadcast"
				continue
			}
			if m.fate != "" {
				r.fail("delivered %d, already %s", off, m.fate)
			}
			// Never two live leases: the last one must have ended (expired, or its
			// connection went) before another is given.
			if m.lease != "" {
				r.fail("%d leased to %s while %s holds a live lease until %s", off, d.Conn.ID, m.lease, m.deadline.Format("15:04:05.000"))
			}
			m.attempts++
			if e.Attempt != m.attempts {
				r.fail("%d: attempt %d, the model counts %d", off, e.Attempt, m.attempts)
			}
			if m.attempts > r.lim.MaxAttempts {
				r.fail("%d delivered %d times, past MaxAttempts %d", off, m.attempts, r.lim.MaxAttempts)
			}
			m.lease, m.deadline, m.last = d.Conn.ID, r.now.Add(r.lim.Lease), d.Conn.ID
		}
	}
	if r.mode == Broadcast {
		// Every bound connection gets every broadcast delivery of a step.
		if len(o.Deliveries) > 0 && len(o.Deliveries) != len(r.bound) {
			r.fail("broadcast to %d connections, %d bound", len(o.Deliveries), len(r.bound))
		}
	}
	// The leases per connection stay within MaxInFlight.
	held := map[string]int{}
	for _, m := range r.items {
		if m.lease != "" {
			held[m.lease]++
		}
	}
	for c, n := range held {
		if n > r.lim.MaxInFlight {
			r.fail("%s holds %d leases, past MaxInFlight %d", c, n, r.lim.MaxInFlight)
		}
	}
}

// release ends, in the model, the leases a step ended: those past their deadline (Expire), or
// a connection's (Unbind). An item released after its last attempt is parked.
func (r *run) release(match func(m *model) bool) {
	for _, m := range r.items {
		if m.lease != "" && match(m) {
			m.lease = ""
			if m.attempts >= r.lim.MaxAttempts {
				m.fate = "parked"
			}
		}
	}
}

func (r *run) publish(n int) {
	var ents []Entry
	for i := 0; i < n; i++ {
		r.next++
		data := []byte(fmt.Sprintf(`"%0*d"`, rand.IntN(200)+1, r.next))
		ents = append(ents, Entry{Msg: &stream.Message{Pos: r.pos(r.next), Channel: "jobs", Data: data}})
		r.items[r.next] = &model{}
	}
	// Sometimes the same publications again: appends are idempotent by position.
	if rand.IntN(4) == 0 && len(ents) > 0 {
		ents = append(ents, ents[:1+rand.IntN(len(ents))]...)
	}
	r.take(r.q.Append(ents, r.now))
}

func (r *run) bind() {
	r.conns++
	id := fmt.Sprintf("c%d", r.conns)
	r.bound = append(r.bound, id)
	r.alive[id] = r.now.Add(r.lim.ConnTTL)
	r.take(r.q.Bind(Conn{ID: id}, r.now))
}

// touch renews every bound connection but the ones skip leaves out: their node stopped.
func (r *run) touch(skip func(string) bool) {
	var ids []string
	for _, id := range r.bound {
		if !skip(id) {
			ids = append(ids, id)
			r.alive[id] = r.now.Add(r.lim.ConnTTL)
		}
	}
	r.q.Touch(ids, r.now)
}

func (r *run) unbind(id string) {
	r.bound = slices.DeleteFunc(r.bound, func(c string) bool { return c == id })
	o := r.q.Unbind(id, r.now)
	r.release(func(m *model) bool { return m.lease == id })
	r.take(o)
}

func (r *run) expire() {
	o := r.q.Expire(r.now)
	// Connections past their deadline are unbound first, their leases with them.
	for _, id := range slices.Clone(r.bound) {
		if !r.now.Before(r.alive[id]) {
			r.bound = slices.DeleteFunc(r.bound, func(c string) bool { return c == id })
			r.release(func(m *model) bool { return m.lease == id })
		}
	}
	r.release(func(m *model) bool { return !r.now.Before(m.deadline) })
	r.take(o)
}

// ack acks off from id and checks the answer against the model.
func (r *run) ack(id string, off uint64) {
	m := r.items[off]
	want := NotFound
	switch {
	case m == nil:
	case r.mode != Single:
	case m.fate == "acked" && m.ackedBy == id:
		want = AlreadyAcked
	case m.fate != "":
	case m.lease == id, m.lease == "" && m.last == id:
		want = Acked
	}
	got, o := r.q.Ack(id, r.pos(off), r.now)
	if got != want {
		r.fail("ack of %d by %s: %s, want %s (model: %+v)", off, id, got, want, m)
	}
	if got == Acked {
		m.fate, m.ackedBy, m.lease = "acked", id, ""
		if o.Acked != 1 {
			r.fail("ack settled %d items", o.Acked)
		}
	}
	r.take(o)
}

// TestQueueModel drives Queues of both modes through random interleavings of publications,
// binds, unbinds, acks (the holder's, repeated ones, other connections', unknown positions),
// expiries and time, checking every step against a model: no item is leased to two
// connections under overlapping live leases; a lease is given only to a bound connection with
// room; attempts count up to MaxAttempts; an ack is Acked, AlreadyAcked or NotFound exactly as
// the rules say; the bounds hold. Then it drains the queue and checks that every publication
// was acked exactly once, parked or dropped (single), or delivered or dropped (broadcast), and
// that the markers' lost counts add up to exactly what was parked and dropped, their ranges
// covering each.
func TestQueueModel(t *testing.T) {
	for seed := uint64(1); seed <= 400; seed++ {
		for _, mode := range []Mode{Single, Broadcast} {
			t.Run(fmt.Sprintf("%s/%d", mode, seed), func(t *testing.T) { modelRun(t, mode, seed) })
		}
	}
}

func modelRun(t *testing.T, mode Mode, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	lim := Limits{MaxItems: 1 + rng.IntN(12), MaxBytes: 1024 + rng.IntN(2048), Lease: time.Second,
		MaxAttempts: 1 + rng.IntN(4), MaxInFlight: 1 + rng.IntN(3), IdleTTL: time.Hour,
		ConnTTL: time.Duration(2+rng.IntN(4)) * time.Second}.WithDefaults()
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &run{t: t, q: NewQueue(Def{Channel: "jobs", Mode: mode}, lim, start), lim: lim, mode: mode, now: start,
		items: map[uint64]*model{}, lost: map[stream.Reason]uint64{}, ranges: map[stream.Reason][][2]uint64{},
		seen: map[string]uint64{}, gaps: map[*stream.Gap]bool{}, alive: map[string]time.Time{}}
	for step := 0; step < 300; step++ {
		switch k := rng.IntN(20); {
		case k < 5:
			r.publish(1 + rng.IntN(4))
		case k < 7:
			if len(r.bound) < 4 {
				r.bind()
			}
		case k < 8:
			if len(r.bound) > 0 {
				r.unbind(r.bound[rng.IntN(len(r.bound))])
			}
		case k < 13:
			// The holder's ack, mostly; sometimes another connection's, or one sent again.
			var held []uint64
			for off, m := range r.items {
				if m.lease != "" || m.fate == "acked" {
					held = append(held, off)
				}
			}
			slices.Sort(held)
			if len(held) == 0 || len(r.bound) == 0 {
				continue
			}
			off := held[rng.IntN(len(held))]
			id := r.items[off].lease
			if id == "" || rng.IntN(5) == 0 {
				id = r.bound[rng.IntN(len(r.bound))]
			}
			if r.items[off].fate == "acked" && rng.IntN(2) == 0 {
				id = r.items[off].ackedBy
			}
			r.ack(id, off)
		case k < 14:
			if len(r.bound) > 0 {
				r.ack(r.bound[rng.IntN(len(r.bound))], r.next+1+uint64(rng.IntN(3)))
			}
		case k < 17:
			r.now = r.now.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
			// Mostly every node renews its connections; sometimes one has stopped.
			dead := ""
			if rng.IntN(6) == 0 && len(r.bound) > 0 {
				dead = r.bound[rng.IntN(len(r.bound))]
			}
			r.touch(func(id string) bool { return id == dead })
			r.expire()
		default:
			r.expire()
		}
	}
	// Drain: one more connection, acking everything it is given, while leases elsewhere
	// expire, until the queue is empty.
	r.bind()
	final := r.bound[len(r.bound)-1]
	for i := 0; r.q.Depth() > 0 || r.q.leased > 0; i++ {
		if i > 10000 {
			r.fail("the queue does not drain: %d items left", r.q.Depth())
		}
		for off, m := range r.items {
			if m.lease == final {
				r.ack(final, off)
			}
		}
		for _, id := range slices.Clone(r.bound) {
			if id != final {
				r.unbind(id)
			}
		}
		r.now = r.now.Add(lim.Lease)
		r.touch(func(string) bool { return false })
		r.expire()
	}
	// Markers still queued went to the final connection with the last steps.
	for off, m := range r.items {
		want := []string{"acked", "parked", "dropped"}
		if mode == Broadcast {
			want = []string{"broadcast", "dropped"}
		}
		if m.fate == "" {
			m.fate = "dropped" // the model does not see sheds; the markers must cover it
		}
		if !slices.Contains(want, m.fate) {
			r.fail("item %d ended %q", off, m.fate)
		}
		reason := map[string]stream.Reason{"parked": ReasonParked, "dropped": ReasonQueueFull}[m.fate]
		if reason == "" {
			continue
		}
		covered := false
		for _, rg := range r.ranges[reason] {
			if rg[0] <= off && off <= rg[1] {
				covered = true
			}
		}
		if !covered {
			r.fail("item %d was %s, but no %s marker covers it", off, m.fate, reason)
		}
	}
	if r.lost[ReasonQueueFull] != uint64(r.dropped) {
		r.fail("queue_full markers count %d lost, the steps dropped %d", r.lost[ReasonQueueFull], r.dropped)
	}
	if r.lost[ReasonParked] != uint64(r.parked) {
		r.fail("parked markers count %d lost, the steps parked %d", r.lost[ReasonParked], r.parked)
	}
	dropped := 0
	for _, m := range r.items {
		if m.fate == "dropped" {
			dropped++
		}
	}
	if dropped != r.dropped {
		r.fail("%d items unaccounted for (taken as dropped), the steps dropped %d", dropped, r.dropped)
	}
}
