// Package fault is the closed set of refusals a client can meet, whatever protocol carries
// them: each Code with its HTTP-like status, and Error, the refusal a component returns (a
// producer, a store) for the protocol edge to put in its own frame. It is the one place the
// codes a client sees are decided. Pure: no I/O.
package fault

import "errors"

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
	// CodeTooManyConnections (429): the node's connection limit, or its socket cap, is reached.
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
	// CodeNotImplemented (501): a part of the protocol this server does not serve yet: a
	// durable subscription to a table.
	CodeNotImplemented Code = "not_implemented"
	// CodePolicyError (500): a policy rule failed to evaluate. For a row rule this is sent
	// without a request id, alongside a resync for the affected subscription.
	CodePolicyError Code = "policy_error"
	// CodeInternal (500): a server bug or an unexpected failure.
	CodeInternal Code = "internal"
	// CodePresenceFull (429): a channel's presence already holds its most members
	// (presence.max_members); a member that is already there may still update its meta.
	CodePresenceFull Code = "presence_full"
	// CodeDurableConflict (409): the identity and app already hold a durable subscription of
	// this name with another definition (channel, event or mode); the existing one is
	// unaffected.
	CodeDurableConflict Code = "durable_conflict"
	// The codes a table subscription's snapshot ends with (handoff.Reason, the same strings;
	// policy_error is CodePolicyError). They end a subscription already answered subscribed,
	// in an unprompted unsubscribed; the client subscribes again, or changes its request.

	// CodeSnapshotBusy (503): too many snapshots are being read; the request waited its turn.
	CodeSnapshotBusy Code = "snapshot_busy"
	// CodeSnapshotTimeout (503): the snapshot took longer than handoff.timeout: reading it,
	// sending it to a client reading slowly, or the stream reaching past it.
	CodeSnapshotTimeout Code = "snapshot_timeout"
	// CodeSnapshotTooLarge (413): more rows (or bytes) match than a snapshot may carry
	// (handoff.max_rows, handoff.max_bytes), or one row is larger than the connection's queue.
	CodeSnapshotTooLarge Code = "snapshot_too_large"
	// CodeHandoffBufferFull (503): the changes held while the rows were read outgrew their
	// bound (handoff.early_bytes, handoff.pending_bytes).
	CodeHandoffBufferFull Code = "handoff_buffer_full"
	// CodeSnapshotOnStandby (500): the snapshot connection reached a standby.
	CodeSnapshotOnStandby Code = "snapshot_on_standby"
	// CodeSnapshotIsolation (500): the read transaction did not run at REPEATABLE READ.
	CodeSnapshotIsolation Code = "snapshot_isolation"
	// CodeSnapshotMismatch (503): the snapshot contradicts the change stream (another server).
	CodeSnapshotMismatch Code = "snapshot_mismatch"
	// CodeSchemaChanged (503): the table's columns changed while its rows were read.
	CodeSchemaChanged Code = "schema_changed"
	// CodeReplicationRestarted (503): the change stream restarted, or lost changes, while the
	// snapshot waited on it.
	CodeReplicationRestarted Code = "replication_restarted"
	// CodeTableNotReady (503): the table joined the publication too recently.
	CodeTableNotReady Code = "table_not_ready"
	// CodeSyncStandbyStalled (503): a transaction waits for a synchronous standby longer than
	// the look-back (handoff.lookback).
	CodeSyncStandbyStalled Code = "sync_standby_stalled"

	// CodeUnavailable (503): a dependency is down (the changefeed, the store), or the node is too
	// busy to take a publication (its fan-out queue stayed full); try again later.
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
	CodePresenceFull:          429,
	CodeDurableConflict:       409,
	CodeSnapshotBusy:          503,
	CodeSnapshotTimeout:       503,
	CodeSnapshotTooLarge:      413,
	CodeHandoffBufferFull:     503,
	CodeSnapshotOnStandby:     500,
	CodeSnapshotIsolation:     500,
	CodeSnapshotMismatch:      503,
	CodeSchemaChanged:         503,
	CodeReplicationRestarted:  503,
	CodeTableNotReady:         503,
	CodeSyncStandbyStalled:    503,
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
		CodePresenceFull, CodeDurableConflict, CodeSnapshotBusy, CodeSnapshotTimeout, CodeSnapshotTooLarge,
		CodeHandoffBufferFull, CodeSnapshotOnStandby, CodeSnapshotIsolation, CodeSnapshotMismatch,
		CodeSchemaChanged, CodeReplicationRestarted, CodeTableNotReady, CodeSyncStandbyStalled,
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

// Error is a refusal with a client-facing code, raised below the protocol edge: a router that
// refuses a filter, a store that is down. The edge turns it into its protocol's error (for
// herald.v1, an error frame with the same code, field and message). Only Err stays on the
// server.
type Error struct {
	Code    Code
	Field   string // the offending field of the request, e.g. "filter" or "columns[2]"
	Message string // what failed and how to fix it, for a person; never a secret
	Sub     string // the subscription an unprompted error concerns, e.g. a policy_error
	Err     error  // the underlying cause, for logs; not sent
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

// As reports whether err is or wraps a *Error, and returns it.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
