// Package session is one client connection, whatever carries it: it answers the client's
// frames, holds its identity and subscriptions, and owns the writer that drains the
// connection's lanes onto its Transport.
//
// # Data path
//
// Producers hand a session stream items through Push (stream.Receiver). The session encodes a
// change or a message with its connection's Codec (wire.Codec for herald.v1; each item is
// encoded once per codec and shared by every connection) and queues it on the data lane; a gap
// of any source, and a resumed subscription's gap, goes to delivery.Lanes.Gap, the one path a
// gap takes. The codec also encodes the gaps when the writer takes them.
//
// # Concurrency
//
// Three kinds of goroutine touch a Session:
//   - the reader (a WebSocket read loop, or the HTTP handlers of SSE commands) calls Handle,
//     after AwaitReplyRoom, or TryHandle;
//   - producers (the channel hub, the table router), through the bus, call Push, which never
//     blocks;
//   - the writer is the only goroutine that writes frames to the Transport.
//
// # Writer
//
// The writer runs on demand: a goroutine that drains the lanes onto the Transport and ends
// when they are empty, so an idle session holds no goroutine at all. The lanes are made with
// delivery.Config.Wake: the writer gives its place up under the lanes' lock, in the same
// critical section in which it finds them empty (TryNextOrPark), and the first push after that
// takes the place and calls Wake, which starts the next writer. So a push is never missed, and
// only whoever holds the place starts a writer: there is never more than one. Start starts the
// first (the lanes are made with its place taken, so welcome, queued before Start, waits for
// it). A close that finds no writer takes the place with Claim and starts one to finish the
// session; a writer that gives its place up as a close begins looks at closing once more and
// claims it back, and only one of the two succeeds. Every writer is counted in a WaitGroup,
// which Wait waits for once the session has finished: by then the lanes are closed, and
// nothing can start another.
//
// What else a session must do on time is done by timers whose callbacks are short and never
// write to the Transport: the token's expiry (the expiring warning, then the close), the stall
// check, armed by the lanes' OnStall as the data lane begins losing frames and not while it is
// not, the close's grace period, and the end of the server's context (context.AfterFunc, an
// entry in the context's list, not a goroutine).
//
// mu guards the identity and the subscription table; stallMu guards the stall timer. Push
// takes mu only to look the subscription up (and to buffer an item for one whose subscribed is
// not queued yet), then releases it before it queues on the lanes, which have their own lock;
// a subscribe queues its subscribed and the buffered items under mu. Lock order: mu, then the
// lanes' lock; mu, then stallMu (a push under mu may arm the stall timer, through the lanes'
// OnStall, which runs once the lanes' lock is released). stallMu and the lanes' lock are never
// held together, and nothing takes mu while it holds stallMu. Nothing is written to the
// network under mu.
//
// # Lifecycle
//
// New makes a session for an identity that has already been verified. Start starts the token's
// expiry timer (the warning, then the close with 4100 at Identity.ExpiresAt) and the first
// writer; Wait returns once the session has finished and its writers have ended, after every
// subscription has been let go; Run is Start and Wait. Close may be called from any goroutine,
// any number of times: the first call wins. The writer then writes the control frames still
// queued (the error that explains the close, say) within a short grace period, closes the
// transport with the code, lets go of the subscriptions, and closes Done. A write stuck on a
// client that stopped reading cannot hold the close: after the grace period the transport is
// closed from outside, which fails the write.
package session
