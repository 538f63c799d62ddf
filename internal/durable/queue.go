package durable

import (
	"slices"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Queue is one durable subscription's state and the rules that move it: its queue of entries,
// bounded by items and bytes, the connections bound to it, the leases of a single
// subscription's items, and the positions it settled lately. It is the rules' one Go
// statement: store/memory keeps a Queue per subscription, and store/redis' scripts follow the
// same steps (the conformance suite holds both to them).
//
// Pure: no I/O, no clock (every step takes now), no goroutine, no lock. Its caller serialises
// the steps of one Queue.
type Queue struct {
	def    Def
	lim    Limits
	tail   stream.Position // the last position appended: what is at or before it is a duplicate
	ents   []*entry        // in queue order; nil slots are removed entries, compacted lazily
	dead   int             // nil slots in ents
	byPos  map[stream.Position]*entry
	items  int     // publications held, leased ones included
	bytes  int     // their Entry.Size
	leased int     // publications leased
	conns  []bound // bound connections, in the order they bound (the last is the most recent)
	nextID uint64  // entries' ids, in append order
	// settled remembers the last SettledMemory positions acked, and by which connection, so a
	// repeated ack is still a success (and another's still not_found).
	settled     map[stream.Position]string
	settledRing []stream.Position
	settledNext int
	// idleSince is when the last connection went; zero while one is bound.
	idleSince time.Time
}

// bound is one bound connection.
type bound struct {
	Conn
	inFlight int       // items it holds leases on
	deadline time.Time // when it is taken for gone unless its node renews it (Touch)
}

// entry is one queued entry.
type entry struct {
	id  uint64
	ent Entry // Attempt unused here: attempts is the count
	// size is Entry.Size: what it counts toward MaxBytes.
	size int
	// Leases (single subscriptions' publications only):
	lease    string    // the connection holding it; "" when it waits
	deadline time.Time // when the lease ends
	attempts int       // deliveries made
	last     string    // the connection it was last delivered to
	tried    []string  // connections tried in this round (see dispatchSingle)
}

func (e *entry) isMarker() bool { return e.ent.Msg == nil }

// NewQueue returns an empty queue for def, made at now, with no connection bound.
func NewQueue(def Def, lim Limits, now time.Time) *Queue {
	return &Queue{def: def, lim: lim.WithDefaults(), byPos: map[stream.Position]*entry{},
		settled: map[stream.Position]string{}, idleSince: now}
}

// Def is what the subscription is.
func (q *Queue) Def() Def { return q.def }

// Depth is the publications the queue holds, leased ones included.
func (q *Queue) Depth() int { return q.items }

// Bytes is their size, as MaxBytes counts it.
func (q *Queue) Bytes() int { return q.bytes }

// Conns is the bound connections, most recent first.
func (q *Queue) Conns() []Conn {
	out := make([]Conn, 0, len(q.conns))
	for i := len(q.conns) - 1; i >= 0; i-- {
		out = append(out, q.conns[i].Conn)
	}
	return out
}

// Tail is the last position appended.
func (q *Queue) Tail() stream.Position { return q.tail }

// Idle reports whether no connection has been bound for the subscription's idle TTL at now:
// it is to be forgotten.
func (q *Queue) Idle(now time.Time) bool {
	return len(q.conns) == 0 && !now.Before(q.idleSince.Add(q.lim.IdleTTL))
}

// Bind binds c, or binds it again (a connection already bound stays where it is), and hands it
// and the others what waits.
func (q *Queue) Bind(c Conn, now time.Time) Outcome {
	if i := q.find(c.ID); i >= 0 {
		q.conns[i].deadline = now.Add(q.lim.ConnTTL)
	} else {
		q.conns = append(q.conns, bound{Conn: c, deadline: now.Add(q.lim.ConnTTL)})
	}
	q.idleSince = time.Time{}
	return q.dispatch(now)
}

// Unbind unbinds connection id: every lease it holds ends at once, as an expiry would (its
// item goes to another connection, or is parked), and the queue's idle time starts with its
// last connection.
func (q *Queue) Unbind(id string, now time.Time) Outcome {
	var o Outcome
	if !q.unbind(id, now, &o) {
		return q.outcome(o)
	}
	o.add(q.dispatch(now))
	return o
}

// unbind unbinds connection id and ends its leases, without handing anything on; it reports
// whether id was bound.
func (q *Queue) unbind(id string, now time.Time, o *Outcome) bool {
	i := q.find(id)
	if i < 0 {
		return false
	}
	q.conns = slices.Delete(q.conns, i, i+1)
	for _, e := range q.ents {
		if e != nil && e.lease == id {
			q.release(e, o)
		}
	}
	if len(q.conns) == 0 {
		q.idleSince = now
	}
	return true
}

// Append queues entries, publications and markers, at the end, skipping any at or before the
// last position appended (a publication taken again after an owner changed: appends are
// idempotent by position), sheds what the bounds do not hold (the rule: drop the oldest not
// leased, a marker in its place), and hands on what it can.
func (q *Queue) Append(ents []Entry, now time.Time) Outcome {
	var o Outcome
	for _, in := range ents {
		pos := in.Pos()
		if pos.IsZero() || !after(pos, q.tail) {
			continue
		}
		q.tail = pos
		in.Attempt = 0
		if in.Msg == nil {
			q.appendMarker(in.Gap)
			continue
		}
		e := &entry{id: q.nextID, ent: in, size: in.Size()}
		q.nextID++
		q.ents = append(q.ents, e)
		q.byPos[pos] = e
		q.items++
		q.bytes += e.size
		for q.items > q.lim.MaxItems || q.bytes > q.lim.MaxBytes {
			if !q.shedOldest(&o) {
				break
			}
		}
	}
	o.add(q.dispatch(now))
	return o
}

// shedOldest replaces the oldest publication no connection holds with a queue_full marker,
// merged into the marker right before it if there is one: so a queue that keeps overflowing
// while nobody reads it holds one marker, growing, at its front. A leased item is never shed:
// its lease is running, and its expiry offers it again. It reports whether it found one.
func (q *Queue) shedOldest(o *Outcome) bool {
	for i, e := range q.ents {
		if e == nil || e.isMarker() || e.lease != "" {
			continue
		}
		q.removeAt(i)
		q.markAt(i, e.ent.Msg.Pos, ReasonQueueFull)
		o.Dropped++
		return true
	}
	return false
}

// appendMarker queues a marker (a gap the channel's stream reported), merged into the last
// entry if that is a marker of the same reason.
func (q *Queue) appendMarker(g *stream.Gap) {
	for j := len(q.ents) - 1; j >= 0; j-- {
		prev := q.ents[j]
		if prev == nil {
			continue
		}
		if prev.isMarker() && prev.ent.Gap.Reason == g.Reason {
			merged := *prev.ent.Gap
			merged.Last = g.Last
			merged.Lost = addLost(merged.Lost, g.Lost)
			prev.ent.Gap = &merged
			return
		}
		break
	}
	cp := *g
	q.ents = append(q.ents, &entry{id: q.nextID, ent: Entry{Gap: &cp}})
	q.nextID++
}

// markAt puts a marker for the one item at pos in slot i (emptied by removeAt), or merges it
// into the marker in the nearest live slot before i when that is one of the same reason.
func (q *Queue) markAt(i int, pos stream.Position, reason stream.Reason) {
	for j := i - 1; j >= 0; j-- {
		prev := q.ents[j]
		if prev == nil {
			continue
		}
		if prev.isMarker() && prev.ent.Gap.Reason == reason {
			merged := *prev.ent.Gap
			merged.Last = pos
			merged.Lost = addLost(merged.Lost, 1)
			prev.ent.Gap = &merged
			return
		}
		break
	}
	q.ents[i] = &entry{id: q.nextID, ent: Entry{Gap: &stream.Gap{First: pos, Last: pos, Lost: 1, Reason: reason}}}
	q.nextID++
	q.dead--
}

// addLost adds two exact counts; an unknown count (0) makes the sum unknown.
func addLost(a, b uint64) uint64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a + b
}

