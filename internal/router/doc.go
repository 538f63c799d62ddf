// Package router decides which table subscriptions each committed change reaches, and hands
// each one the frame its view needs.
//
// # Index
//
// Subscriptions are indexed by table, and within a table by the equality values of their
// filters (filter.IndexKeys: an eq or in on one column at the top of the filter). A change
// looks up its candidate keys, one per indexed column, in the new and the old image, and
// evaluates full filters only on those candidates and on the subscriptions no key can index.
// So the cost of a change grows with the subscriptions it can match, not with all the
// subscriptions of its table.
//
// # Views
//
// For each candidate the router evaluates the filter on the old image and on the new one, and
// sends what the subscriber's view needs:
//
//	was in view   is in view   frame
//	yes           yes          update
//	no            yes          enter   (the row moved into the view)
//	yes           no           leave   (the row moved out: old image, never the new values)
//	no            no           nothing
//	can't tell    yes          update  (an upsert: the client adds it if absent)
//	can't tell    no           leave   (with the old key: remove it if present)
//	any           can't tell   resync  (incomplete_image, covering that one change)
//
// The old image is the one Postgres sent, or, for an UPDATE that kept the key under a replica
// identity other than FULL (Postgres then sends none), the key read from the new row
// (change.Event.Key). "Can't tell" is a filter column an image lacks. Subscribe therefore
// refuses a filter that reads a column the table's replica identity does not log: under
// DEFAULT the old image holds the key at most, so the subscribers that had a row an update
// moved out of a filter on another column could only be found by telling every subscriber of
// that column, on every update, to remove the row if present. A filter on the key is exact:
// Postgres logs the old key whenever it changes. The rows above that still say "can't tell"
// arise only when a table's identity changed after its subscriptions were made (then every
// subscriber of a column the old image lacks is a candidate: exact, and costly until the
// identity is restored), or when a filter column in the new image is an unchanged value
// stored out of line that no full old image fills.
//
// Every change frame carries the table's key columns, whatever the column list says: clients
// apply changes by key, and an update whose old key differs from its new one (its frame's old
// image) replaces the row with the old key.
//
// A truncate reaches every subscriber of the table. A transaction too large for the changefeed
// to hold (change.Txn.Overflow) reaches every subscriber of each table it touched as a gap.
//
// # Policy
//
// With a Gate, a subscription is checked against the columns its identity may see (its filter
// and column list are refused on a hidden column as on a missing one, and its rows projected
// onto them) and its table's subscribe rule. Each change then passes the table's row rule
// besides the filter: a row is in view when both say so, so a change of visibility is an
// enter or a leave exactly as a filter's. The rule's answer depends on the identity only
// through the claim values it reads (policy.RowRule.GroupKey), which join the filter in
// naming a group: one evaluation and one encoded body per group, however many subscribers
// share it. A rule whose top level compares a column with a claim also indexes the groups
// (policy.Groups for the unindexed-filter groups, the claim key for the others): a change
// evaluates only the groups whose claim equals the row's value before or after it. A denial
// is counted by table (rows_denied); an error is a policy_error gap, naming the rule, for that
// group alone, never a guess.
//
// # Resuming
//
// A subscription that comes back with a from is handed what it missed, routed through its own
// filter, column list and policy as the live changes were: on one node from the router's own
// History, under mu as it attaches (Subscription.Replayed); among many nodes from the history
// they share (internal/history), which the caller reads outside the lock and hands to
// Subscription.Replay, which takes mu for the routing alone and delivers to the receiver it is
// given. Subscription.Routed says whether the head a subscription starts after is a
// transaction this router routed or a position it was told of (Seed, GapAll), before which it
// never saw some transactions and never will.
//
// # Snapshots
//
// A subscription asked with Request.Snapshot begins with its table's rows, read by its caller,
// and the router joins them to its stream through a hand-off (internal/handoff). Under mu, the
// entry joins its table with a collect as its target, its hand-off starts after the head, and
// is offered the History's transactions of the last HandoffConfig.Lookback, oldest first, each
// routed through the entry alone: a transaction routed just before the subscription may still
// have been invisible to the snapshot read after it. Then Accept offers every hand-off in
// progress every transaction it routes, with what the entry's collect gathered from it (perhaps
// nothing: its position counts), and a logical message sent outside any transaction (the
// reader's fence) as a position. The hand-off skips what the snapshot saw, holds the rest until
// the rows are sent and the stream has passed the snapshot's bound, and then delivers it, and a
// Live item, to the subscriber through the bus (handoffSink). Once it is done, Accept settles
// it: a live entry is filed again with its subscriber as its target and routed as any other; a
// failed one routes into its collect, which drops everything, until its subscriber lets it go.
// A loss the stream reports (GapAll) and a restart of the stream (Seed, past the first) fail
// every hand-off in progress (replication_restarted); a live one is told as any subscription.
// Snapshot.Keep decides the rows as a change's new image is decided, with the claims the
// subscriber had when it subscribed. A table that joined the publication since the stream
// started carries TableInfo.Joined into Snapshot.Joined, and the reader refuses a snapshot
// taken before every transaction running at the join had ended (table_not_ready;
// internal/snapshot, "Guards"). The router does not also wait until it has routed the join's
// commit: that commit precedes the snapshot's Bound, which the hand-off waits for anyway, and
// every transaction the snapshot does not see began writing after the join, so the stream
// carries all of it.
//
// # Output
//
// The router knows no protocol. It hands each subscriber a stream.Item, a change view or a
// gap, through its Bus; one item serves every subscriber of the same op, column list and old
// image, and each connection's codec encodes it once per protocol.
//
// # Concurrency and ordering
//
// Accept is the changefeed's sink: one goroutine routes one transaction at a time, in commit
// order, under mu (exclusively: routing writes the scratch space and the generation counters
// it shares with nothing else); Subscribe takes mu too, so a subscription becomes live between
// two transactions, and the position it reports is the last transaction routed before it.
// Lock order: mu, then a hand-off's lock, then whatever the bus and the receivers take (a
// session's mu, then its lanes' lock). A hand-off also delivers from its reader's goroutine
// (when the rows are sent) without mu: its own lock, then the receivers'. Items go to the bus, which never blocks on a receiver, and Accept returns once
// the bus has flushed the transaction: only then does the changefeed confirm it.
package router
