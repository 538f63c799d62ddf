// Package session is one client connection, whatever protocol it speaks and whatever carries
// it: its identity, its subscriptions, its lanes, and the writer that drains them onto its
// Transport. It speaks in typed operations (Subscribe, Unsubscribe, Publish, Refresh) that a
// protocol's package calls once it has decoded a request (internal/heraldv1 for herald.v1;
// also Track and Untrack for presence, Ack and Forget for durable subscriptions),
// returning typed results and client-facing refusals (*fault.Error) for the protocol to encode.
// The core writes no protocol's bytes itself: it imports no protocol package. What it must queue
// on its own (a subscription's reply that it is live, ahead of its data; the token's expiring
// warning and the error that explains an expiry) it has its connection's Codec encode, and it
// ends a session for a typed CloseReason, which the protocol renders as its own close.
//
// # Data path
//
// Producers hand a session stream items through Push (stream.Receiver), or PushDeferred
// (stream.DeferringReceiver) when a fan-out wakes the writers it fed once it is done: then the
// lanes' wake-up of a parked writer goes into the fan-out's stream.Wakeups instead of being
// made at once (delivery.Lanes.PushDataDeferred). The session encodes a change or a message
// with its connection's Codec (wire.Codec for herald.v1; each item is encoded once per codec
// and shared by every connection) and queues it on the data lane; a gap of any source, and a
// resumed subscription's gap, goes to delivery.Lanes.Gap, the one path a gap takes. The codec
// also encodes the gaps when the writer takes them.
//
// A resumed channel subscription's producer returns its replay (ChannelSubscription.Replay: the
// missed publications when the channel's history holds them all, else one gap for them), and
// pushes live items only after it. While the subscribe is being answered its live items wait in the
// subscription's bounded buffer (pending); the reply, then the replay, then the buffered items
// are queued under mu, in that order, so the client gets every item once and in order, through
// the same lanes and their bounds as any other.
//
// # Snapshots
//
// A table subscription asked with SubscribeRequest.Snapshot begins with its table's rows. Its
// producer attaches it with a hand-off that holds its changes (internal/handoff) and returns a
// SnapshotFunc; the session queues the subscribed reply (with snapshot, and no position), then
// runs the SnapshotFunc on a goroutine of its own, counted in snapshots and cancelled with the
// subscription (its unsubscribe) or the session (life). The function queues the rows as pages
// on the data lane (SnapshotPages.Page, which waits for room rather than lose a page: a page
// has no position a gap could name), and the hand-off then delivers through Push what the rows
// do not hold, and the Live item, which the session queues as a data frame (Codec.Live) after
// them. A snapshot that fails ends its subscription with an unprompted Codec.Ended carrying
// the failure's code, queued under mu as a reply is. The session's end waits for every
// snapshot's goroutine, after it has let go of the subscriptions and closed the lanes, either
// of which stops one.
//
// # Policy
//
// A channel subscription and a client's publication are asked of Deps.Policy first; a table
// subscription's producer (Tables) judges it, with the identity the session puts in the
// request, since it knows the table's columns. A refresh has every subscription judged again
// against the new claims (its producer's Recheck, or the channel rule) outside mu, and ends
// each one no longer allowed with an unprompted Codec.Ended, queued under mu like a reply, so
// nothing of the subscription follows it; the connection goes on. A policy_error gap from a
// producer is preceded, once per subscription, by an error naming the rule (Codec.Fault with
// the sub), so a rule that fails on every change does not flood the control lane: the gaps
// themselves merge in the lanes.
//
// # Presence
//
// Track and Untrack make the connection a member of a channel's presence (Deps.Presence), after
// the channel's presence rule (Deps.Policy, action "presence"); the session keeps the channels
// it tracks, at most MaxSubscriptions, in tracked (under mu), and untracks them all when it
// ends (finish, Abort), so their leaves go out at once. A channel subscription with Presence
// is watched once its subscribed reply is queued: the roster, then the joins and leaves, come
// as stream items whose frames (Codec.PresenceHead and the shared body) are queued on the
// control lane, with the replies, not on the data lane: they are never replaced by a gap
// marker, and a client that does not read them is closed as too slow, as for unread replies.
// The server bounds a roster to half the control lane (config: presence.max_members times
// presence.max_meta_bytes). A watch that fails ends the subscription with Codec.Ended. A
// refresh judges every tracked channel again by its presence rule and untracks each one the new
// claims fail, with an unprompted Codec.Fault naming the channel. The
// presence lock is taken before mu: a session calls into presence outside mu.
//
// # Durable subscriptions
//
// A subscribe with Durable binds the connection to the identity's durable subscription of that
// name through Deps.Durable (the node's durable registry), which outlives the connection: its
// producer pushes the subscription's messages to the session like any other, and its markers
// too, but those are queued in line with the data (delivery.Frame.First) rather than as the
// lanes' marker, which the messages after them would join: the durable queue reported exactly
// what it lost, and what follows is not part of it. Ack settles a message of one with
// acknowledged delivery (Single); Forget deletes one, bound here or not. When another
// connection deletes it, the registry ends this one with an unprompted Codec.Ended (endDurable).
//
// # Concurrency
//
// Three kinds of goroutine touch a Session:
//   - the reader (a WebSocket read loop, or the HTTP handlers of SSE commands), through its
//     protocol's package, calls the operations, after AwaitReplyRoom or a check of ReplyRoom;
//     the protocol serialises a connection's requests itself;
//   - producers (the channel hub's fan-out goroutines, the table router), through the bus, call
//     Push or PushDeferred, which never block;
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
// entry in the context's list, not a goroutine). Their callbacks are the session's goroutines
// too: the session's end (its finish, or Abort) lets no more of them start and waits for those
// running, so none outlives it. A subscribe runs on its caller's goroutine, under the caller's
// context, cut short by the session's close.
//
// # Bounds
//
// What a session holds is bounded by count and bytes, each with its overflow rule: the lanes
// (see delivery: data past its frames or bytes is replaced with a gap marker, control past its
// frames or bytes closes the session as too slow); the items delivered to a subscription
// whose reply is not queued yet, held to the data lane's frames and bytes, past which they
// join one gap marked right after them (replace with a marker); the subscriptions, at most
// MaxSubscriptions, past which a subscribe is refused; the replies to requests, for which a
// reader waits for room (AwaitReplyRoom) or a command is refused (ReplyRoom), and which close
// the session as too slow if they stay unread for SlowTimeout.
//
// mu guards the identity and the subscription table; stallMu guards the stall timer. Push (and
// PushDeferred) takes mu only to look the subscription up (and to buffer an item for one whose
// reply is not queued yet), then releases it before it queues on the lanes, which have their
// own lock;
// a subscribe queues its reply and the buffered items under mu. Lock order: mu, then the
// lanes' lock; mu, then stallMu (a push under mu may arm the stall timer, through the lanes'
// OnStall, which runs once the lanes' lock is released). stallMu and the lanes' lock are never
// held together, and nothing takes mu while it holds stallMu. timerMu is taken alone. Nothing is
// written to the network under mu.
//
// # Counting
//
// A session made with Config.Counts adds to it each subscription that goes live (as its reply is
// queued) and each live one's end, however it ends, under mu as the subscription table changes:
// the node's metrics read the sums of every session without a walk over them. The lanes count
// into delivery.Config.Totals likewise.
//
// # Lifecycle
//
// New makes a session for an identity that has already been verified. Start starts the token's
// expiry timer (the warning, then the close for CloseTokenExpired at Identity.ExpiresAt) and
// the first writer; Wait returns once the session has finished and its writers have ended,
// after every subscription has been let go; Run is Start and Wait. Close may be called from any
// goroutine, any number of times: the first call wins. The writer then writes the control
// frames still queued (the error that explains the close, say) within a short grace period,
// closes the transport with the reason, lets go of the subscriptions, and closes Done. A write stuck on a
// client that stopped reading cannot hold the close: after the grace period the transport is
// closed from outside, which fails the write.
package session
