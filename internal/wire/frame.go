package wire

import (
	"encoding/json"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/stream"
)

// FrameType is a frame's "type" field. Every frame is one JSON object whose first member is
// "type". Client frames carry a client-chosen "id" that the reply echoes.
type FrameType string

// Client frames: what Decode reads.
const (
	// FrameConnect: the first frame on a WebSocket. {id, token?}. Answered by welcome.
	FrameConnect FrameType = "connect"
	// FrameRefresh: a new token for the same identity, keeping every subscription.
	// {id, token}. Answered by refreshed.
	FrameRefresh FrameType = "refresh"
	// FrameSubscribe: {id, sub, table, filter?, columns?, from?, mode?, snapshot?} or
	// {id, sub, channel, event?, from?, mode?, durable?, presence?}. Answered by subscribed
	// once it is live; with presence, roster follows it; with snapshot, rows, then live. With
	// mode single, or durable, it binds the connection to the identity's durable subscription
	// named sub.
	FrameSubscribe FrameType = "subscribe"
	// FrameUnsubscribe: {id, sub, forget?}. Answered by unsubscribed. With forget, the
	// identity's durable subscription named sub is deleted too.
	FrameUnsubscribe FrameType = "unsubscribe"
	// FramePublish: {id, channel, event?, data}. Answered by published.
	FramePublish FrameType = "publish"
	// FramePing: {id}. Answered by pong.
	FramePing FrameType = "ping"
	// FrameTrack: {id, channel, meta?}. Makes the connection a member of the channel's
	// presence, or replaces its meta. Answered by tracked.
	FrameTrack FrameType = "track"
	// FrameUntrack: {id, channel}. Answered by untracked.
	FrameUntrack FrameType = "untrack"
	// FrameAck: {id, sub, pos}. Settles the item at pos of a single subscription. Answered
	// by nothing on success, by error (not_found) when the item is not this connection's to
	// settle.
	FrameAck FrameType = "ack"
)

// Server frames: what DecodeServer reads.
const (
	// FrameWelcome: {id?, v, session, expires_at?, expires_in?, limits}. The answer to connect
	// (WebSocket) or the first event of a stream (SSE).
	FrameWelcome FrameType = "welcome"
	// FrameSubscribed: {id?, sub, pos?, key?, snapshot?}. The subscription is live; data after
	// pos follows. A channel pattern has no pos; a table's key columns are in key. With
	// snapshot, it has no pos: the rows follow, then live says where the stream stands.
	FrameSubscribed FrameType = "subscribed"
	// FrameUnsubscribed: {id?, sub, code?, message?}. Without id, the server ended it.
	FrameUnsubscribed FrameType = "unsubscribed"
	// FrameChange: table data. {sub, pos, idx, op, table, row?, old?, old_key_only?,
	// omitted?, commit_time?, txid?, write_tag?}. Head + shared body.
	FrameChange FrameType = "change"
	// FrameMessage: channel data. {sub, pos, channel, event?, data}. Head + shared body.
	FrameMessage FrameType = "message"
	// FrameResync: {sub, first?, last, lost?, reason}. Items of sub from first to last may be
	// missing: the client's view of sub is stale and it must resync it.
	FrameResync FrameType = "resync"
	// FrameError: {id?, code, status, message, field?, sub?}.
	FrameError FrameType = "error"
	// FramePong: {id}.
	FramePong FrameType = "pong"
	// FrameRefreshed: {id, expires_at?, expires_in?}.
	FrameRefreshed FrameType = "refreshed"
	// FramePublished: {id, pos}.
	FramePublished FrameType = "published"
	// FrameTracked: {id, channel, member}. The connection is a member, under id member.
	FrameTracked FrameType = "tracked"
	// FrameUntracked: {id, channel}.
	FrameUntracked FrameType = "untracked"
	// FrameRoster: {sub, channel, members}. Every member of a presence subscription's
	// channel, right after its subscribed.
	FrameRoster FrameType = "roster"
	// FrameJoin: {sub, channel, member}. A member arrived, or replaced its meta.
	FrameJoin FrameType = "join"
	// FrameLeave: {sub, channel, member}. A member went; member has no meta.
	FrameLeave FrameType = "leave"
	// FrameRows: {sub, rows, progress, last?}. One page of a snapshot subscription's rows,
	// after its subscribed and before its live.
	FrameRows FrameType = "rows"
	// FrameLive: {sub, pos}. A snapshot subscription's rows and the changes sent after them are
	// now the table's state at pos: the position it may resume from.
	FrameLive FrameType = "live"
	// FrameExpiring: {expires_at, expires_in}. Unprompted: the token runs out soon; send
	// refresh before it does.
	FrameExpiring FrameType = "expiring"
)

