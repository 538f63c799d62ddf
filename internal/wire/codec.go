package wire

import (
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
)

// Codec is protocol v1 as a connection's codec: it turns the stream's items into herald.v1
// data frames. A data frame is the subscription's head, then the item's body, which is encoded
// once per item and shared by every connection that speaks v1.
type Codec struct{}

// CodecSlot is v1's place in stream.Item's cache of encodings.
const CodecSlot = 0

// Slot is v1's place in stream.Item's cache of encodings.
func (Codec) Slot() int { return CodecSlot }

// Head is the head of subscription sub's data frames: change frames for a table subscription,
// message frames for a channel one.
func (Codec) Head(sub string, table bool) []byte {
	if table {
		return AppendDataHead(nil, FrameChange, sub)
	}
	return AppendDataHead(nil, FrameMessage, sub)
}

// PresenceHead is the head of subscription sub's presence frames of kind: roster, join or
// leave.
func (Codec) PresenceHead(sub string, kind stream.PresenceKind) []byte {
	return AppendDataHead(nil, FrameType(kind), sub)
}

// Body encodes a change's, a message's or a presence event's shared body; a gap has none (see
// Gap).
func (Codec) Body(it *stream.Item) []byte {
	switch {
	case it.Change != nil:
		c := changeOf(it.Change)
		return AppendChangeBody(nil, &c)
	case it.Message != nil:
		m := it.Message
		// Room for the position, the keys and the names, so the body is one allocation.
		const overhead = len(`"pos":{"epoch":"","offset":},"channel":"","event":"","data":}`) + 20
		return AppendMessageBody(make([]byte, 0, overhead+len(m.Pos.Epoch)+len(m.Channel)+len(m.Event)+len(m.Data)),
			&Message{Pos: m.Pos, Channel: m.Channel, Event: m.Event, Data: m.Data})
	case it.Presence != nil:
		p := it.Presence
		return AppendPresenceBody(nil, p.Channel, p.Kind, p.Members)
	}
	return nil
}

// Gap appends the resync frame that tells subscription sub about g.
func (Codec) Gap(dst []byte, sub string, g *stream.Gap) []byte { return AppendGap(dst, sub, g) }

// Subscribed appends the subscribed frame that answers request ref: subscription sub is live
// after pos, and a table's rows are identified by key; with snapshot, its rows come first.
func (Codec) Subscribed(dst []byte, ref, sub string, pos stream.Position, key []string, snapshot bool) []byte {
	return appendFrame(dst, &Subscribed{ID: ref, Sub: sub, Pos: pos, Key: key, Snapshot: snapshot})
}

// Rows appends the rows frame of one page of subscription sub's snapshot.
func (Codec) Rows(dst []byte, sub string, rows []change.Row, p stream.Progress, last bool) []byte {
	return AppendRows(dst, sub, rows, p, last)
}

// Live appends the live frame that ends subscription sub's snapshot at pos.
func (Codec) Live(dst []byte, sub string, pos stream.Position) []byte {
	return AppendLive(dst, sub, pos)
}

// Expiring appends the expiring frame: the token expires at at, in in by the server's clock.
func (Codec) Expiring(dst []byte, at time.Time, in time.Duration) []byte {
	return appendFrame(dst, &Expiring{ExpiresAt: at, ExpiresIn: in})
}

// Fault appends the error frame for e, answering request ref ("" for an unprompted one).
func (Codec) Fault(dst []byte, ref string, e *fault.Error) []byte {
	return appendFrame(dst, &Error{ID: ref, Code: e.Code, Field: e.Field, Message: e.Message, Sub: e.Sub})
}

// Ended appends the unprompted unsubscribed frame: the server ended subscription sub, for e.
func (Codec) Ended(dst []byte, sub string, e *fault.Error) []byte {
	return appendFrame(dst, &Unsubscribed{Sub: sub, Code: e.Code, Message: e.Message})
}

// appendFrame appends f. The frames above carry no raw JSON, which is all AppendFrame can
// refuse; were one refused, dst comes back as it was, and the caller sends nothing.
func appendFrame(dst []byte, f Frame) []byte {
	b, _ := AppendFrame(dst, f)
	return b
}

// changeOf is the frame of a change view, without its sub.
func changeOf(v *stream.Change) Change {
	return Change{LSN: v.LSN, Idx: v.Idx, Op: v.Op, Table: v.Table, Row: v.Row, Old: v.Old, OldKeyOnly: v.OldKeyOnly,
		Omitted: v.Omitted, CommitTime: v.CommitTime, TxID: v.TxID, WriteTag: v.WriteTag}
}