// removeAt empties slot i, a publication's, and forgets it.
func (q *Queue) removeAt(i int) {
	e := q.ents[i]
	q.ents[i] = nil
	q.dead++
	if e.isMarker() {
		return
	}
	delete(q.byPos, e.ent.Msg.Pos)
	q.items--
	q.bytes -= e.size
	if e.lease != "" {
		if b := q.find(e.lease); b >= 0 {
			q.conns[b].inFlight--
		}
		e.lease = ""
		q.leased--
	}
}

// compact drops the empty slots once they are at least half the slice.
func (q *Queue) compact() {
	if q.dead == 0 || q.dead*2 < len(q.ents) {
		return
	}
	out := q.ents[:0]
	for _, e := range q.ents {
		if e != nil {
			out = append(out, e)
		}
	}
	clear(q.ents[len(out):])
	q.ents, q.dead = out, 0
}

// Ack settles the item at pos for connection id. It settles when id holds the item's lease,
// or was the last connection it was delivered to and nobody holds it now (a late ack is still
// the work done: offering it again would only repeat it). A position id settled lately is
// AlreadyAcked; anything else is NotFound: another connection's item, a broadcast's, a
// marker's position, one never queued or settled long ago.
func (q *Queue) Ack(id string, pos stream.Position, now time.Time) (AckResult, Outcome) {
	e := q.byPos[pos]
	if e == nil {
		if q.settled[pos] == id && id != "" {
			return AlreadyAcked, q.outcome(Outcome{})
		}
		return NotFound, q.outcome(Outcome{})
	}
	if q.def.Mode != Single || !(e.lease == id || e.lease == "" && e.last == id) {
		return NotFound, q.outcome(Outcome{})
	}
	for i, x := range q.ents {
		if x == e {
			q.removeAt(i)
			break
		}
	}
	q.remember(pos, id)
	o := Outcome{Acked: 1}
	o.add(q.dispatch(now))
	return Acked, o
}

