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
// Forgetting the state tells the broker (Broker.Forget). Without a history, that ends the
// stream: the channel's next publication starts a new epoch at offset 1, and a client that
// comes back with a position from the old epoch is told its view went stale (a resync of
// reason stream_reset), which is the truth: what was published while nobody on this node held
// the channel reached nobody and was not kept. With a history (below) the broker keeps the
// stream, epoch and history, until the history expires by age: a channel inside its history
// window is not forgotten, whether or not anyone holds it. A subscription that keeps receiving
// from a channel never sees its epoch change, except at wire.MaxSafeOffset.
//
// # History and resume
//
// A Broker that is a History keeps each channel's last publications, bounded by HistoryConfig:
// by count, by bytes and by age (MemoryBroker: 100, 64 KiB and two minutes by default). The
// hub publishes through History.Append, which takes the offset and keeps the publication in
// one step (one script with Redis), so the history is in offset order and is always a run of
// consecutive offsets ending at the head. MemoryBroker keeps the item the hub hands to its
// subscribers, so a replay shares the encodings the live delivery made.
//
// SubscribeFrom resumes an exact subscription after from, the last position its client
// received: under the channel's lock it reads the head and the history after from
// (History.Since), decides where live delivery starts, and joins, so the replay it returns
// (Start.Replay: the missed publications its event filter passes when the history still holds
// them all, else one gap for them, history_expired, or stream_reset when from's epoch ended)
// and the live deliveries after it meet exactly: a publish waits for the lock, and is either
// in the history read or delivered live. The caller (the session) queues the replay ahead of
// the live items, which it holds until then. See resume.go.
//
// With MemoryBroker the streams are per node: two nodes give the same channel different epochs.
// Offsets that agree across nodes need a shared broker: store/redis.Broker is one, and
// store/storetest.RunBroker is the contract both pass.
//
// # Many nodes
//
// With a Config.Remote (nodes sharing a broker), every publication is also forwarded, under
// its channel's lock and in offset order, to the Remote, which carries it to the other nodes
// whose subscriptions it matches; they hand it on with Deliver. Because a channel's offsets
// are taken on several nodes and travel paths of different lengths, a node then hands a
// channel's publications on, its own and the others', strictly in offset order: it holds one
// that arrives ahead of a hole for up to Config.OrderWait, then reports the hole as a gap
// (upstream_gap, with the exact range) to the channel's subscribers, whatever their event
// filter. An exact subscription starts after the last offset the node handed on (the
// broker's head when the node holds the channel for the first time), so what is on its way
// reaches it; a pattern takes each channel from the first publication of it that arrives. A
// subscription resuming on this node is replayed from the shared history up to that start,
// which holds every offset the broker handed out; one resuming from a position this node has
// not handed on yet (its client received it from another node) starts there, and what is on
// its way up to it is not delivered to it again.
// A publication in a new epoch (the shared broker lost the stream), or a new subscription
// reading a head in one, is a gap of reason stream_reset from the old epoch's next offset.
// Verify, which the cluster node runs when the bus between nodes reports a loss, asks the
// broker for each held channel's head, and Lost, which it calls for a publication that did
// not reach this hub (the sender could not route it, or Deliver refused it), names one: either
// way a lost publication with nothing after it is reported too, once the order wait passes
// without it.
// The order state lives in the channel's state, under state.mu; its one timer (time.AfterFunc)
// takes state.mu like a publish, and is stopped when the state is forgotten.
//
// # Concurrency model
//
// A Hub is safe for concurrent use. Publish is called by session reader goroutines and HTTP
// handlers; Subscribe and the unsubscribe it returns by session goroutines. The hub knows no
// protocol: it hands one stream.Item, shared by every subscription it reaches, to the Bus, and
// the session encodes it for its connection (once per protocol).
//
// # Fan-out
//
// A publish does not deliver on its caller's goroutine. Under its channel's lock it asks the
// broker for the position, collects the matching subscriptions, and appends the publication to
// its channel's fan-out queue, then returns. The hub has Config.Shards queues, each with one
// goroutine (started by the queue's first publication); a channel always uses the queue its name
// hashes to, so its publications are handed on in the order they were queued, which is offset
// order. The goroutine takes every publication waiting, hands each to the bus for each
// subscription it reaches (bus DeliverDeferred), and wakes the writers those deliveries made
// runnable once per batch (stream.Wakeups), at its end (or every 32k deliveries of a huge one),
// rather than once per delivery: a writer takes all a batch queued for it in one write, and
// the writers do not compete with the fan-out still feeding them. Having woken them, the
// goroutine yields once before it takes the next batch, so that while the writers are what
// holds the node back, the publications arriving meanwhile make the next batch larger.
//
// A queue is bounded by publications (Config.QueueLen), by the deliveries they make
// (Config.QueueDeliveries: a few tens of milliseconds of fan-out by default, enough to batch
// wake-ups, short enough that a publication does not wait long behind others) and by bytes
// (Config.QueueBytes: their data). Its overflow rule is wait, then refuse: a publish takes
// room before it takes the channel's lock or a position, waits for room in turn with the other
// publishers waiting (first come, first served) up to Config.QueueWait, and is then refused
// with a *BusyError (ErrBusy), having taken no position, so a refused publication leaves no
// hole in the channel's offsets. So publishers that outpace the fan-out are held back to its
// pace. An empty queue always has room. Close stops taking publications, hands on what was queued and returns once the
// goroutines have; Flush waits for what was published before it to be handed on.
//
// Which subscriptions a publication reaches is decided when its position is assigned, under
// the channel's lock: an exact Subscribe joins between two publications, as before. A
// subscription is still checked as it is delivered to, so one that ended meanwhile gets
// nothing: once unsubscribe returns, no delivery to it is running and none will start.
//
// Locks, and what each guards:
//
//   - state.mu, one per channel: its holders, and the order of its publications. A publish holds
//     it from asking the broker for a position to queueing the publication, so publications
//     to one channel are queued in offset order, and an exact Subscribe holds it while it
//     asks the broker for the head and joins, so it joins between two publications.
//     Publications to different channels take different locks and run in parallel.
//   - MemoryBroker.mu: the broker's streams. Taken briefly under state.mu, never across
//     anything else.
//   - Hub.mu (RWMutex): the subscription index. A publish holds it shared only while it
//     collects the matching subscriptions into a pooled slice; Subscribe and unsubscribe hold
//     it exclusively for an O(1) update.
//   - bucket.chMu: which channels a token's bucket holds. Taken briefly under Hub.mu.
//   - queue.mu, one per fan-out queue: its publications, its counts and bytes. Taken briefly,
//     by a publish to take room (before state.mu) and to queue (under state.mu), and by the
//     queue's goroutine to take a batch and to free room (under no other lock). Never held
//     across a delivery or a wait.
//   - subscription.mu (RWMutex): whether the subscription is live. Held shared around each
//     delivery, on the queue's goroutine, exclusively by unsubscribe, so that once unsubscribe
//     returns no delivery for it is running or will start.
//   - Hub.chMu (RWMutex): which channel states exist. Held shared for a lookup, exclusively to
//     create or forget a state, never across anything else.
//
// Lock order: state.mu, then MemoryBroker.mu (Append, Since, Head); state.mu, then Hub.mu, then bucket.chMu;
// state.mu, then queue.mu; subscription.mu, then whatever the bus and the receiver take (the
// session's mu, then the connection's delivery.Lanes lock); state.mu, then Hub.chMu (and under
// it MemoryBroker.mu, to forget a stream). Hub.mu and Hub.chMu are never held together, and
// unsubscribe takes Hub.mu, subscription.mu and each state.mu one after the other, never
// nested. Because unsubscribe waits on subscription.mu for a running delivery, its caller must
// not hold a lock a delivery takes (the session calls it outside its own mutex).
//
// A delivery runs under subscription.mu on a queue's goroutine, which is why the bus and the
// receiver must not block and must not call back into the hub: a receiver that blocked would
// hold every channel of its queue. The session's Push is delivery.Lanes.PushDataDeferred, O(1)
// work under the connection's own lock that never waits for the socket. A slow client's lane
// overflows into a resync marker instead of holding the queue.
//
// # Lifecycle
//
// New returns an empty hub on a bus; it starts no goroutine until a publication needs a queue.
// Close ends the fan-out (the node calls it at shutdown, after its sessions); a hub never
// published to holds no goroutine and may simply be dropped. A subscription ends with its
// unsubscribe function; the session calls it for each subscription when the connection goes.
package channel
