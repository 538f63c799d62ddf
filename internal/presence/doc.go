// Package presence is who is in a channel: members a connection tracks, each with a small
// meta document, held by a Store the package declares (internal/store/memory on one node,
// internal/store/redis shared by many), the join and leave events their coming and going makes
// for the channel's presence subscribers on every node, and the sweep leader that expires them.
//
// # Semantics
//
//   - A member is a connection's presence in one channel: its id is the identity's subject, "/",
//     and the connection's id (the session makes it), so one person on two devices is two members, and a
//     connection that tracks a channel again replaces its own meta (a heartbeat that also
//     updates it) rather than joining twice.
//   - Meta is at most Config.MaxMetaBytes bytes, refused past it with frame_too_large (field
//     meta); a channel
//     holds at most Config.MaxMembers members, and a new member past it is refused with
//     presence_full (both are *fault.Error, for the protocol to send). A member that is already there may always replace its meta.
//   - A store that fails is unavailable, a *fault.Error whose Err is the cause: the package logs
//     none of them, its caller does (the server logs each cause once per interval).
//   - Every member has a deadline, Config.TTL after its last track or heartbeat. The node
//     heartbeats the members its live connections hold, every TTL/3, so a member outlives its
//     TTL only while its connection does; a member whose node stops beating expires and
//     leaves. A heartbeat that finds its member gone (it expired: the node stalled past the
//     TTL, or the store lost it) is answered ErrGone, "join again", and the node tracks it
//     again, which the channel sees as a join (or, when the channel filled meanwhile, as the
//     leave it then is).
//   - A channel nobody is in is forgotten by the store, and by the node's own indexes.
//
// # Events
//
// A presence subscriber (Watch) is handed a roster (every member, ordered by id) first, then a
// join for each member that arrives (or replaces its meta) and a leave for each that goes
// (untracked, its connection closed, or expired). They are protocol-neutral stream items
// (stream.Presence) pushed to the subscriber's stream.Receiver; the connection's codec writes
// them. The joins and leaves this node makes in a channel are pushed, and handed to
// Config.Relay, under the channel's order lock, in the order the store applied them, so a
// subscriber never sees one of them before its roster, twice, or out of order.
//
// # Many nodes
//
// Nodes share one Store. Each node's events reach the others through Relay, which the server
// implements with its cross-node transport; a receiving node's server hands each to Apply,
// which pushes it to that node's subscribers of the channel and relays nothing. A subscriber
// registers before its roster is read, and holds what Apply brings until the roster is pushed,
// so an event made just after the read is not lost; one already in the roster may come again
// after it, which a subscriber keeping members by id absorbs. Events about one member made on
// two nodes (the sweep leader's leave of a member whose node stalled, then that node's join
// again) are ordered only by the transport.
//
// Only a channel's sweep leader expires its members and announces their leaves. Every node
// that holds members or subscribers in a channel claims its sweep (Store.Sweep) each pass; a
// claim lives a TTL, and the smallest node id among the live claims leads (ids default to
// UUIDv7, so the longest-lived node leads). The leader's claim removes the members past their
// deadline and writes the live ones that remain, at most RosterLimit with their subjects, on
// the lease; followers record that roster. A node whose claim finds that another node wrote
// the lease took the sweep over: it announces the leaves of the members that roster names and
// the store no longer holds (their leaves were lost with the node that made them), and the
// dead node's members still stored expire at their deadline and leave through its sweep. A
// node that stops releases its claims (Run does as it ends), its roster written afresh, and so
// hands over at once. A channel no live node claims is swept by whichever node's Store.Expire meets
// it first, so nobody sweeping is impossible. The cost of a takeover is at most a duplicate
// leave for a member that left, announced, between the last roster write and the takeover.
//
// # Timers and goroutines
//
// One sweeper, Run, owned by whoever calls it (the server, in its group): every TTL/3 it
// heartbeats this node's members and claims, per channel, the sweep of every channel it holds
// members or subscribers in, releasing the claims of channels it no longer does; then it has
// the store expire the channels nobody claims. There is no goroutine or timer per member or per
// channel.
//
// # Locks
//
// Each channel this node knows has an order lock, held across a store call on the channel and
// the pushes and relays of what it changed: it is what orders a channel's events, and the one
// lock held across I/O. mu guards the channels' states (watchers, local members, the sweep's
// record) and is never held across I/O or a Relay call. Lock order: a channel's order lock,
// then mu, then the receiving session's own lock (a push); a channel's order lock, then the
// Relay's own. Apply takes mu alone, so the server's transport reader never waits on a store
// call. Nothing calls into this package while holding a session's lock, and a Relay must not
// block or call Track, Untrack, Watch or Sweep.
package presence