// FrameTypes returns every FrameType: the client frames, then the server frames.
func FrameTypes() []FrameType {
	return []FrameType{
		FrameConnect, FrameRefresh, FrameSubscribe, FrameUnsubscribe, FramePublish, FramePing,
		FrameAck, FrameTrack, FrameUntrack,
		FrameWelcome, FrameSubscribed, FrameUnsubscribed, FrameChange, FrameMessage,
		FrameResync, FrameError, FramePong, FrameRefreshed, FramePublished, FrameExpiring,
		FrameTracked, FrameUntracked, FrameRoster, FrameJoin, FrameLeave, FrameRows, FrameLive,
	}
}

// FromClient reports whether t is a frame a client sends.
func (t FrameType) FromClient() bool {
	switch t {
	case FrameConnect, FrameRefresh, FrameSubscribe, FrameUnsubscribe, FramePublish, FramePing, FrameAck,
		FrameTrack, FrameUntrack:
		return true
	}
	return false
}

// Frame is one decoded frame: one of the pointer types below, or *Error. The set is closed.
type Frame interface {
	Type() FrameType
	frame()
}

// Mode is a subscription's delivery mode.
type Mode string

const (
	// ModeBroadcast: every connection subscribed gets every item. The default.
	ModeBroadcast Mode = "broadcast"
	// ModeSingle: acknowledged delivery: the subscription is durable, and exactly one of the
	// connections bound to it gets each item, under a lease, and must ack it.
	ModeSingle Mode = "single"
)

// Op is what a change frame tells the subscriber to do with a row: stream.Op.
type Op = stream.Op

// The ops; see stream.Op.
const (
	OpInsert   = stream.OpInsert
	OpUpdate   = stream.OpUpdate
	OpDelete   = stream.OpDelete
	OpTruncate = stream.OpTruncate
	OpEnter    = stream.OpEnter
	OpLeave    = stream.OpLeave
)

// Ops returns every Op.
func Ops() []Op { return stream.Ops() }

// Connect is a client's first frame on a WebSocket.
type Connect struct {
	ID    string
	Token string // empty: the upgrade request carried the token, or the client is anonymous
}

// Refresh replaces the connection's token without dropping its subscriptions.
type Refresh struct {
	ID    string
	Token string // required
}

// Subscribe asks for a table's changes or a channel's messages. Exactly one of Table and
// Channel is set; Filter and Columns go only with Table, Event only with Channel.
type Subscribe struct {
	ID  string
	Sub string // the client's name for the subscription; unique on the connection

	Table   string          // schema-qualified, "public.items"
	Filter  json.RawMessage // the filter package's grammar; nil: every row. Compact, valid JSON.
	Columns []string        // nil: every column

	Channel string // a channel name, or a pattern with a glob below a prefix: "docs/alice/**"
	Event   string // an event-name filter; empty: every event

	// From resumes after this position: the last one the client received for this
	// subscription. The zero Position starts at the stream's current head. Its kind always
	// matches the subscription's (Decode refuses a mismatch with bad_position).
	From Position
	Mode Mode // ModeBroadcast unless the client asked for ModeSingle
	// Durable binds the connection to the identity's durable subscription named Sub, which
	// outlives it. ModeSingle is always durable. Only on one channel (no wildcard), without
	// From and Presence.
	Durable bool
	// Presence asks for the channel's presence too: a roster after subscribed, then join and
	// leave frames. Only on one channel (no wildcard).
	Presence bool
	// Snapshot asks for a table's current rows first: subscribed, then rows frames, then live
	// once the rows and the changes after them are the table's state at one position. Only
	// with a table, without From, in mode broadcast.
	Snapshot bool
}

// Unsubscribe ends a subscription.
type Unsubscribe struct {
	ID  string
	Sub string
	// Forget deletes the identity's durable subscription named Sub too, its queue with it,
	// whether or not this connection is bound to it.
	Forget bool
}

// Publish sends data to a channel.
type Publish struct {
	ID      string
	Channel string
	Event   string          // optional event name
	Data    json.RawMessage // required, not null. Compact, valid JSON.
}

// Track makes the connection a member of a channel's presence, with meta, or replaces its
// meta.
type Track struct {
	ID      string
	Channel string
	Meta    json.RawMessage // optional; compact, valid JSON
}

// Untrack ends the connection's membership of a channel's presence.
type Untrack struct {
	ID      string
	Channel string
}

// Ping asks for a pong: an application-level liveness check, for clients that cannot see
// WebSocket pings (browsers) and for SSE, where the server's keepalives are comments.
type Ping struct{ ID string }

