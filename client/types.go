package client

import "github.com/heraldrt/herald/internal/wire"

// The protocol's types, as a client meets them. They are aliases: a Change here is a
// wire.Change.
type (
	// Frame is one decoded server frame; Next returns *Change, *Message, *Resync, *Rows, *Live,
	// *Roster, *Join, *Leave, *ErrorFrame, *Expiring or *Unsubscribed.
	Frame = wire.Frame
	// FrameType is a frame's "type".
	FrameType = wire.FrameType
	// Position is a place in a subscription's stream: a table position ("16/B374D848.3") or a
	// channel position ("k7Hq2x:42"). ParsePosition reads the text form.
	Position = wire.Position
	// Welcome opens a session: the server's limits and the token's expiry.
	Welcome = wire.Welcome
	// Change is one table change.
	Change = wire.Change
	// Message is one channel publication.
	Message = wire.Message
	// Resync says items of a subscription were lost: the view is stale and must be re-read.
	Resync = wire.Resync
	// Rows is one page of a table subscription's snapshot (Subscription.Snapshot).
	Rows = wire.Rows
	// Live says a snapshot subscription's rows and the changes after them are the table's
	// state at Pos: from here on it is a live subscription, resumable from its position.
	Live = wire.Live
	// Roster is every member of a presence subscription's channel (Subscription.Presence),
	// sent once the subscription is live; Join and Leave follow as members come and go (a
	// Join also when a member replaces its meta).
	Roster = wire.Roster
	Join   = wire.Join
	Leave  = wire.Leave
	// Member is one member of a channel's presence: its id, its identity's subject, its meta.
	Member = wire.Member
	// Expiring warns that the token expires soon: call Refresh.
	Expiring = wire.Expiring
	// Unsubscribed, from Next, says the server ended a subscription; Code says why.
	Unsubscribed = wire.Unsubscribed
	// ErrorFrame is an error frame as the server sent it. From Next it is unprompted (a
	// policy_error with its Sub, say); a refused request returns an *Error instead.
	ErrorFrame = wire.Error
	// Code is an error code: "bad_frame", "unknown_table", ...
	Code = wire.Code
	// CloseCode is a WebSocket close code the server sends: 1012, 4000, 4101, ...
	CloseCode = wire.CloseCode
	// Reaction is what a client must do when the connection closes.
	Reaction = wire.Reaction
)

// The reactions to a close.
const (
	Reconnect      = wire.Reconnect
	Reauthenticate = wire.Reauthenticate
	Stop           = wire.Stop
)

// The data frame types Next returns.
const (
	FrameChange       = wire.FrameChange
	FrameMessage      = wire.FrameMessage
	FrameResync       = wire.FrameResync
	FrameRows         = wire.FrameRows
	FrameLive         = wire.FrameLive
	FrameRoster       = wire.FrameRoster
	FrameJoin         = wire.FrameJoin
	FrameLeave        = wire.FrameLeave
	FrameError        = wire.FrameError
	FrameExpiring     = wire.FrameExpiring
	FrameUnsubscribed = wire.FrameUnsubscribed
)

// ParsePosition reads a position's text form: "16/B374D848", "16/B374D848.3" or "k7Hq2x:42".
func ParsePosition(s string) (Position, error) { return wire.ParsePosition(s) }
