package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Code is the stable, machine-readable name of an error a client can receive, as the `code`
// field of an error frame. The same string is the log attribute and the metric label. Each code
// has an HTTP-like status (Code.Status) that tells a client which class of failure it is, so a
// client meeting a code newer than itself can still react by status.
type Code string

// The closed set of error codes. docs/PROTOCOL.md lists each with its status, meaning and the
// client's reaction; a test keeps the two in step.
const (
	// CodeBadFrame (400): the frame is not valid JSON, not an object, or a field is missing,
	// empty, of the wrong type or malformed. The message names the field.
	CodeBadFrame Code = "bad_frame"
	// CodeUnknownType (400): the frame's type is not one this server reads.
	CodeUnknownType Code = "unknown_type"
	// CodeFrameTooLarge (413): the frame is longer than welcome.limits.max_frame_bytes, or a
	// publish's data is longer than the server's limits.max_publish_bytes (Field "data").
	CodeFrameTooLarge Code = "frame_too_large"
	// CodeUnsupportedVersion (426): the client offered no protocol version the server speaks.
	CodeUnsupportedVersion Code = "unsupported_version"
	// CodeUnauthorized (401): the token is missing, malformed, or its signature, issuer or
	// audience does not verify.
	CodeUnauthorized Code = "unauthorized"
	// CodeTokenExpired (401): the token verified but has expired (or is not yet valid).
	CodeTokenExpired Code = "token_expired"
	// CodeForbidden (403): policy denies this identity the request: a subscribe rule said no,
	// or a refresh token belongs to another identity.
	CodeForbidden Code = "forbidden"
	// CodeNotFound (404): no such subscription on this connection. Also the answer for
	// another connection's subscription id, so it reveals nothing about other connections.
	CodeNotFound Code = "not_found"
	// CodeDuplicateSubscription (409): the connection already has a subscription with this id.
	CodeDuplicateSubscription Code = "duplicate_subscription"
	// CodeTooManySubscriptions (429): the connection holds welcome.limits.max_subscriptions.
	CodeTooManySubscriptions Code = "too_many_subscriptions"
	// CodeTooManyConnections (429): a connection limit (per node or per identity) is reached.
	CodeTooManyConnections Code = "too_many_connections"
	// CodeRateLimited (429): the connection sends requests faster than the server allows.
	CodeRateLimited Code = "rate_limited"
	// CodeTooSlow (429): the connection's queue stayed full past the server's limit; the
	// last event of an SSE stream the server ends for it (on WebSocket, close 4000).
	CodeTooSlow Code = "too_slow"
	// CodeBadFilter (400): the subscription's filter does not parse or does not type-check.
	CodeBadFilter Code = "bad_filter"
	// CodeUnknownTable (404): Herald does not stream that table (not in its publication).
	CodeUnknownTable Code = "unknown_table"
	// CodeUnknownColumn (400): a filter or columns list names a column the table lacks.
	CodeUnknownColumn Code = "unknown_column"
	// CodeBadPosition (400): a well-formed position that cannot be used here: the wrong kind
	// for the stream, or beyond the stream's head.
	CodeBadPosition Code = "bad_position"
	// CodePublishNotAllowed (403): policy does not let this identity publish to the channel.
	CodePublishNotAllowed Code = "publish_not_allowed"
	// CodeNotImplemented (501): a reserved part of the protocol this server does not serve
	// yet: subscribe mode "single", ack.
	CodeNotImplemented Code = "not_implemented"
	// CodePolicyError (500): a policy rule failed to evaluate. For a row rule this is sent
	// without a request id, alongside a resync for the affected subscription.
	CodePolicyError Code = "policy_error"
	// CodeInternal (500): a server bug or an unexpected failure.
	CodeInternal Code = "internal"
	// CodeUnavailable (503): a dependency is down (the changefeed, the store); try again later.
	CodeUnavailable Code = "unavailable"
)

var codeStatus = map[Code]int{
	CodeBadFrame:              400,
	CodeUnknownType:           400,
	CodeFrameTooLarge:         413,
	CodeUnsupportedVersion:    426,
	CodeUnauthorized:          401,
	CodeTokenExpired:          401,
	CodeForbidden:             403,
	CodeNotFound:              404,
	CodeDuplicateSubscription: 409,
	CodeTooManySubscriptions:  429,
	CodeTooManyConnections:    429,
	CodeRateLimited:           429,
	CodeTooSlow:               429,
	CodeBadFilter:             400,
	CodeUnknownTable:          404,
	CodeUnknownColumn:         400,
	CodeBadPosition:           400,
	CodePublishNotAllowed:     403,
	CodeNotImplemented:        501,
	CodePolicyError:           500,
	CodeInternal:              500,
	CodeUnavailable:           503,
}