// Ack acknowledges an item of a ModeSingle subscription: see FrameAck.
type Ack struct {
	ID  string
	Sub string
	Pos Position
}

// Limits are the server's limits a client must respect, sent in welcome.
type Limits struct {
	MaxFrameBytes    int           // the largest frame the server reads, in bytes
	MaxSubscriptions int           // the most subscriptions one connection may hold
	PingInterval     time.Duration // how often the server checks liveness; 0: not stated
	// MaxUnreadReplies is how many replies may wait unread while the server still takes the
	// client's requests; past it the server takes no more until the client reads some. 0: not
	// stated.
	MaxUnreadReplies int
}

// Welcome opens a session.
type Welcome struct {
	ID        string // the connect frame's id; empty on SSE
	Version   int    // the protocol version: Version
	Session   string // the server's id for this session; SSE commands are posted to it
	ExpiresAt time.Time
	// ExpiresIn is the token's remaining life by the server's clock, so a client with a
	// skewed clock can still schedule its refresh. Sent in whole seconds.
	ExpiresIn time.Duration
	Limits    Limits
}

// Subscribed says a subscription is live: every item after Pos will be delivered.
type Subscribed struct {
	ID  string // empty for a subscription the SSE URL declared
	Sub string
	// Pos is where the subscription starts; zero (and absent from the frame) for a channel
	// pattern, which spans channels whose positions are unrelated, so it has none.
	Pos Position
	// Key names a table's key columns, which identify a row in change frames; none for a
	// channel, or a table with neither a primary key nor a replica identity index.
	Key []string
	// Snapshot says the subscription begins with its table's rows (rows frames, then live);
	// Pos is then zero.
	Snapshot bool
}

// Unsubscribed says a subscription has ended. With an ID it answers an unsubscribe; without
// one the server ended it, and Code and Message say why (e.g. forbidden after a refresh).
type Unsubscribed struct {
	ID      string
	Sub     string
	Code    Code
	Message string
}

// Change is one table change as a subscriber sees it.
type Change struct {
	Sub string // written by the head, not the body

	LSN change.LSN // pos: the transaction's commit LSN
	// Idx is this change's 1-based index among all the changes of its transaction, the same
	// for every subscriber, so Position() names exactly this change.
	Idx   uint32
	Op    Op
	Table string // schema-qualified

	// Row is the new image (insert, update, enter); nil for delete, leave and truncate. The
	// columns in Omitted are absent from it: their value did not change and Postgres did not
	// send it, so the subscriber keeps the value it has.
	Row change.Row
	// Old is the previous image where the subscriber may see it (update, delete, leave), nil
	// otherwise. With OldKeyOnly it holds only the replica identity's key columns, and a
	// column missing from it is unknown, not null.
	Old        change.Row
	OldKeyOnly bool
	Omitted    []string

	CommitTime time.Time
	// TxID is the transaction id. Sent as a number; Postgres' 64-bit xid8 when the
	// changefeed knows the epoch.
	TxID     uint64
	WriteTag string // the tag the writing transaction set with pg_logical_emit_message
}

// Position returns the stream position right after c.
func (c *Change) Position() Position { return TablePosition(c.LSN, c.Idx) }

// NewChange returns the frame for e, the idx-th (1-based) event of its transaction, before
// any per-subscription view: Op is e's, Row and Old are e's images. A router that projects
// columns or turns an update into OpEnter or OpLeave edits the result.
func NewChange(e *change.Event, idx uint32) Change {
	return Change{
		LSN:        e.LSN,
		Idx:        idx,
		Op:         Op(e.Op),
		Table:      e.Table,
		Row:        e.After,
		Old:        e.Before,
		OldKeyOnly: e.BeforeKeyOnly,
		Omitted:    e.Omitted,
		CommitTime: e.CommitTime,
		TxID:       uint64(e.TxID),
		WriteTag:   e.WriteTag,
	}
}

// Message is one channel publication as a subscriber sees it.
type Message struct {
	Sub     string // written by the head, not the body
	Pos     Position
	Channel string // the channel it was published to (a subscription may match many)
	Event   string
	Data    json.RawMessage // compact, valid JSON
}

// Resync tells a client that items of Sub from First to Last may be missing: its view of Sub
// is stale from First on, and it must resync (docs/PROTOCOL.md, "Resync"). Items after Last
// keep coming.
type Resync struct {
	Sub    string
	First  Position // the first item that may be missing; zero when unknown
	Last   Position // the last item that may be missing; items after it will be delivered
	Lost   uint64   // how many items were lost; 0 when unknown
	Reason ResyncReason
}

