// Package session is one client connection, whatever carries it: it answers the client's
// frames, holds its identity and subscriptions, and owns the writer that drains the
// connection's lanes onto its Transport.
//
// # Data path
//
// Producers hand a session stream items through Push (stream.Receiver), or PushDeferred
// (stream.DeferringReceiver) when a fan-out wakes the writers it fed once it is done: then the
// lanes' wake-up of a parked writer goes into the fan-out's stream.Wakeups instead of being
// made at once (delivery.Lanes.PushDataDeferred). The session encodes a
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
//   - producers (the channel hub's fan-out goroutines, the table router), through the bus, call
//     Push or PushDeferred, which never block;
//   - the writer, Run, is the only goroutine that writes to the Transport.
//
// The writer is the only goroutine a session runs: an idle session costs one parked goroutine.
// What else it must do on time is done by timers whose callbacks are short and never write to
// the Transport: the token's expiry (the expiring warning, then the close), the stall check,
// armed by the lanes' OnStall as the data lane begins losing frames and not while it is not,
// and the close's grace period. The first Close ends the writer's wait itself, by cancelling
// the context the writer waits under, rather than a goroutine watching for it.
//
// mu guards the identity and the subscription table; stallMu guards the stall timer. Push (and
// PushDeferred) takes mu only to look the subscription up (and to buffer an item for one whose subscribed is
// not queued yet), then releases it before it queues on the lanes, which have their own lock;
// a subscribe queues its subscribed and the buffered items under mu. Lock order: mu, then the
// lanes' lock; mu, then stallMu (a push under mu may arm the stall timer, through the lanes'
// OnStall, which runs once the lanes' lock is released). stallMu and the lanes' lock are never
// held together, and nothing takes mu while it holds stallMu. Nothing is written to the
// network under mu.
//
// # Lifecycle
//
// New makes a session for an identity that has already been verified. Run starts the token's
// expiry timer (the warning, then the close with 4100 at Identity.ExpiresAt) and writes until the
// session closes and returns when its writer has ended, after every subscription has been let
// go. Close may be called from any goroutine, any number of times: the first call wins. The
// writer then writes the control frames still queued (the error that explains the close, say)
// within a short grace period, closes the transport with the code, and ends. A write stuck on a
// client that stopped reading cannot hold the close: after the grace period the transport is
// closed from outside, which fails the write.
package session