// remember records that id settled pos, forgetting the oldest past SettledMemory.
func (q *Queue) remember(pos stream.Position, id string) {
	if len(q.settledRing) < SettledMemory {
		q.settledRing = append(q.settledRing, pos)
	} else {
		delete(q.settled, q.settledRing[q.settledNext])
		q.settledRing[q.settledNext] = pos
		q.settledNext = (q.settledNext + 1) % SettledMemory
	}
	q.settled[pos] = id
}

// Touch renews the bound connections ids, which their node still holds, for Limits.ConnTTL.
// One not bound is passed over.
func (q *Queue) Touch(ids []string, now time.Time) {
	for _, id := range ids {
		if i := q.find(id); i >= 0 {
			q.conns[i].deadline = now.Add(q.lim.ConnTTL)
		}
	}
}

// Expire unbinds the connections whose deadline passed (their node stopped renewing them: it
// died), then ends the leases whose deadline is at or before now, as Unbind does for a
// connection that went, and hands on what it can.
func (q *Queue) Expire(now time.Time) Outcome {
	var o Outcome
	changed := false
	for i := 0; i < len(q.conns); {
		if now.Before(q.conns[i].deadline) {
			i++
			continue
		}
		q.unbind(q.conns[i].ID, now, &o)
		changed = true
	}
	if q.leased > 0 {
		for _, e := range q.ents {
			if e != nil && e.lease != "" && !now.Before(e.deadline) {
				q.release(e, &o)
				changed = true
			}
		}
	}
	if !changed {
		// A dispatch with nothing changed since the last hands on nothing.
		return q.outcome(o)
	}
	o.add(q.dispatch(now))
	return o
}

// NextDeadline is the earliest lease deadline, or zero when no item is leased.
func (q *Queue) NextDeadline() time.Time {
	var next time.Time
	if q.leased == 0 {
		return next
	}
	for _, e := range q.ents {
		if e != nil && e.lease != "" && (next.IsZero() || e.deadline.Before(next)) {
			next = e.deadline
		}
	}
	return next
}

// release ends e's lease without an ack: its connection is tried for this round, and the item
// waits for the next connection, or is parked, a marker in its place, when it has been
// delivered MaxAttempts times.
func (q *Queue) release(e *entry, o *Outcome) {
	if b := q.find(e.lease); b >= 0 {
		q.conns[b].inFlight--
	}
	q.leased--
	if !slices.Contains(e.tried, e.lease) {
		e.tried = append(e.tried, e.lease)
	}
	e.lease = ""
	if e.attempts < q.lim.MaxAttempts {
		o.Retried++
		return
	}
	for i, x := range q.ents {
		if x == e {
			q.removeAt(i)
			q.markAt(i, e.ent.Msg.Pos, ReasonParked)
			break
		}
	}
	o.Parked++
}