// Rows is one page of a snapshot subscription's rows: each the row as the subscriber may see
// it (its column list, the policy's columns), in key order.
type Rows struct {
	Sub      string
	Rows     []change.Row
	Progress Progress
	// Last marks the snapshot's last page.
	Last bool
}

// Progress counts a snapshot's rows sent so far, this page's included: stream.Progress.
type Progress = stream.Progress

// Live says a snapshot subscription's rows, and the changes sent after them, are now the
// table's state after every transaction committed at or before Pos: the position the client
// may resume from. Changes after Pos follow.
type Live struct {
	Sub string
	Pos Position
}

// Pong answers a ping.
type Pong struct{ ID string }

// Refreshed answers a refresh: the new token is in force.
type Refreshed struct {
	ID        string
	ExpiresAt time.Time
	ExpiresIn time.Duration // see Welcome.ExpiresIn
}

// Published answers a publish with the publication's position in the channel's stream.
type Published struct {
	ID  string
	Pos Position
}

// Tracked answers a track: the connection is a member of Channel's presence, as Member.
type Tracked struct {
	ID      string
	Channel string
	Member  string // the member's id, as join and leave frames name it
}

// Untracked answers an untrack.
type Untracked struct {
	ID      string
	Channel string
}

// Member is one member of a channel's presence: stream.Member.
type Member = stream.Member

// Roster is every member of a presence subscription's channel, ordered by id.
type Roster struct {
	Sub     string
	Channel string
	Members []Member // empty when nobody is there
}

// Join says a member arrived on Channel, or replaced its meta.
type Join struct {
	Sub     string
	Channel string
	Member  Member
}

// Leave says a member left Channel. Its Member has no meta.
type Leave struct {
	Sub     string
	Channel string
	Member  Member
}

// Expiring warns, unprompted, that the token expires soon; the client should send refresh.
type Expiring struct {
	ExpiresAt time.Time
	ExpiresIn time.Duration // see Welcome.ExpiresIn
}

func (*Connect) Type() FrameType      { return FrameConnect }
func (*Refresh) Type() FrameType      { return FrameRefresh }
func (*Subscribe) Type() FrameType    { return FrameSubscribe }
func (*Unsubscribe) Type() FrameType  { return FrameUnsubscribe }
func (*Publish) Type() FrameType      { return FramePublish }
func (*Ping) Type() FrameType         { return FramePing }
func (*Ack) Type() FrameType          { return FrameAck }
func (*Welcome) Type() FrameType      { return FrameWelcome }
func (*Subscribed) Type() FrameType   { return FrameSubscribed }
func (*Unsubscribed) Type() FrameType { return FrameUnsubscribed }
func (*Change) Type() FrameType       { return FrameChange }
func (*Message) Type() FrameType      { return FrameMessage }
func (*Resync) Type() FrameType       { return FrameResync }
func (*Pong) Type() FrameType         { return FramePong }
func (*Refreshed) Type() FrameType    { return FrameRefreshed }
func (*Published) Type() FrameType    { return FramePublished }
func (*Expiring) Type() FrameType     { return FrameExpiring }
func (*Track) Type() FrameType        { return FrameTrack }
func (*Untrack) Type() FrameType      { return FrameUntrack }
func (*Tracked) Type() FrameType      { return FrameTracked }
func (*Untracked) Type() FrameType    { return FrameUntracked }
func (*Roster) Type() FrameType       { return FrameRoster }
func (*Join) Type() FrameType         { return FrameJoin }
func (*Leave) Type() FrameType        { return FrameLeave }
func (*Rows) Type() FrameType         { return FrameRows }
func (*Live) Type() FrameType         { return FrameLive }

func (*Connect) frame()      {}
func (*Refresh) frame()      {}
func (*Subscribe) frame()    {}
func (*Unsubscribe) frame()  {}
func (*Publish) frame()      {}
func (*Ping) frame()         {}
func (*Ack) frame()          {}
func (*Welcome) frame()      {}
func (*Subscribed) frame()   {}
func (*Unsubscribed) frame() {}
func (*Change) frame()       {}
func (*Message) frame()      {}
func (*Resync) frame()       {}
func (*Pong) frame()         {}
func (*Refreshed) frame()    {}
func (*Published) frame()    {}
func (*Expiring) frame()     {}
func (*Track) frame()        {}
func (*Untrack) frame()      {}
func (*Tracked) frame()      {}
func (*Untracked) frame()    {}
func (*Roster) frame()       {}
func (*Join) frame()         {}
func (*Leave) frame()        {}
func (*Rows) frame()         {}
func (*Live) frame()         {}
