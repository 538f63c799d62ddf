package channel

import (
	"fmt"

	"github.com/heraldrt/herald/internal/stream"
)

// Resuming. A client that comes back with the position of the last item it received subscribes
// with it as from. Under the channel's lock the hub reads the broker's head and, from a
// History, the publications it keeps after from (Since: one call, one Redis round trip with a
// shared broker), works out where live delivery starts (on one node the head; among nodes the
// last offset this node handed on, baseLocked), and joins the subscription before it lets the
// lock go. The replay is then exactly the publications after from up to that start, and live
// delivery everything after it: a publish waits for the lock, so it is assigned its offset
// either before (and is in the history the replay was read from) or after the subscription
// joined (and is delivered to it). Among nodes, the history is the shared broker's, which holds
// every offset the broker handed out, so it holds the ones up to this node's start too, even
// those on their way here or lost on the way.

// Start is where an exact subscription starts, and what it is handed first when it resumes.
type Start struct {
	// Pos is the position after which the subscription receives every publication of the
	// channel: the channel's head as this node hands it on. A subscription that resumes from
	// a position this node has not handed on yet (among nodes: it was taken on another node
	// and is on its way here) starts there: Pos is that position, and what is on its way up to
	// it is not delivered again.
	Pos stream.Position
	// Replay is what a resumed subscription is owed before anything live, oldest first: when
	// the history holds every publication after from up to Pos, those the event filter
	// passes; when it does not, one gap for the whole range, of reason
	// stream.ReasonHistoryExpired (some are no longer in the history: too many, too large,
	// too old, or none kept) or stream.ReasonStreamReset (from is of another epoch, which
	// ended). Nil when the subscription does not resume, or missed nothing.
	Replay []*stream.Item
}

// history returns b as a History when it is one.
func history(b Broker) History {
	h, _ := b.(History)
	return h
}

// startLocked reads where sn, an exact subscription to st's channel with pattern p resuming
// after from (zero: not resuming), starts, and what it is owed first. The caller holds st.mu
// and joins sn to the index before releasing it.
func (h *Hub) startLocked(st *state, sn *subscription, p Pattern, from stream.Position) (Start, error) {
	resume := from.IsChannel()
	var (
		head stream.Position
		kept []*stream.Item
		err  error
	)
	if resume && h.hist != nil {
		head, kept, err = h.hist.Since(st.name, from)
	} else {
		head, err = h.broker.Head(st.name)
	}
	if err != nil {
		return Start{}, fmt.Errorf("%w: %w", ErrBroker, err)
	}
	pos := head
	if h.cfg.Remote != nil {
		// Among nodes, the subscription starts after what this node has handed on of the
		// channel, which may trail the broker's head by what is on its way here.
		pos = h.baseLocked(st, sn, head)
	}
	if !resume {
		return Start{Pos: pos}, nil
	}
	if from.Epoch == pos.Epoch && from.Offset > pos.Offset {
		if from.Epoch == head.Epoch && from.Offset <= head.Offset {
			// The client received, from another node, publications this node has not handed
			// on yet: they are on their way here. It starts after from, and those up to it
			// are not delivered to it again when they arrive.
			sn.skipEpoch, sn.skipTo = from.Epoch, from.Offset
			return Start{Pos: from}, nil
		}
		// Past the channel's head: the caller refuses it.
		return Start{Pos: pos}, nil
	}
	return Start{Pos: pos, Replay: replay(from, pos, kept, p)}, nil
}

// replay returns what a subscription with pattern p resuming after from is owed up to pos, the
// position it starts after: when kept (a history's items, oldest first) holds every offset
// between them, those p passes; otherwise one gap for the whole range, as when nothing is kept.
// Nothing less than the whole range is replayed: a connection's lanes hold back every frame of
// a subscription behind a gap marker that is not written yet (delivery, rule 2), so the items
// after a leading gap would join it rather than reach the client.
func replay(from, pos stream.Position, kept []*stream.Item, p Pattern) []*stream.Item {
	if from.Epoch == pos.Epoch {
		if from.Offset >= pos.Offset {
			return nil
		}
		var out []*stream.Item
		next := from.Offset + 1 // the next offset the subscriber is owed
		for _, it := range kept {
			m := it.Message
			if m.Pos.Epoch != pos.Epoch || m.Pos.Offset < next {
				continue
			}
			if m.Pos.Offset != next || next > pos.Offset {
				break // a hole, which a history does not have, or on its way here
			}
			if p.wants(m.Event) {
				out = append(out, it)
			}
			next++
		}
		if next > pos.Offset {
			return out
		}
	}
	return []*stream.Item{stream.NewGap(resumeGap(from, pos, p))}
}

// resumeGap is the gap of a subscription resuming after from, starting after pos, whose
// history does not reach back: what came after from in its epoch is lost (history_expired), or
// from's epoch ended (stream_reset; where the loss began in it is not known here). The gap
// counts what it lost only when that is exact: every offset of one epoch was a publication the
// subscription would have had, unless an event filter would have passed an unknown few.
func resumeGap(from, pos stream.Position, p Pattern) *stream.Gap {
	if from.Epoch != pos.Epoch {
		return &stream.Gap{Last: pos, Reason: stream.ReasonStreamReset}
	}
	g := &stream.Gap{First: stream.ChannelPosition(pos.Epoch, from.Offset+1), Last: pos, Reason: stream.ReasonHistoryExpired}
	if p.event == "" {
		g.Lost = pos.Offset - from.Offset
	}
	return g
}
