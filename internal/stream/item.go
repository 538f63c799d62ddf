package stream

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/change"
)

// Op is what a change tells a subscriber to do with a row in its view.
type Op string

// The ops. Insert, update, delete and truncate are what the change did; enter and leave are
// updates that moved a row into or out of one subscriber's view.
const (
	OpInsert   Op = Op(change.Insert)   // a new row in view: add it (row)
	OpUpdate   Op = Op(change.Update)   // a row in view changed: replace or upsert it (row, old?)
	OpDelete   Op = Op(change.Delete)   // a row in view was deleted: remove it (old)
	OpTruncate Op = Op(change.Truncate) // the table was emptied: clear it (no row)
	// OpEnter: an update moved a row into this view (its filter or the row rule now admits
	// it). Add it like an insert (row).
	OpEnter Op = "enter"
	// OpLeave: an update moved a row out of this view (its filter or the row rule no longer
	// admits it), or may have. Remove it like a delete (old, the image the subscriber was last
	// allowed to see). The new image is never sent.
	OpLeave Op = "leave"
)

// Ops returns every Op.
func Ops() []Op { return []Op{OpInsert, OpUpdate, OpDelete, OpTruncate, OpEnter, OpLeave} }

// Reason says why a gap opened: why a subscription's view went stale. Every gap has one; the
// same constant is the log attribute, the metric label and the reason a client is told.
type Reason string

// The reasons.
const (
	// ReasonLaneFull: the connection's data queue was full; the client reads too slowly.
	ReasonLaneFull Reason = "lane_full"
	// ReasonTooLarge: one item was larger than the connection's whole data queue.
	ReasonTooLarge Reason = "too_large"
	// ReasonHistoryExpired: a resume's from is older than the history kept, so the items after
	// it cannot be replayed.
	ReasonHistoryExpired Reason = "history_expired"
	// ReasonStreamReset: a channel's stream was recreated (a new epoch): positions from
	// before it mean nothing now. A table's positions are WAL positions, which a new slot
	// keeps: a table resume its history cannot cover is ReasonHistoryExpired.
	ReasonStreamReset Reason = "stream_reset"
	// ReasonPolicyError: a row rule failed to evaluate, so the items were withheld rather than
	// guessed at.
	ReasonPolicyError Reason = "policy_error"
	// ReasonTransactionTooLarge: a transaction was larger than the changefeed holds, so its
	// rows were let go (change.Txn.Overflow).
	ReasonTransactionTooLarge Reason = "transaction_too_large"
	// ReasonUpstreamGap: a hop before this node (the bus between nodes, a link between
	// regions) lost items and said so.
	ReasonUpstreamGap Reason = "upstream_gap"
	// ReasonIncompleteImage: Postgres did not log enough of a row to tell how one change
	// affected the view (a column its filter reads was left out).
	ReasonIncompleteImage Reason = "incomplete_image"
	// ReasonQueueFull: a durable subscription's queue was full (by items or bytes) while none
	// of its connections took its items, and shed its oldest items not in a connection's hands.
	ReasonQueueFull Reason = "queue_full"
	// ReasonParked: a single subscription's item was delivered as many times as the server
	// tries without an ack, and is offered no more.
	ReasonParked Reason = "parked"
)

// Reasons returns every Reason.
func Reasons() []Reason {
	return []Reason{ReasonLaneFull, ReasonTooLarge, ReasonHistoryExpired, ReasonStreamReset,
		ReasonPolicyError, ReasonTransactionTooLarge, ReasonUpstreamGap, ReasonIncompleteImage,
		ReasonQueueFull, ReasonParked}
}

// Change is one row change as the subscribers of one view see it: the op their view needs,
// and the row images projected to their column list.
type Change struct {
	// LSN is the transaction's commit LSN and Idx the change's 1-based index among all the
	// transaction's changes: its position, the same for every subscriber.
	LSN   change.LSN
	Idx   uint32
	Op    Op
	Table string // schema-qualified

	// Row is the new image (insert, update, enter); nil for delete, leave and truncate. The
	// columns in Omitted are absent from it: their value did not change and Postgres did not
	// send it, so the subscriber keeps the value it has.
	Row change.Row
	// Old is the previous image where the subscriber may see it (update, delete, leave), nil
	// otherwise. With OldKeyOnly it holds only the key columns, and a column missing from it
	// is unknown, not null.
	Old        change.Row
	OldKeyOnly bool
	Omitted    []string

	CommitTime time.Time
	TxID       uint64
	WriteTag   string // the tag the writing transaction set, if any
}

// Position is the position right after c.
func (c *Change) Position() Position { return TablePosition(c.LSN, c.Idx) }

// Message is one channel publication.
type Message struct {
	Pos     Position
	Channel string // the channel it was published to: a pattern subscription spans many
	Event   string // "" when it has none
	Data    json.RawMessage
}

