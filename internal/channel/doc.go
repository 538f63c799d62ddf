// Package channel owns Herald's channels on one node: the grammar of channel names, event names
// and subscription patterns, each channel's stream of offsets and epochs, and the fan-out of a
// publication to the subscriptions it matches.
//
// # Names and patterns
//
// A channel name is a path of 1 to MaxDepth segments, "docs/alice/inbox" (CheckName). A
// subscription's Pattern is a name whose segments after a literal prefix, its anchor, may be
// "*" (one segment) or end with "**" (one or more), plus an optional exact event-name filter
// (ParsePattern). Every refusal is an *Error with a stable Reason.
//
// # Dispatch
//
// The hub indexes subscriptions by the anchor token of their pattern, and groups the
// subscriptions of one token by pattern. A publish to "a/b/c" looks up its ancestor tokens, the
// root "", "a", "a/b" and "a/b/c", one map lookup each, and evaluates the pattern of each group
// it finds there. So a publish costs O(depth of the name) plus O(candidate groups) plus
// O(matching subscriptions), whatever the number of subscriptions elsewhere. A pattern
// anchored at the root ("**", "*/inbox") is a candidate for every publish.
//
// # Offsets and epochs
//
// Positions are the Broker's business, not the fan-out's: each channel's stream has an epoch,
// chosen when the stream starts, and an offset, which the first publication sets to 1 and each
// publication raises by one. Every publication carries stream.ChannelPosition(epoch, offset).
// Should the offset reach stream.MaxSafeOffset, the stream takes a new epoch and starts again
// at 1. MemoryBroker keeps them for one node; a broker shared by many nodes (Redis) goes behind
// the same interface. The hub asks the broker under the channel's lock, so one channel's
// positions are assigned in the order its publications are delivered.
//
// A channel's state lives while a subscription holds it. A subscription holds a channel once
// it has subscribed to it exactly, or once a publication to it has matched its pattern, whatever
// its event filter made of that publication. Holds are kept per anchor token, not per
// subscription, so tracking them costs O(depth) per channel rather than O(subscriptions): a
// channel stays held while the token it was matched under is watched. Two things let go of it:
// the last subscription under a token leaving releases the channels that token held, and a
// publication that no live pattern matches releases its channel at once. A channel nothing
// holds is forgotten. So the hub keeps state for the channels someone on this node receives,
// plus, until their next publication, those whose subscribers left while other subscriptions
// under the same token stayed; never for every channel ever published to.
//
// The price is that a forgotten channel's next publication starts a new epoch at offset 1. A
// client that comes back with a position from the old epoch is told its view went stale (the
// session answers a resume across epochs with a resync of reason stream_reset), and that is the
// truth: what was published while nobody on this node held the channel reached nobody and was
// not kept. A subscription that keeps receiving from a channel never sees its epoch change,
// except at wire.MaxSafeOffset.
//
// With MemoryBroker the streams are per node: two nodes give the same channel different epochs.
// Offsets that agree across nodes need a shared broker: store/redis.Broker is one (not wired
// yet), and store/storetest.RunBroker is the contract both pass.
//
// # Concurrency model
//
// A Hub is safe for concurrent use. Publish is called by session reader goroutines and HTTP
// handlers; Subscribe and the unsubscribe it returns by session goroutines. The hub starts no
// goroutine: each publication is handed to the Bus, one stream.Item shared by every
// subscription it reaches, on its publisher's goroutine, before Publish returns. The hub knows
// no protocol: the session encodes the item for its connection (once per protocol).
//
// Locks, and what each guards:
//
//   - state.mu, one per channel: its holders, and the order of its publications. A publish holds
//     it from asking the broker for a position to its last delivery, so publications to one
//     channel reach every subscriber in offset order, and an exact Subscribe holds it while it
//     asks the broker for the head and joins, so it joins between two publications.
//     Publications to different channels take different locks and run in parallel.
//   - MemoryBroker.mu: the broker's streams. Taken briefly under state.mu, never across
//     anything else.
//   - Hub.mu (RWMutex): the subscription index. A publish holds it shared only while it
//     collects the matching subscriptions into a pooled slice; Subscribe and unsubscribe hold
//     it exclusively for an O(1) update.
//   - bucket.chMu: which channels a token's bucket holds. Taken briefly under Hub.mu.
//   - subscription.mu (RWMutex): whether the subscription is live. Held shared around each
//     delivery, exclusively by unsubscribe, so that once unsubscribe returns no delivery for it
//     is running or will start.
//   - Hub.chMu (RWMutex): which channel states exist. Held shared for a lookup, exclusively to
//     create or forget a state, never across anything else.
//
// Lock order: state.mu, then MemoryBroker.mu; state.mu, then Hub.mu, then bucket.chMu;
// state.mu, then subscription.mu, then whatever the bus and the receiver take (the session's
// mu, then the connection's delivery.Lanes lock); state.mu, then Hub.chMu (and under it
// MemoryBroker.mu, to forget a stream). Hub.mu and Hub.chMu are never held together, and
// unsubscribe takes Hub.mu, subscription.mu and each state.mu one after the other, never
// nested. Because unsubscribe waits on subscription.mu for a running delivery, its caller must
// not hold a lock a delivery takes (the session calls it outside its own mutex).
//
// A delivery runs under state.mu and subscription.mu, which is why the bus and the receiver
// must not block and must not call back into the hub. That is not I/O under a lock: the
// session's Push is delivery.Lanes.PushData, O(1) work under the connection's own lock that
// never waits for the socket. A slow client's lane overflows into a resync marker instead of
// holding the publisher, so the channel lock is held for O(matching subscriptions) memory work
// and no longer.
//
// # Lifecycle
//
// New returns an empty hub on a bus. There is nothing to close: it owns no goroutine, and a hub
// nobody references is collected with its state. A subscription ends with its unsubscribe function;
// the session calls it for each subscription when the connection goes.
package channel