// Codes returns every Code, in the order docs/PROTOCOL.md lists them, for metrics that
// pre-create their labels.
func Codes() []Code {
	return []Code{
		CodeBadFrame, CodeUnknownType, CodeFrameTooLarge, CodeUnsupportedVersion,
		CodeUnauthorized, CodeTokenExpired, CodeForbidden, CodeNotFound,
		CodeDuplicateSubscription, CodeTooManySubscriptions, CodeTooManyConnections,
		CodeRateLimited, CodeTooSlow, CodeBadFilter, CodeUnknownTable, CodeUnknownColumn, CodeBadPosition,
		CodePublishNotAllowed, CodeNotImplemented, CodePolicyError, CodeInternal, CodeUnavailable,
	}
}

// Known reports whether c is one of the codes this version defines.
func (c Code) Known() bool { _, ok := codeStatus[c]; return ok }

// Status returns c's HTTP-like status, or 500 for a code this version does not know.
func (c Code) Status() int {
	if s, ok := codeStatus[c]; ok {
		return s
	}
	return 500
}

func (c Code) String() string { return string(c) }

// Error is a client-facing error: what Decode returns for a frame it refuses, what the session
// returns for a request it refuses, and the error frame itself (it implements Frame), so a
// refusal goes back to the client as it is. Only Err stays on the server: it is never sent.
type Error struct {
	ID      string // the request id this answers; empty when none could be read, or unprompted
	Code    Code
	Status  int    // HTTP-like; zero means Code.Status()
	Message string // what failed and how to fix it, for a person; never a secret
	Field   string // the offending field for bad_frame, bad_position and frame_too_large, e.g. "from.offset"
	Sub     string // the subscription an unprompted error concerns, e.g. a policy_error
	Err     error  // the underlying cause, for logs; not sent
}

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	s := string(e.Code)
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// StatusCode returns the status sent with e: Status, or Code.Status() when Status is zero.
func (e *Error) StatusCode() int {
	if e.Status != 0 {
		return e.Status
	}
	return e.Code.Status()
}

// Type implements Frame.
func (*Error) Type() FrameType { return FrameError }
func (*Error) frame()          {}

// CodeOf returns the Code of the first *Error in err's chain, or CodeInternal when there is
// none: an error that was not made for the client is the server's fault, and its text is not
// for the client either.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// CloseCode is the status code of a WebSocket close frame the server sends. Standard codes are
// used where their meaning fits; Herald's own live in the private range 4000-4999, split by
// what a client must do so that a client meeting a code newer than itself still reacts
// correctly (see CloseCode.Reaction):
//
//	4000-4099  reconnect with backoff, then resume from your positions
//	4100-4199  get a fresh token, then reconnect and resume
//	4200-4499  reserved; treat as 4000-4099
//	4500-4999  do not reconnect automatically
type CloseCode uint16

// The closed set of close codes the server sends. docs/PROTOCOL.md lists each with the
// client's reaction; a test keeps the two in step.
const (
	// CloseNormal (1000): the server ends the connection at the client's request.
	CloseNormal CloseCode = 1000
	// CloseFrameTooLarge (1009): a client message exceeded max_frame_bytes before it could
	// be read as a frame. Do not resend it.
	CloseFrameTooLarge CloseCode = 1009
	// CloseInternal (1011): the server hit an unexpected condition.
	CloseInternal CloseCode = 1011
	// CloseShuttingDown (1012, "service restart"): the node is shutting down or restarting;
	// reconnect (the load balancer sends you to a live node) and resume.
	CloseShuttingDown CloseCode = 1012
	// CloseTooSlow (4000): the connection's queue stayed full past the server's limit.
	CloseTooSlow CloseCode = 4000
	// CloseTooManyConnections (4001): a connection limit was reached.
	CloseTooManyConnections CloseCode = 4001
	// CloseConnectTimeout (4002): no connect frame arrived within the server's deadline.
	CloseConnectTimeout CloseCode = 4002
	// ClosePingTimeout (4003): the client left the server's pings unanswered: the connection,
	// or the client, stalled. Reconnect and resume.
	ClosePingTimeout CloseCode = 4003
	// CloseTokenExpired (4100): the token expired and no refresh replaced it in time.
	CloseTokenExpired CloseCode = 4100
	// CloseAuthFailed (4101): the token was missing or did not verify.
	CloseAuthFailed CloseCode = 4101
	// CloseBadFrame (4500): a protocol violation the connection cannot survive: a first frame
	// that is not connect, a binary message, text that is not UTF-8.
	CloseBadFrame CloseCode = 4500
	// ClosePolicy (4501): policy no longer admits this identity (revoked, banned, a connect
	// rule said no).
	ClosePolicy CloseCode = 4501
)

var closeNames = map[CloseCode]string{
	CloseNormal:             "normal",
	CloseFrameTooLarge:      "frame_too_large",
	CloseInternal:           "internal",
	CloseShuttingDown:       "shutting_down",
	CloseTooSlow:            "too_slow",
	CloseTooManyConnections: "too_many_connections",
	CloseConnectTimeout:     "connect_timeout",
	ClosePingTimeout:        "ping_timeout",
	CloseTokenExpired:       "token_expired",
	CloseAuthFailed:         "auth_failed",
	CloseBadFrame:           "bad_frame",
	ClosePolicy:             "policy",
}

