// Package wire owns Herald's client protocol: the frames a client and the server exchange, their
// JSON encoding and strict decoding, stream positions, and the closed, documented sets of error
// codes, close codes and resync reasons.
//
// It is pure: it takes and returns bytes, does no I/O and starts no goroutines. Everything in
// it is safe for concurrent use; nothing in it holds state between calls.
//
// # Encoding
//
// Data frames (change, message) are encoded once per change or publication and shared by
// every subscriber it reaches, yet each subscriber has its own subscription id. So a data frame
// is two parts whose concatenation is one JSON object: a per-subscription head written by
// AppendDataHead, `{"type":"change","sub":"s1",`, and a shared body written by
// AppendChangeBody or AppendMessageBody, `"pos":"16/B374D848","idx":1,...}`. Both are
// append-style and allocate nothing. Control frames go through AppendFrame.
//
// Every frame this package writes is one line: raw JSON values (rows, data, filters) are
// compacted on the way through, so no frame contains a raw CR or LF. The SSE transport relies on
// that to send a frame as a single `data:` line.
//
// # Decoding
//
// Decode reads what a client sends; DecodePublishRequest reads the body of the HTTP publish
// API, a publish frame by another road; DecodeServer reads what the server sends (for the Go
// client and for tests). All are strict: the frame must be one JSON object of valid UTF-8,
// keys are case-sensitive, a known field may appear once, required fields must be present and
// of the right type. Unknown fields are ignored, so a newer peer may add optional fields.
// Every failure is an *Error carrying a Code, the request id when one could be read, the
// offending field and a message that says how to fix it. A decoded frame never aliases the
// input buffer.
//
// The protocol itself, with every frame, field, code and the client's correct reaction to
// each, is docs/PROTOCOL.md. A test keeps that document and the constants here in step.
package wire

// Protocol flow (herald.v1):
//
//	WebSocket  GET /v1/ws, Sec-WebSocket-Protocol: herald.v1
//	  client                                   server
//	  connect {id, token?}              ->
//	                                    <-     welcome {id, v, session, limits, expires_at?}
//	  subscribe {id, sub, table|channel,
//	             filter?, columns?, event?,
//	             from?, mode?, snapshot?} ->
//	                                    <-     subscribed {id, sub, pos?, snapshot?} (once live)
//	                                    <-     rows {sub, rows, progress, last?}  (snapshot only)
//	                                    <-     live {sub, pos}                  (snapshot only)
//	                                    <-     change {sub, pos, idx, op, ...}  (table data)
//	                                    <-     message {sub, pos, channel, event, data}
//	                                    <-     resync {sub, first, last, lost, reason}
//	  publish {id, channel, event?, data} ->
//	                                    <-     published {id, pos}
//	  refresh {id, token}               ->
//	                                    <-     refreshed {id, expires_at?}
//	                                    <-     expiring {expires_at, expires_in}
//	  ping {id}                         ->
//	                                    <-     pong {id}
//	  unsubscribe {id, sub}             ->
//	                                    <-     unsubscribed {id, sub}
//	  any bad request                   ->
//	                                    <-     error {id?, code, status, message}
//	                                    <-     close frame with a CloseCode
//
//	SSE  GET /v1/sse (text/event-stream; Last-Event-ID resumes the URL subscription)
//	     POST /v1/sse/{session} with one client frame; replies arrive on the stream.
//
// Version history:
//
//	v1  First version. WebSocket subprotocol "herald.v1", SSE under /v1/. Gained within v1,
//	    in optional fields and new frames: presence (track, untrack, tracked, untracked, roster,
//	    join, leave), durable subscriptions (mode "single", durable, ack, forget), snapshots
//	    (snapshot, rows, live, the codes that end one). docs/PROTOCOL.md, "Version history",
//	    is the full account.
const (
	// Version is the protocol version this package speaks: welcome.v.
	Version = 1
	// Subprotocol is the WebSocket subprotocol a client must offer to speak Version.
	Subprotocol = "herald.v1"
)
