package channel

import (
	"sort"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Remote carries this node's publications to the other nodes that hold a subscription they
// match, when nodes share a broker (many nodes). The hub calls Forward under the channel's
// lock, in offset order, for every publication it assigns a position to, whoever holds it
// locally. Forward must not block: its implementation queues, and a publication it cannot
// queue is a hole in the channel's offsets, which the receiving nodes report as a gap.
type Remote interface {
	Forward(m *stream.Message)
}

// Ordering across nodes. With a Remote, publications to one channel are assigned offsets by
// the shared broker on whichever node took them, and reach a node over paths of different
// lengths: this node's own publications at once, another node's over the bus. So a node
// hands on a channel's publications, its own and the others', in offset order: each channel
// state keeps the next offset it expects (seq.next), hands on a publication at that offset at
// once, and holds one from further ahead until the ones before it arrive. A hole that stays
// open for Config.OrderWait becomes a gap for the channel's subscribers (upstream_gap, with
// the exact range), and what was held behind it is handed on; a publication that arrives
// after its offset was declared lost is dropped (it lies inside that gap). Every offset after
// the one a node starts at reaches it: the interest a subscription files is written before
// the subscription reads the channel's head, and a producer looks the interest up after it
// takes the offset (docs/ARCHITECTURE.md, Many nodes).

// DefaultOrderWait is how long a node holds a publication for an earlier offset to arrive
// from another node before it reports the earlier one lost.
const DefaultOrderWait = time.Second

// maxHeld bounds the publications one channel holds waiting for a hole to close; past it the
// hole is reported at once.
const maxHeld = 4096

// sequence is a channel's ordering state on a node with a Remote. Guarded by state.mu.
type sequence struct {
	epoch string
	next  uint64 // the offset to hand on next; 0 until the channel has a starting point
	held  map[uint64]held
	// want is the last offset the broker had given when Verify asked: offsets up to it must
	// arrive within the wait, or are reported lost, even with nothing after them.
	want  uint64
	timer *time.Timer // armed while held is not empty, or want is not reached
	// retired are the epochs the channel left here, newest first: a publication of one that
	// arrives late lies inside the reset's gap, and must not move the channel back.
	retired [4]string
}

func (sq *sequence) isRetired(epoch string) bool {
	for _, e := range sq.retired {
		if e == epoch {
			return true
		}
	}
	return false
}

type held struct {
	it   *stream.Item // a message
	cost int
}

// baseLocked sets where the channel starts on this node when it has no starting point yet,
// and returns the position sn, a new exact subscription, starts after: the last one handed on.
//
// A head in an epoch the channel has not been in here means the broker lost the stream (Redis
// restarted empty) before this node heard of it from a publication or Verify. The channel is
// reset as they would reset it: its subscribers are told (stream_reset), and it expects the
// new epoch's offsets from 1, each up to the head to arrive within the order wait or be
// reported lost. sn starts after the head, and is not given those again. The caller holds
// st.mu.
func (h *Hub) baseLocked(st *state, sn *subscription, head stream.Position) stream.Position {
	sq := &st.seq
	switch {
	case sq.next == 0:
		sq.epoch, sq.next = head.Epoch, head.Offset+1
		return head
	case sq.epoch != head.Epoch && len(sq.held) == 0 && !sq.isRetired(head.Epoch):
		h.resetLocked(st, h.shard(st.name), head.Epoch)
		if head.Offset > 0 {
			sn.skipEpoch, sn.skipTo = head.Epoch, head.Offset
			h.expectLocked(st, head.Offset)
		}
		return head
	}
	return stream.ChannelPosition(sq.epoch, sq.next-1)
}

// Deliver hands a publication that another node took (it carries its position) to this
// node's subscriptions, in offset order with the channel's other publications. It waits for
// room in the channel's fan-out queue as a publish does, and returns a *BusyError or
// ErrHubClosed when it gets none: the caller reports the publication lost.
func (h *Hub) Deliver(m *stream.Message) error {
	q := h.shard(m.Channel)
	cost := jobBytes + len(m.Channel) + len(m.Event) + len(m.Data)
	if err := q.reserve(m.Channel, cost); err != nil {
		return err
	}
	it := stream.NewMessage(m)
	st := h.acquire(m.Channel)
	st.mu.Lock()
	defer st.mu.Unlock()
	defer h.release(st)
	h.sequenceLocked(st, q, it, cost)
	return nil
}

// sequenceLocked hands the message it on in order, holds it, or drops it; it owns the
// reservation of cost on q. The caller holds st.mu.
func (h *Hub) sequenceLocked(st *state, q *queue, it *stream.Item, cost int) {
	sq := &st.seq
	m := it.Message
	off := m.Pos.Offset
	switch {
	case sq.next == 0:
		// The first publication this node sees of the channel.
		sq.epoch, sq.next = m.Pos.Epoch, off
	case m.Pos.Epoch != sq.epoch && sq.isRetired(m.Pos.Epoch):
		q.unreserve(cost)
		h.late.Add(1)
		return
	case m.Pos.Epoch != sq.epoch:
		// The stream restarted (the broker lost it): what was published in the old epoch after
		// what this node handed on is gone, and positions start again at 1. The new epoch's
		// first offsets may still be on their way from other nodes: they are ordered like any
		// others, and a hole is reported only once the order wait has passed without it.
		h.resetLocked(st, q, m.Pos.Epoch)
	}
	switch {
	case off < sq.next:
		q.unreserve(cost)
		h.late.Add(1)
		return
	case off > sq.next:
		if _, dup := sq.held[off]; dup {
			q.unreserve(cost)
			h.late.Add(1)
			return
		}
		if sq.held == nil {
			sq.held = make(map[uint64]held)
		}
		sq.held[off] = held{it: it, cost: cost}
		if len(sq.held) >= maxHeld {
			h.flushHeldLocked(st, q, true)
			return
		}
		h.armLocked(st)
		return
	}
	h.handLocked(st, q, it, cost)
	sq.next = off + 1
	h.drainLocked(st, q)
}

// resetLocked moves the channel to a new epoch: what was held in the old one is handed on,
// the channel's subscribers are told that the old epoch from what this node handed on is lost
// (stream_reset, up to the new epoch's start), and the channel expects the new epoch's offset 1.
func (h *Hub) resetLocked(st *state, q *queue, epoch string) {
	sq := &st.seq
	h.flushHeldLocked(st, q, true)
	h.gapLocked(st, q, stream.Gap{First: stream.ChannelPosition(sq.epoch, sq.next), Last: stream.ChannelPosition(epoch, 0),
		Reason: stream.ReasonStreamReset})
	copy(sq.retired[1:], sq.retired[:len(sq.retired)-1])
	sq.retired[0] = sq.epoch
	sq.epoch, sq.next, sq.want = epoch, 1, 0
}

// Lost says m, a publication another node took, was not handed on here (Deliver refused it, or
// it could not be read): its offset, when still ahead of what the channel handed on, must
// arrive within the order wait or is reported lost, as a hole is, even with nothing published
// after it. Without it a refused publication that was the channel's last would leave its
// subscribers a hole nothing reveals.
func (h *Hub) Lost(m *stream.Message) {
	st := h.acquire(m.Channel)
	st.mu.Lock()
	defer st.mu.Unlock()
	defer h.release(st)
	sq := &st.seq
	if sq.next == 0 || m.Pos.Epoch != sq.epoch || m.Pos.Offset < sq.next {
		return
	}
	h.expectLocked(st, m.Pos.Offset)
}

// expectLocked makes every offset of the channel's epoch up to last arrive within the order
// wait, or be reported lost (expire), even with nothing published after it. The caller holds
// st.mu.
func (h *Hub) expectLocked(st *state, last uint64) {
	st.seq.want = max(st.seq.want, last)
	h.armLocked(st)
}

// armLocked starts the channel's order wait unless it runs. The caller holds st.mu.
func (h *Hub) armLocked(st *state) {
	if st.seq.timer == nil {
		st.seq.timer = time.AfterFunc(h.cfg.OrderWait, func() { h.expire(st) })
	}
}

// Verify asks the broker for the head of every channel this node hands on, and makes sure
// each offset up to it arrives within the order wait, or is reported lost: for a loss on the
// way between nodes with nothing published after it (the cluster node calls it when the bus
// reports one). A channel whose epoch changed is reset at once. It makes one broker call per
// channel.
func (h *Hub) Verify() {
	h.chMu.RLock()
	names := make([]string, 0, len(h.channels))
	for name := range h.channels {
		names = append(names, name)
	}
	h.chMu.RUnlock()
	for _, name := range names {
		st := h.acquire(name)
		st.mu.Lock()
		sq := &st.seq
		if sq.next != 0 {
			if head, err := h.broker.Head(name); err == nil {
				if head.Epoch != sq.epoch && !sq.isRetired(head.Epoch) {
					// Redis lost the stream: offsets of the new epoch up to its head are
					// expected like any others, and reported lost once the wait passes.
					h.resetLocked(st, h.shard(name), head.Epoch)
				}
				switch {
				case head.Epoch != sq.epoch:
				case head.Offset >= sq.next:
					h.expectLocked(st, head.Offset)
				}
			}
		}
		h.release(st)
		st.mu.Unlock()
	}
}

// drainLocked hands on the held publications that are now next in line.
func (h *Hub) drainLocked(st *state, q *queue) {
	sq := &st.seq
	for {
		hd, ok := sq.held[sq.next]
		if !ok {
			break
		}
		delete(sq.held, sq.next)
		h.handLocked(st, q, hd.it, hd.cost)
		sq.next++
	}
	if sq.want < sq.next {
		sq.want = 0
	}
	if len(sq.held) == 0 && sq.want == 0 && sq.timer != nil {
		sq.timer.Stop()
		sq.timer = nil
	}
}

// flushHeldLocked gives up on the holes before the held publications: each becomes a gap for
// the channel's subscribers when gap is true (it is false when the epoch changed under them),
// and the held publications are handed on in order.
func (h *Hub) flushHeldLocked(st *state, q *queue, gap bool) {
	sq := &st.seq
	if len(sq.held) == 0 {
		return
	}
	offs := make([]uint64, 0, len(sq.held))
	for off := range sq.held {
		offs = append(offs, off)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	for _, off := range offs {
		hd := sq.held[off]
		delete(sq.held, off)
		if gap && off > sq.next {
			h.lostLocked(st, q, sq.next, off-1)
		}
		h.handLocked(st, q, hd.it, hd.cost)
		sq.next = off + 1
	}
	if sq.timer != nil {
		sq.timer.Stop()
		sq.timer = nil
	}
}

// expire is the order timer: the hole at the head of the channel stayed open too long.
func (h *Hub) expire(st *state) {
	st.refs.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	defer h.release(st)
	sq := &st.seq
	sq.timer = nil
	q := h.shard(st.name)
	h.flushHeldLocked(st, q, true)
	if sq.want >= sq.next && sq.next != 0 {
		h.lostLocked(st, q, sq.next, sq.want)
		sq.next = sq.want + 1
	}
	sq.want = 0
}

// lostLocked tells the channel's subscriptions on this node that offsets first to last of
// the current epoch did not reach it.
func (h *Hub) lostLocked(st *state, q *queue, first, last uint64) {
	h.gaps.Add(1)
	h.gapLocked(st, q, stream.Gap{First: stream.ChannelPosition(st.seq.epoch, first), Last: stream.ChannelPosition(st.seq.epoch, last),
		Lost: last - first + 1, Reason: stream.ReasonUpstreamGap})
}

// gapLocked hands g to the channel's subscriptions on this node, whatever their event filter.
func (h *Hub) gapLocked(st *state, q *queue, g stream.Gap) {
	ts := h.collect(st, st.name, "", true)
	if len(*ts) == 0 {
		h.targets.Put(ts)
		return
	}
	q.force(jobBytes)
	q.push(job{it: stream.NewGap(&g), subs: ts, bytes: jobBytes}, jobBytes)
}

// handLocked queues the message it for the subscriptions it matches on this node, with the
// reservation of cost it owns.
func (h *Hub) handLocked(st *state, q *queue, it *stream.Item, cost int) {
	m := it.Message
	ts := h.collect(st, m.Channel, m.Event, false)
	if len(*ts) == 0 {
		q.unreserve(cost)
		h.targets.Put(ts)
		return
	}
	q.push(job{it: it, subs: ts, bytes: cost}, cost)
}

// dropHeldLocked lets go of what a channel holds as its state is forgotten.
func (st *state) dropHeldLocked(q *queue) {
	for off, hd := range st.seq.held {
		delete(st.seq.held, off)
		q.unreserve(hd.cost)
	}
	if st.seq.timer != nil {
		st.seq.timer.Stop()
		st.seq.timer = nil
	}
}