// CloseCodes returns every CloseCode, in the order docs/PROTOCOL.md lists them.
func CloseCodes() []CloseCode {
	return []CloseCode{
		CloseNormal, CloseFrameTooLarge, CloseInternal, CloseShuttingDown,
		CloseTooSlow, CloseTooManyConnections, CloseConnectTimeout, ClosePingTimeout,
		CloseTokenExpired, CloseAuthFailed, CloseBadFrame, ClosePolicy,
	}
}

// String returns the code's stable name, e.g. "too_slow": the close reason's prefix, the log
// attribute and the metric label. An unknown code prints as its number.
func (c CloseCode) String() string {
	if n, ok := closeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("close_%d", uint16(c))
}

// Known reports whether c is one of the codes this version defines.
func (c CloseCode) Known() bool { _, ok := closeNames[c]; return ok }

// Reaction is what a client must do when the connection closes.
type Reaction uint8

const (
	// Reconnect: reconnect with exponential backoff and full jitter, resubscribe, and resume
	// each subscription from the last position it received.
	Reconnect Reaction = iota + 1
	// Reauthenticate: get a fresh token first, then reconnect and resume. Reconnecting with
	// the same token fails the same way.
	Reauthenticate
	// Stop: do not reconnect automatically; surface the reason to the application.
	Stop
)

func (r Reaction) String() string {
	switch r {
	case Reconnect:
		return "reconnect"
	case Reauthenticate:
		return "reauthenticate"
	case Stop:
		return "stop"
	}
	return fmt.Sprintf("reaction_%d", uint8(r))
}

// Reaction returns what a client must do on a close with code c. It answers for every code,
// known or not: unknown private codes by their range, unknown standard codes (and 1006, the
// code a client sees when the connection dropped without a close frame) with Reconnect.
func (c CloseCode) Reaction() Reaction {
	switch {
	case c == CloseNormal:
		return Stop
	case c >= 4100 && c <= 4199:
		return Reauthenticate
	case c >= 4500 && c <= 4999:
		return Stop
	}
	return Reconnect
}

// maxCloseReason is the most a close frame's reason may hold: a control frame payload is at
// most 125 bytes, two of which are the code (RFC 6455 section 5.5).
const maxCloseReason = 123

// CloseReason returns the reason text for a close frame with code c: the code's name, then
// ": " and msg, cut to the 123 bytes a close frame allows without splitting a UTF-8 sequence.
// The name comes first so a client can read the reason even when the message is cut.
func CloseReason(c CloseCode, msg string) string {
	s := c.String()
	if msg != "" {
		s += ": " + msg
	}
	if len(s) <= maxCloseReason {
		return s
	}
	s = s[:maxCloseReason]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// ResyncReason says why a resync frame was sent: why the subscription's view went stale. The
// client's reaction is the same for every reason (see docs/PROTOCOL.md, "Resync"); the reason
// is for logs and metrics. A newer server may send a reason this version does not list.
type ResyncReason string

// The resync reasons of v1. lane_full and too_large are the delivery package's DropReasons,
// passed through unchanged.
const (
	// ResyncLaneFull: the connection's data queue was full; the client reads too slowly.
	ResyncLaneFull ResyncReason = "lane_full"
	// ResyncTooLarge: one item was larger than the connection's whole data queue.
	ResyncTooLarge ResyncReason = "too_large"
	// ResyncHistoryExpired: the subscribe's from position is older than the history the
	// server retains, so the items after it cannot be replayed.
	ResyncHistoryExpired ResyncReason = "history_expired"
	// ResyncStreamReset: the stream was recreated: a channel's epoch changed, or Herald's
	// replication slot was recreated. Positions from before it mean nothing now.
	ResyncStreamReset ResyncReason = "stream_reset"
	// ResyncPolicyError: a row rule failed to evaluate, so the server withheld the items
	// rather than guess. An error frame with code policy_error accompanies it.
	ResyncPolicyError ResyncReason = "policy_error"
	// ResyncTransactionTooLarge: a transaction was larger than the changefeed holds, so its
	// rows were let go (change.Txn.Overflow); first and last are its commit position.
	ResyncTransactionTooLarge ResyncReason = "transaction_too_large"
	// ResyncUpstreamGap: a hop before this node (the bus between nodes, a link between
	// regions) lost items and said so.
	ResyncUpstreamGap ResyncReason = "upstream_gap"
	// ResyncIncompleteImage: Postgres did not log enough of a row to tell how one change
	// affected the subscription's view (a column its filter reads was left out).
	ResyncIncompleteImage ResyncReason = "incomplete_image"
)

// ResyncReasons returns every ResyncReason, in the order docs/PROTOCOL.md lists them.
func ResyncReasons() []ResyncReason {
	return []ResyncReason{
		ResyncLaneFull, ResyncTooLarge, ResyncHistoryExpired, ResyncStreamReset,
		ResyncPolicyError, ResyncTransactionTooLarge, ResyncUpstreamGap, ResyncIncompleteImage,
	}
}
