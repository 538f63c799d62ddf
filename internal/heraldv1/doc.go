// Package heraldv1 is herald.v1 on a session: it decodes a client's frame, acts on the session
// core (internal/session), and encodes the reply. It maps the core's typed results and
// refusals to herald.v1's frames and error codes, and the reasons a session ends for to
// herald.v1's close codes (CloseCode); the transports that carry herald.v1 (WebSocket, SSE)
// hand it the frames they read, and reach the core's Transport through Transport, which turns
// a close reason into their close code. Another protocol is another package beside this one,
// over the same core: the core, the producers and the bus do not change for it.
//
// # Concurrency
//
// A Conn handles one frame at a time, in the order they are handed over, under its mu: a
// WebSocket has one reader, but SSE commands come over concurrent requests, and a subscribe
// must not race the unsubscribe that follows it. mu is taken before any lock of the session's,
// and is held while the session calls its producers (a subscribe): lock order Conn.mu, then
// the producers' locks and the session's (see docs/ARCHITECTURE.md). A Conn starts no
// goroutine and holds no buffer: replies go onto the session's control lane, bounded by its
// frames and bytes, which the session's writer drains. A request waits on a producer no longer
// than its context, or the session's close, allows.
package heraldv1
