package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/heraldrt/herald/internal/wire"
)

// ErrClosed is returned by a Conn's methods after Close.
var ErrClosed = errors.New("herald client: connection closed")

// Error is a request the server refused: its error frame, with the request it answers.
type Error struct {
	Op      string // the request: "connect", "subscribe", "unsubscribe", "publish", "ping", "refresh"
	Sub     string // the subscription the request named, if any
	Code    Code   // stable: react to it, never to Message
	Status  int    // the code's HTTP-like status; for a code this client does not know, react by class
	Field   string // the offending field, for bad_frame and bad_position
	Message string // for a person
}

func newError(op, sub string, f *wire.Error) *Error {
	return &Error{Op: op, Sub: sub, Code: f.Code, Status: f.StatusCode(), Field: f.Field, Message: f.Message}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Sub != "" {
		b.WriteString(" " + e.Sub)
	}
	fmt.Fprintf(&b, ": %s (%d)", e.Code, e.Status)
	if e.Field != "" {
		b.WriteString(" field " + e.Field)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Temporary reports whether repeating the request later may succeed: a 5xx, or a 429 that is
// about load rather than this request (rate_limited, too_many_connections, too_slow).
func (e *Error) Temporary() bool {
	switch e.Code {
	case wire.CodeRateLimited, wire.CodeTooManyConnections, wire.CodeTooSlow:
		return true
	case wire.CodeTooManySubscriptions:
		return false
	}
	return e.Status >= 500
}

// Hint says what to do about it, from docs/PROTOCOL.md's table of error codes.
func (e *Error) Hint() string { return CodeHint(e.Code, e.Status) }

// CodeHint is the client's reaction to an error code, as docs/PROTOCOL.md gives it. A code this
// client does not know is answered by its status class.
func CodeHint(c Code, status int) string {
	if h, ok := codeHints[c]; ok {
		return h
	}
	if status >= 500 {
		return "retry with backoff"
	}
	return "the request was wrong; do not repeat it unchanged"
}

var codeHints = map[Code]string{
	wire.CodeBadFrame:              "fix the frame as the message says; do not resend it unchanged",
	wire.CodeUnknownType:           "the server lacks this feature; do not resend it",
	wire.CodeFrameTooLarge:         "send less per frame",
	wire.CodeUnsupportedVersion:    "upgrade the client or the server",
	wire.CodeUnauthorized:          "get a new token, then reconnect",
	wire.CodeTokenExpired:          "get a fresh token, then reconnect or refresh",
	wire.CodeForbidden:             "policy denies this identity; do not retry with it",
	wire.CodeNotFound:              "treat the subscription as gone",
	wire.CodeDuplicateSubscription: "use another sub id, or unsubscribe first",
	wire.CodeTooManySubscriptions:  "unsubscribe from something first, or open another connection",
	wire.CodeTooManyConnections:    "reconnect later, with backoff starting at 10 s",
	wire.CodeRateLimited:           "retry after at least 1 s; send less often",
	wire.CodeTooSlow:               "reconnect and resume; read faster, or subscribe to less",
	wire.CodeBadFilter:             "fix the filter as the message says",
	wire.CodeUnknownTable:          "fix the table name, or add the table to the server's changefeed.tables",
	wire.CodeUnknownColumn:         "fix the column name",
	wire.CodeBadPosition:           "subscribe without a from position and re-read the view",
	wire.CodePublishNotAllowed:     "policy forbids publishing here; do not retry",
	wire.CodeNotImplemented:        "this server does not serve the feature; do not use it",
	wire.CodePolicyError:           "a server configuration problem: retry with backoff, and report it",
	wire.CodeInternal:              "retry with backoff; report it if it persists",
	wire.CodeUnavailable:           "retry with backoff",
}

// CloseError is the end of a connection: the close code the server sent, or 1006 when the
// connection dropped without one.
type CloseError struct {
	Code   CloseCode
	Reason string // the close frame's reason: the code's name, then a message
	// Cause is the error frame the server sent just before closing, when it sent one: why an
	// auth failure (4101) or a protocol violation (4500) happened.
	Cause *Error
	// Err is what the WebSocket library reported, or the server frame that could not be read.
	Err error
}

// closeAbnormal is 1006: the connection ended without a close frame. No server sends it; a
// client reports it for a connection that dropped.
const closeAbnormal CloseCode = 1006

// closeProtocolError is 1002 (protocol error), which this client sends, and reports, when a
// frame of the server's cannot be read.
const closeProtocolError CloseCode = 1002

// Reaction is what to do now: reconnect, reauthenticate, or stop.
func (e *CloseError) Reaction() Reaction { return e.Code.Reaction() }

// Hint says what to do, for a person.
func (e *CloseError) Hint() string {
	switch e.Code {
	case wire.CloseShuttingDown:
		return "the node is restarting: reconnect after a random 0 to 5 s and resume from your positions"
	case wire.CloseTooSlow:
		return "the client read too slowly: reconnect and resume; read faster, or subscribe to less"
	case wire.CloseTooManyConnections:
		return "the server is at its connection limit: reconnect with backoff starting at 10 s"
	case wire.CloseConnectTimeout:
		return "no connect frame arrived in time: reconnect and send connect first"
	case wire.ClosePingTimeout:
		return "the server's pings went unanswered: the connection or the client stalled; reconnect and resume"
	case wire.CloseTokenExpired:
		return "the token expired: get a fresh one, then reconnect and resume"
	case wire.CloseAuthFailed:
		return "the token was missing or did not verify: get a valid token before reconnecting"
	case wire.CloseBadFrame:
		return "a protocol violation (a client bug): report it; do not reconnect automatically"
	case wire.ClosePolicy:
		return "policy no longer admits this identity: do not reconnect"
	case wire.CloseNormal:
		return "the connection ended normally"
	}
	switch e.Reaction() {
	case Reauthenticate:
		return "get a fresh token, then reconnect and resume"
	case Stop:
		return "do not reconnect automatically"
	}
	return "reconnect with backoff and resume from your positions"
}

// closeName names a close code: the server's codes by wire's names, and the two this client
// makes up itself by what they mean.
func closeName(c CloseCode) string {
	switch c {
	case closeAbnormal:
		return "dropped"
	case closeProtocolError:
		return "unreadable_frame"
	}
	return c.String()
}

func (e *CloseError) Error() string {
	s := fmt.Sprintf("connection closed: %d %s (%s)", uint16(e.Code), closeName(e.Code), e.Reaction())
	if e.Reason != "" && e.Reason != e.Code.String() {
		s += ": " + e.Reason
	}
	if e.Cause != nil {
		s += "; " + e.Cause.Error()
	} else if e.Err != nil && (e.Code == closeAbnormal || e.Code == closeProtocolError) {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Cause and Err, so errors.As finds either.
func (e *CloseError) Unwrap() []error {
	var errs []error
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}
