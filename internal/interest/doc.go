// Package interest owns the cross-node subscription index: which sockets, on which nodes, hold
// a subscription under which index token of an owner, so that an item is sent only to the nodes
// that want it. It declares the Store its fan-out needs; store/memory and store/redis implement
// it, and store/storetest is the conformance suite both pass. internal/cluster files and reads it
// when nodes share a Redis (the Redis store); a node alone needs none.
//
// # Model
//
// An owner is the unit of atomicity: a table, or a channel namespace. Every key of one owner
// shares a Redis Cluster hash tag, so each operation is one atomic script on one slot. Under an
// owner:
//
//   - the watched set: the tokens that have at least one row. The dispatch hot path asks it
//     "which of these tokens does anyone watch", in one command (Watched).
//   - per token, its rows: one per (socket, subscription), naming the identity, the node and
//     the opaque data the fan-out matches with.
//   - per socket, what it holds, so a disconnect reaps its rows (Reap) and removing another
//     socket's subscription answers not_found (Remove).
//   - per identity, how many rows it holds: the limit (Config.MaxPerIdentity) answers
//     fault.CodeTooManySubscriptions.
//   - a generation, bumped by every change to the rows, that outlives them: a cache of rows
//     tagged with a generation is current exactly while the generation has not moved.
//
// Invariants every Store keeps, and storetest checks: a row is readable before its token is
// watched; a token stops being watched only when its last row is gone; the generation never
// goes back, even after every row expired.
//
// # Liveness
//
// A socket is live until its deadline, Config.TTL after its last Add or Refresh; a live node
// refreshes its sockets well inside it (TTL/4 is the recommended period). The rows of a socket
// past its deadline are gone to readers at once (Rows never returns them) and are reaped by the
// owner's next write; a Watched answer may still name their token until then, which costs the
// caller a Rows lookup that finds nobody, never a missed delivery. Refresh reports how many
// rows it kept alive, so a node that was too late sees it lost rows and registers them again.
package interest