// Gap says that items of a subscription from First to Last may not have reached it: its view
// is stale from First on. Items after Last are delivered.
type Gap struct {
	First  Position // zero when unknown: stale from the subscription's start or resume
	Last   Position
	Lost   uint64 // how many items, when exactly known; 0 when not
	Reason Reason
	// Rule names the policy rule that failed, for ReasonPolicyError: policy.tables."t".row.
	// The receiver tells the client which rule it was (an error frame), never why.
	Rule string
}

// PresenceKind is what a presence event says.
type PresenceKind string

const (
	PresenceRoster PresenceKind = "roster" // every member of the channel, ordered by id
	PresenceJoin   PresenceKind = "join"   // a member arrived, or replaced its meta
	PresenceLeave  PresenceKind = "leave"  // a member went: untracked, disconnected or expired
)

// Member is one member of a channel's presence.
type Member struct {
	ID      string          // unique in the channel: the subject and the connection
	Subject string          // the identity's subject; "" for an anonymous one
	Meta    json.RawMessage // the member's meta, compact JSON; nil when it has none
}

// Presence is a presence event on Channel: the roster (Members is every member), or a join or
// leave (Members is the one member; a leave's has no Meta).
type Presence struct {
	Channel string
	Kind    PresenceKind
	Members []Member
}

// Live says a table subscription that began with a snapshot has caught up with its stream:
// its rows and the changes delivered after them are now exactly the table's state after every
// transaction committed at or before Pos. Pos is the first position it may resume from; every
// change after it follows.
type Live struct {
	Pos Position
}

// Progress counts a snapshot's rows sent so far, the page it comes with included.
type Progress struct {
	Rows  int   // rows sent
	Bytes int64 // their bytes, as JSON objects
	Pages int   // pages sent
}

// Item is one thing a subscription's stream carries: exactly one of Change, Message, Gap,
// Presence and Live. Producers build it once, with NewChange, NewMessage, NewGap, NewPresence
// or NewLive, and hand the same Item to every subscription it reaches; nobody modifies it
// after. Its encodings are kept beside it, one per codec, so each protocol encodes it once
// however many connections receive it.
type Item struct {
	Change  *Change
	Message *Message
	Gap     *Gap
	// Presence is a channel's roster, or a member's join or leave: it has no position.
	Presence *Presence
	// Live ends a table subscription's snapshot hand-off (see Live).
	Live *Live

	pos     string // Position's text form, computed once
	encoded [MaxCodecs]atomic.Pointer[[]byte]
	mu      sync.Mutex // serialises the first encoding of each codec
}

// NewChange returns the item of a change view.
func NewChange(c *Change) *Item { return &Item{Change: c, pos: c.Position().String()} }

// NewMessage returns the item of a channel message.
func NewMessage(m *Message) *Item { return &Item{Message: m, pos: m.Pos.String()} }

// NewGap returns the item of a gap.
func NewGap(g *Gap) *Item { return &Item{Gap: g, pos: g.Last.String()} }

// NewPresence makes a presence event's item. It has no position: a presence subscriber's
// state is the last roster and the events after it, and a lost one is repaired by a new
// roster (subscribe again), not by a position.
func NewPresence(p *Presence) *Item { return &Item{Presence: p} }

// NewLive returns the item that says a snapshot's subscription is live after pos.
func NewLive(pos Position) *Item { return &Item{Live: &Live{Pos: pos}, pos: pos.String()} }

// MaxCodecs bounds the protocols an Item keeps encodings for.
const MaxCodecs = 4

// Position is where the item sits in its stream: a gap's last position.
func (it *Item) Position() Position {
	switch {
	case it.Change != nil:
		return it.Change.Position()
	case it.Message != nil:
		return it.Message.Pos
	case it.Gap != nil:
		return it.Gap.Last
	case it.Live != nil:
		return it.Live.Pos
	}
	return Position{}
}

// PosText is Position's text form, computed once when the item was made.
func (it *Item) PosText() string { return it.pos }

// Encoder is one protocol's encoding of items.
type Encoder interface {
	// Slot is the encoder's place in an Item's cache: 0 to MaxCodecs-1, one per protocol.
	Slot() int
	// Body encodes an item. It must be pure, and the bytes it returns are never modified.
	Body(it *Item) []byte
}

// Encoded returns the item's encoding by enc, made the first time it is asked for and shared
// after.
func (it *Item) Encoded(enc Encoder) []byte {
	slot := enc.Slot()
	if b := it.encoded[slot].Load(); b != nil {
		return *b
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if b := it.encoded[slot].Load(); b != nil {
		return *b
	}
	b := enc.Body(it)
	it.encoded[slot].Store(&b)
	return b
}

// Receiver is the receiving end of subscriptions on this node: a session. Push hands it one
// item of its subscription sub. It must not block and must not call back into the producer:
// it runs on the producer's goroutine, which may hold the producer's locks.
type Receiver interface {
	Push(sub string, it *Item)
}
