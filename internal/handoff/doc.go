// Package handoff joins a table subscription's snapshot (its rows as one REPEATABLE READ
// transaction sees them) to its change stream, so the client gets the rows, then every change
// after them, with no gap and no duplicate.
//
// It is pure: no I/O, no goroutines. Reading the snapshot and its rows, and offering the
// stream, are its callers' work.
//
// # Why transaction ids, not a position
//
// A Postgres snapshot is not a point in the WAL. A transaction writes its commit record, then
// later becomes visible; two transactions on different rows can become visible in the other
// order than their records ("Long Fork"), and a transaction waiting on a synchronous standby
// can be streamed while no snapshot sees it. So no LSN cut separates "in the rows" from "not
// in the rows". The snapshot's own (xmin, xmax, running list) does, per transaction: a
// committed transaction's effects are in the rows exactly when Snapshot.Visible says so. Ids
// are compared as change.XID8, epoch included: a 32-bit xid from the stream is widened first
// (change.WidenXID); two raw 32-bit xids are never compared.
//
// The one positional fact is one-sided: every transaction the snapshot sees ended at or before
// the insert position read after it (Snapshot.Bound), because a commit record is inserted
// before its transaction becomes visible. So once the stream has passed Bound, every later
// transaction is one the snapshot does not see.
//
// # The protocol
//
//  1. The subscription registers with the stream, which offers it the table's recent history
//     (a look-back, oldest first: a transaction streamed just before the registration may
//     still have been invisible to the snapshot), then every later transaction, then positions.
//     Phase AwaitSnapshot: non-empty offers are held in the early buffer, unjudged.
//  2. The reader's first statement (FirstStatement, checked by First.Check) gives the
//     snapshot; SetSnapshot judges the early buffer and enters Filtering, before any row is
//     read. From then on each offer is judged as it comes: visible, skipped; not visible,
//     held in the pending buffer.
//  3. The reader reads and sends the rows, then calls RowsSent, and has a non-transactional
//     logical message emitted (a fence) so the stream passes Bound promptly however quiet the
//     database is.
//  4. Once the rows are sent and the stream has passed Bound (an offer or a position at or
//     past it), the pending transactions go to the Sink, in commit order, then Live with the
//     last commit LSN offered; phase Live. Later offers go straight to the Sink.
//
// Any failure (the closed set of Reasons, each an *Error) enters Failed: nothing more reaches
// the sink, Done is closed, and the client subscribes again.
//
// # Invariants
//
//   - A transaction reaches the Sink at most once, in the order offered, and only if the
//     snapshot does not see it: offers must come in stream order, and one that does not end
//     past everything offered before it fails the hand-off (replication_restarted).
//   - At Live(head) the rows plus the delivered transactions are the table's state after
//     every transaction committed at or before head, provided every transaction the snapshot
//     does not see and that ended at or before the registration was in the look-back, and
//     the stream carries every change such a transaction made to the table. The snapshot
//     reader refuses a snapshot for which either may fail (ReasonSyncStandbyStalled: a commit
//     waiting for a synchronous standby since before the look-back; ReasonTableNotReady: a
//     transaction older than the table's joining the publication still running). A
//     transaction the snapshot sees never ends past Bound; one that does fails the hand-off
//     (snapshot_mismatch): the snapshot came from another server than the stream.
//   - Memory is bounded: the early buffer by Config.EarlyBytes, the pending one by
//     Config.PendingBytes (handoff_buffer_full past either). Empty transactions (nothing the
//     subscription sees) are never held: before the snapshot is known only their position is
//     kept, after it they are judged as they come, for the mismatch check alone.
//   - A hand-off never holds back the stream: the router does not wait for it, and the
//     changefeed confirms positions as if it did not exist. Its state is volatile; if the
//     process dies, the client subscribes again.
//
// # Concurrency
//
// A Handoff is safe for concurrent use by its two sides: the offering side (the router's
// goroutine: Offer, OfferPosition, in stream order from one goroutine at a time) and the
// reading side (SetSnapshot, RowsSent); either may call Fail. One mutex guards every field
// that changes; the Sink is called under it, which is what keeps the pending transactions,
// Live and the later transactions in order when the two sides race to make it live. So the
// Sink must not block and must not call back into the Handoff. Lock order: the router's
// lock, then the Handoff's, then whatever the Sink takes (a session's, then its lanes').
package handoff
