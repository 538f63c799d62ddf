package session

// CloseReason is why a session ended, as the core knows it: each protocol maps it to its own
// close (herald.v1 to a WebSocket close code, or an SSE stream's last error event). The same
// string is the log attribute and the metric label; herald.v1's close codes carry the same
// names.
type CloseReason string

// The closed set of reasons a session ends for.
const (
	// CloseNormal: the client went away, or asked to end.
	CloseNormal CloseReason = "normal"
	// CloseFrameTooLarge: a client message exceeded the largest frame read.
	CloseFrameTooLarge CloseReason = "frame_too_large"
	// CloseInternal: the server hit an unexpected condition.
	CloseInternal CloseReason = "internal"
	// CloseShuttingDown: the node is shutting down; the client reconnects elsewhere and resumes.
	CloseShuttingDown CloseReason = "shutting_down"
	// CloseTooSlow: the client did not read what was queued for it in time (its data lane
	// stayed full, a write stayed blocked, its replies stayed unread).
	CloseTooSlow CloseReason = "too_slow"
	// ClosePingTimeout: the client left the transport's liveness checks unanswered.
	ClosePingTimeout CloseReason = "ping_timeout"
	// CloseTokenExpired: the token expired and no refresh replaced it in time.
	CloseTokenExpired CloseReason = "token_expired"
	// CloseBadFrame: a protocol violation the connection cannot survive.
	CloseBadFrame CloseReason = "bad_frame"
	// ClosePolicy: policy no longer admits the identity. Reserved: nothing closes with it yet.
	ClosePolicy CloseReason = "policy"
)

// CloseReasons returns every CloseReason, for a protocol's mapping to be checked against.
func CloseReasons() []CloseReason {
	return []CloseReason{CloseNormal, CloseFrameTooLarge, CloseInternal, CloseShuttingDown, CloseTooSlow,
		ClosePingTimeout, CloseTokenExpired, CloseBadFrame, ClosePolicy}
}

func (r CloseReason) String() string { return string(r) }
