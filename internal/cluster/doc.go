// Package cluster is a node's share of the cross-node fan-out when many nodes share a Redis:
// it files the interest of the node's subscriptions, routes the node's publications and
// presence events and, on the replicator, each committed transaction to the nodes whose
// interest they hit, and hands what other nodes send it to its hub, router and presence, in
// order. A publication or transaction lost on the way is reported as a gap. On the replicator
// it also records each transaction in the history of the tables it touched (Config.History,
// internal/history), so a table subscription resuming on any node is replayed what it missed.
// Deliver sends a durable subscription's delivery straight to the node holding the connection
// (durable.Relay), on the caller's goroutine, since the transport queues and never blocks; the
// receiver hands it to that node's Durable. It declares the Transport, Hub, Tables, Presence and
// Durable it uses.
//
// # Interest
//
// A subscription files one row in the interest store (interest.Store) under an owner and a
// token: ChannelInterest names them for a channel pattern; a table's owner is TableOwner, its
// token the router's. The node is the socket of all its rows: Watch files a row, the function
// it returns removes it, and the node renews its rows every Config.RowTTL/4, filing again
// what the store lost and telling the subscriptions that depended on it. Replicate sends each
// change to the nodes holding one of its tokens, but a truncate (which empties the table under
// every subscription, whatever value it pins), an overflow, and a change whose tokens the
// router could not name (its table's types unread, or a column its catalog read lacks) go to
// every node holding the table (Interest.Sockets).
//
// # Goroutines
//
// Node.Run owns three, and returns once they have ended:
//
//   - the router of publications and presence events: one, so a channel's publications leave
//     in the order their offsets were taken. Per batch it probes each owner once (one command:
//     its generation and which of the batch's tokens anyone watches), and reads the rows of a
//     watched token again only when the generation moved.
//   - the receiver: one, so what a node sent is handed on in the order it was sent.
//   - the renewer of rows: every RowTTL/4, and at once when the transport reports a loss.
//
// Replicate runs on its caller's goroutine, the changefeed's sink, with a rows cache of its
// own, and returns once the transport holds what it sent.
//
// # History
//
// Replicate appends a transaction to each of its tables' histories (one round trip for all)
// before it stamps any of them, so every transaction at or before a table's mark is in the
// table's history; a failed append fails Replicate. An entry's Prev is what the node knows of
// the table's transaction before it: the last it recorded, else where its stream started
// (Streaming, which the changefeed's OnStream calls), else the entry's own LSN less one. The
// node forgets what it knew when a stream resumes past the last transaction it recorded:
// another replicator may have recorded some meanwhile.
//
// # Bounds
//
// The queue of what waits to be routed and the queue of what was received are each bounded
// by Config.QueueItems and Config.QueueBytes (default 16384 items and 16 MiB); an empty queue
// takes any one item. Past a bound an item is dropped and counted (Stats.Dropped): a dropped
// publication is a hole in its channel's offsets, which the receiving nodes report; a dropped
// received payload is reported as a gap from its sender, after what the queue held, as the
// transport's own losses are (Node.Gap); a dropped presence event leaves other nodes' rosters stale until the member's
// next change. Each rows cache holds at most 4096 owners, and within an owner only watched
// tokens; a received transaction may claim at most 1<<22 events.
//
// # Payloads
//
// One payload per item and destination node: a kind byte ('m' publication, 't' transaction,
// 'p' presence event), then JSON. A transaction carries only the events the destination's
// interest hits, each with its index in the whole transaction, so positions are kept.
//
// # Fences
//
// A node's table snapshot emits a fence, a logical message outside any transaction
// (Config.FencePrefix) naming the node, to move its stream past the snapshot however quiet the
// database is. The replicator sends each fence, with no event, to the node it names, after
// everything it routed there before: that node's router then knows every transaction before
// the fence was offered to its hand-offs.
package cluster
