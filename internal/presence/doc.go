// Package presence is who is in a channel: members a connection tracks, each with a small
// meta document, held by a Store the package declares (internal/store/memory on one node; a
// shared store for many nodes later), and the join and leave events their coming and going
// makes for the channel's presence subscribers.
//
// # Semantics
//
//   - A member is a connection's presence in one channel: its id is the identity's subject, "/",
//     and the connection's id (the session makes it), so one person on two devices is two members, and a
//     connection that tracks a channel again replaces its own meta (a heartbeat that also
//     updates it) rather than joining twice.
//   - Meta is at most Config.MaxMetaBytes bytes, refused past it with meta_too_large; a channel
//     holds at most Config.MaxMembers members, and a new member past it is refused with
//     presence_full (both are *fault.Error, for the protocol to send). A member that is already there may always replace its meta.
//   - Every member has a deadline, Config.TTL after its last track or heartbeat. The node
//     heartbeats the members its live connections hold, every TTL/3, so a member outlives its
//     TTL only while its connection does; a member whose node stops beating expires and
//     leaves. A heartbeat that finds its member gone (it expired: the node stalled past the
//     TTL, or the store lost it) is answered ErrGone, "join again", and the node tracks it
//     again, which the channel sees as a join.
//   - A channel nobody is in is forgotten by the store, and by the node's own indexes.
//
// # Events
//
// A presence subscriber (Watch) is handed a roster (every member, ordered by id) first, then a
// join for each member that arrives (or replaces its meta) and a leave for each that goes
// (untracked, its connection closed, or expired). They are protocol-neutral stream items
// (stream.Presence) pushed to the subscriber's stream.Receiver; the connection's codec writes
// them. Roster, joins and leaves of one channel are pushed under one lock, in the order the
// store applied them, so a subscriber never sees a join before its roster or an event twice.
//
// # Timers and goroutines
//
// One sweeper, Run, owned by whoever calls it (the server, in its group): every TTL/3 it
// heartbeats this node's members and has the store expire every member past its deadline,
// announcing their leaves. There is no goroutine or timer per member or per channel.
//
// # Locks
//
// mu guards the watchers and the local members, and is held across the store call and the
// pushes of one change, which is what orders a channel's events. A push takes the receiving
// session's own lock: lock order mu, then the session's. Nothing calls into this package while
// holding a session's lock.
package presence