// dispatch hands on what the bound connections can take now, in queue order.
func (q *Queue) dispatch(now time.Time) Outcome {
	var o Outcome
	if len(q.conns) > 0 {
		if q.def.Mode == Single {
			q.dispatchSingle(now, &o)
		} else {
			q.dispatchBroadcast(&o)
		}
	}
	q.compact()
	return q.outcome(o)
}

func (q *Queue) outcome(o Outcome) Outcome {
	o.Depth = q.items
	return o
}

// dispatchBroadcast hands every entry to every bound connection, and lets it go: a broadcast
// is done once the connections bound now have it.
func (q *Queue) dispatchBroadcast(o *Outcome) {
	var ents []Entry
	for i, e := range q.ents {
		if e == nil {
			continue
		}
		ents = append(ents, e.ent)
		if !e.isMarker() {
			o.Delivered += len(q.conns)
		}
		q.removeAt(i)
	}
	if len(ents) == 0 {
		return
	}
	for i := len(q.conns) - 1; i >= 0; i-- {
		o.Deliveries = append(o.Deliveries, Delivery{Conn: q.conns[i].Conn, Entries: ents})
	}
}

// dispatchSingle leases each waiting item, in queue order, to one connection: the most
// recently bound with room (fewer than MaxInFlight leases) that has not had the item in this
// round. Once every bound connection has had it, a new round begins with all of them: a holder
// whose one connection stays must still see the item again, and MaxAttempts bounds the rounds.
// An item whose untried connections are all full waits for one to have room, rather than
// going to one already tried. A marker goes to every bound connection, like a broadcast's
// entry: it settles nothing.
func (q *Queue) dispatchSingle(now time.Time, o *Outcome) {
	out := map[string][]Entry{}
	var order []Conn // connections in the order they were first handed something
	give := func(c Conn, e Entry) {
		if _, ok := out[c.ID]; !ok {
			order = append(order, c)
		}
		out[c.ID] = append(out[c.ID], e)
	}
	for i, e := range q.ents {
		if e == nil || e.lease != "" {
			continue
		}
		if e.isMarker() {
			for j := len(q.conns) - 1; j >= 0; j-- {
				give(q.conns[j].Conn, e.ent)
			}
			q.removeAt(i)
			continue
		}
		if !q.roomAnywhere() {
			break
		}
		if q.allTried(e) {
			e.tried = e.tried[:0]
		}
		b := -1
		for j := len(q.conns) - 1; j >= 0; j-- {
			c := &q.conns[j]
			if c.inFlight < q.lim.MaxInFlight && !slices.Contains(e.tried, c.ID) {
				b = j
				break
			}
		}
		if b < 0 {
			continue
		}
		c := &q.conns[b]
		c.inFlight++
		q.leased++
		e.lease, e.deadline, e.last = c.ID, now.Add(q.lim.Lease), c.ID
		e.attempts++
		ent := e.ent
		ent.Attempt = e.attempts
		give(c.Conn, ent)
		o.Delivered++
	}
	for _, c := range order {
		o.Deliveries = append(o.Deliveries, Delivery{Conn: c, Entries: out[c.ID]})
	}
}

// roomAnywhere reports whether some bound connection can take another lease.
func (q *Queue) roomAnywhere() bool {
	for _, c := range q.conns {
		if c.inFlight < q.lim.MaxInFlight {
			return true
		}
	}
	return false
}

// allTried reports whether every bound connection has had e in this round.
func (q *Queue) allTried(e *entry) bool {
	for _, c := range q.conns {
		if !slices.Contains(e.tried, c.ID) {
			return false
		}
	}
	return true
}

// find returns the index of connection id among the bound, or -1.
func (q *Queue) find(id string) int {
	for i, c := range q.conns {
		if c.ID == id {
			return i
		}
	}
	return -1
}
