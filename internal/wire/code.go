package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
)

// Code is the stable, machine-readable name of an error a client can receive: fault.Code,
// where the closed set and each code's status are decided. docs/PROTOCOL.md lists them.
type Code = fault.Code

// The codes; see fault.Code for each.
const (
	CodeBadFrame              = fault.CodeBadFrame
	CodeUnknownType           = fault.CodeUnknownType
	CodeFrameTooLarge         = fault.CodeFrameTooLarge
	CodeUnsupportedVersion    = fault.CodeUnsupportedVersion
	CodeUnauthorized          = fault.CodeUnauthorized
	CodeTokenExpired          = fault.CodeTokenExpired
	CodeForbidden             = fault.CodeForbidden
	CodeNotFound              = fault.CodeNotFound
	CodeDuplicateSubscription = fault.CodeDuplicateSubscription
	CodeTooManySubscriptions  = fault.CodeTooManySubscriptions
	CodeTooManyConnections    = fault.CodeTooManyConnections
	CodeRateLimited           = fault.CodeRateLimited
	CodeTooSlow               = fault.CodeTooSlow
	CodeBadFilter             = fault.CodeBadFilter
	CodeUnknownTable          = fault.CodeUnknownTable
	CodeUnknownColumn         = fault.CodeUnknownColumn
	CodeBadPosition           = fault.CodeBadPosition
	CodePublishNotAllowed     = fault.CodePublishNotAllowed
	CodeNotImplemented        = fault.CodeNotImplemented
	CodePolicyError           = fault.CodePolicyError
	CodeInternal              = fault.CodeInternal
	CodeUnavailable           = fault.CodeUnavailable
	CodePresenceFull          = fault.CodePresenceFull
	CodeDurableConflict       = fault.CodeDurableConflict
	CodeSnapshotBusy          = fault.CodeSnapshotBusy
	CodeSnapshotTimeout       = fault.CodeSnapshotTimeout
	CodeSnapshotTooLarge      = fault.CodeSnapshotTooLarge
	CodeHandoffBufferFull     = fault.CodeHandoffBufferFull
	CodeSnapshotOnStandby     = fault.CodeSnapshotOnStandby
	CodeSnapshotIsolation     = fault.CodeSnapshotIsolation
	CodeSnapshotMismatch      = fault.CodeSnapshotMismatch
	CodeSchemaChanged         = fault.CodeSchemaChanged
	CodeReplicationRestarted  = fault.CodeReplicationRestarted
	CodeTableNotReady         = fault.CodeTableNotReady
	CodeSyncStandbyStalled    = fault.CodeSyncStandbyStalled
)

// Codes returns every Code, in the order docs/PROTOCOL.md lists them.
func Codes() []Code { return fault.Codes() }

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

// Error reads as a fault.Error with the same code, field and message does.
func (e *Error) Error() string {
	return (&fault.Error{Code: e.Code, Field: e.Field, Message: e.Message}).Error()
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
	if e, ok := AsError(err); ok {
		return e.Code
	}
	return CodeInternal
}

// AsError returns the error frame that answers err: err itself when it is or wraps an *Error,
// the same code, field and message when it is or wraps a *fault.Error raised below the
// protocol edge; false otherwise.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	if fe, ok := fault.As(err); ok {
		return &Error{Code: fe.Code, Field: fe.Field, Message: fe.Message, Err: fe}, true
	}
	return nil, false
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
	// that is not connect, a binary message, text that is not UTF-8, a WebSocket frame RFC 6455
	// forbids.
	CloseBadFrame CloseCode = 4500
	// ClosePolicy (4501): reserved for a policy that no longer admits this identity (revoked,
	// banned). No session closes with it yet; the set and clients keep it.
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
// is for logs and metrics. A newer server may send a reason this version does not list. It is
// the stream's gap reason, passed through unchanged.
type ResyncReason = stream.Reason

// The resync reasons of v1: see stream.Reason for each.
const (
	ResyncLaneFull            = stream.ReasonLaneFull
	ResyncTooLarge            = stream.ReasonTooLarge
	ResyncHistoryExpired      = stream.ReasonHistoryExpired
	ResyncStreamReset         = stream.ReasonStreamReset
	ResyncPolicyError         = stream.ReasonPolicyError
	ResyncTransactionTooLarge = stream.ReasonTransactionTooLarge
	ResyncUpstreamGap         = stream.ReasonUpstreamGap
	ResyncIncompleteImage     = stream.ReasonIncompleteImage
	ResyncQueueFull           = stream.ReasonQueueFull
	ResyncParked              = stream.ReasonParked
)

// ResyncReasons returns every ResyncReason, in the order docs/PROTOCOL.md lists them.
func ResyncReasons() []ResyncReason {
	return []ResyncReason{
		ResyncLaneFull, ResyncTooLarge, ResyncHistoryExpired, ResyncStreamReset,
		ResyncPolicyError, ResyncTransactionTooLarge, ResyncUpstreamGap, ResyncIncompleteImage,
		ResyncQueueFull, ResyncParked,
	}
}
