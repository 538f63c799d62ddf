// Package durable owns durable subscriptions: a channel subscription that belongs to a holder
// (an identity's subject and its app) rather than a connection, keeps what its connections have
// not taken in a bounded queue, and hands each message to every bound connection (Broadcast)
// or to exactly one under a lease that an ack settles (Single).
//
// # The rules
//
// Queue is the rules, pure, and their one Go statement: a Store applies them atomically per
// subscription (store/memory keeps a Queue per subscription; store/redis runs the same steps
// in its scripts; storetest.RunDurable holds both to them). Every step (Bind, Unbind, Append,
// Ack, Expire) returns an Outcome: what to hand to which connection, and what it counted.
//
//   - The queue holds at most Limits.MaxItems publications and Limits.MaxBytes bytes. The
//     overflow rule is drop oldest: past either bound, the oldest publication no connection
//     holds under a lease is shed, and a queue_full marker with its exact position takes its
//     place, merged into the marker right before it (so a queue overflowing while nobody reads
//     holds one marker at its front, growing). A leased publication is never shed: its lease
//     will end, and the expiry offers it again. Markers count toward neither bound; adjacent
//     ones of a reason merge, so they never outnumber the publications more than twice.
//   - Appends are idempotent by position: one at or before the last position appended is
//     skipped, so a subscription fed again from an earlier position (a new owner resuming
//     from the channel's history) queues nothing twice.
//   - Broadcast: each entry goes to every bound connection and leaves the queue; with none
//     bound, it waits.
//   - Single: each waiting publication goes, in queue order, to the most recently bound
//     connection with fewer than Limits.MaxInFlight leases that has not had it in this round,
//     leased for Limits.Lease. A lease that ends without an ack (it expired, or its connection
//     was unbound) adds the connection to the round's tried and offers the publication again.
//     Once every bound connection has been tried, a new round begins with all of them, most
//     recent first: seed 000 skips the tried by name within a round, and a holder whose one
//     connection stays must still see its message again; Limits.MaxAttempts deliveries bound
//     the rounds, after which the publication is parked: a parked marker takes its place. A
//     publication whose untried connections are all full waits for one of them rather than
//     going to a tried one. No publication is ever leased to two connections at once: a new
//     lease is given only once the last has ended.
//   - An ack settles a publication for the connection that holds its lease, or that held it
//     last when nobody holds it now (a late ack is the work done). A position the connection
//     settled lately (SettledMemory) is AlreadyAcked; anything else NotFound: another's, a
//     broadcast's, a marker's, or unknown. So acks are idempotent, and another's is not_found.
//   - Markers go to every bound connection, in either mode, and settle nothing.
//   - A subscription with no connection bound for Limits.IdleTTL is forgotten (Expire), as is
//     one a holder forgets; a holder keeps at most Limits.MaxPerHolder.
//
// # The registry
//
// Registry is a node's share: it binds the node's connections (Bind, from the session through
// the server), feeds each subscription it holds from the channel hub, steps the subscriptions
// in the Store, and hands each step's deliveries to its own connections (stream.Receiver Push),
// or, through its Relay, to the node holding the connection (Receive there). A durable
// subscription is fed from the hub by the node that bound it first: it subscribes, as an
// ordinary receiver, to the subscription's channel after the last position the subscription
// took (the hub replays the history after it, or reports a gap), so what reached the hub while
// nobody fed it is queued or marked, never silently missed. Its Start is the channel's head
// when it was created: every publication after it is delivered, queued, settled or marked.
//
// # Many nodes
//
// Among nodes sharing a store (store/redis.Durable) a holder's connections may be bound on any
// of them, and every step is atomic in the store, so any node binds, acks and unbinds. One node
// at a time owns a subscription (Store.Claim, with Config.OwnerTTL, renewed every third of it):
// the owner feeds it, from the last position it took (Claim answers where), and expires its
// leases and its connections, every Tick. A node that binds a connection claims it at once; a
// node holding a connection claims it again at each renewal, and so takes it over once a dead
// owner's claim runs out. A node that finds another owning what it fed (it stalled past its
// claim) stops feeding it; for as long as both feed, appends being idempotent by position,
// nothing is queued twice. Each node renews the connections it holds (Store.Touch, every
// Limits.ConnTTL/3): those of a dead node outlive it by ConnTTL, and the owner's Expire unbinds
// them, their leases with them, so their messages go to the holder's other connections. A
// step's delivery to a connection on another node goes through the Relay (the cross-node
// transport), to that node's Receive; lost on the way, a single's lease expires and brings it
// again, and a broadcast's binding, told by Lost, reports the hole its next publication's
// offset shows (upstream_gap). A subscription whose every node died while it had no connection
// anywhere is not fed meanwhile: the next node to bind it feeds it from its last position, so
// the channel's history replays what it missed, or a gap marks it.
//
// Items from the hub arrive on the hub's fan-out goroutine, which must not block: they go into
// the subscription's inbox (bounded by Config.InboxItems; past it, one queue_full marker with
// their exact range), and Run, the registry's one goroutine, appends them to the store. Run
// also, every Config.Tick, renews this node's connections, claims, and, for the subscriptions
// this node owns, ends the leases past their deadline and forgets those idle past their TTL. A failed append is kept, bounded, and tried again at the next tick:
// appends are idempotent, so one that did land is not queued twice.
//
// # Locks
//
// Registry.mu guards the map of subscriptions; sub.mu orders one subscription's steps on this
// node and is held across each store step and the pushes it makes, so a connection gets what
// the steps hand it in the order they made it (with a Redis store, across a round trip: it
// holds up that subscription alone); sub.inMu guards its inbox; Registry.readyMu the list of
// subscriptions with inbox items. Order: sub.mu, then the hub's locks (a feed's subscribe and
// unsubscribe), then the session's mu and its lanes (a push); sub.mu, then Registry.mu (a
// subscription dropped); the hub's subscription lock, then sub.inMu, then Registry.readyMu (a
// feed's Push). Registry.mu is never held across anything else. A binding's End, which calls
// into the session, is called holding none of them.
//
// # Lifecycle
//
// New returns a registry that holds nothing; Run is its worker, owned by the server, and
// returns when its context ends, having ended the hub subscriptions that fed the
// subscriptions. The memory store's subscriptions die with the process; Redis's outlive it, and
// collect themselves by a TTL (idle TTL plus the connections') once no node steps them.
package durable
