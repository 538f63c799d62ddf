// Package bus carries items from the producers (the router's change views, the channel hub's
// messages, gaps) to the subscriptions they reach. It is the seam between producing an item
// and the sessions that receive it: on one node the Memory bus hands each item straight to its
// receiver; across nodes a Redis bus will carry it to the node that holds the receiver, behind
// the same methods, with no change to producers or sessions.
//
// # Contract
//
// Every implementation keeps these, and bustest checks them:
//
//   - Order. Items delivered to one receiver's subscription arrive in the order Deliver was
//     called for them.
//   - Once. Each Deliver reaches its receiver once, or the receiver is told of a gap covering
//     it (an upstream_gap item): never silence, never a duplicate.
//   - No blocking. Deliver never waits on a receiver: receivers queue without blocking
//     (stream.Receiver), and a bus between nodes buffers, bounded, and reports what it could
//     not carry as a gap.
//   - Flush. Flush returns once everything delivered before it is with its receivers, or
//     durably on the bus: what the changefeed waits for before it confirms a transaction.
//
// # Concurrency
//
// Deliver, DeliverDeferred and Flush are safe for concurrent use. Producers serialise their own
// streams (the router routes one transaction at a time; the channel hub hands a channel's
// publications on from one fan-out queue, in offset order), which is what makes
// per-subscription order hold end to end. DeliverDeferred lets a producer that fans one item
// out to many receivers wake their writers once it is done (stream.Wakeups).
package bus
