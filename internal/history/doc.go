// Package history declares the table history nodes sharing a Redis keep, so that a table
// subscription resuming on any node is handed the changes it missed: per table, the
// transactions that changed it, by commit LSN, bounded by bytes and by age. It declares the
// Store, the Entry and its payload (Txn), and the rule that says whether a read covers a
// resume (Range.Covers); store/memory and store/redis implement the Store, store/storetest is
// the conformance suite both pass. One node alone keeps its history in the router instead
// (router.History).
//
// # Model
//
// The replicator appends one entry per table a transaction touched (cluster.Node.Replicate),
// before it stamps the table's mark, in commit order: every transaction of a table at or
// before the mark a subscriber reads is already in the table's history. An entry holds the
// transaction's commit LSN, its id (XID8) and the end of its commit record, by which a table
// snapshot's hand-off judges it when it looks back (internal/handoff), the table's changes in
// it (each with its index in the whole transaction, so positions are kept) or its overflow,
// and Prev: the commit LSN of the table's
// transaction before it, or an LSN after that one (never before). So a table's history holds
// every transaction of the table after its oldest entry's Prev, its floor, as long as every
// entry's Prev is the entry before it; a resume from at or after the floor is inside it.
//
// An append whose LSN is not above the table's last entry's is dropped: the transaction is
// there already (a new replicator streams again what the last one had not confirmed). The
// store raises an appended entry's Prev to its table's last entry, so a caller that knows
// nothing better may pass LSN-1, which is always true.
//
// # Bounds
//
// Each table's history is bounded alone: Config.MaxBytes of payload (each entry counting its
// payload and EntryOverhead), oldest out first, and Config.MaxAge, after which an entry is let
// go at a later append and a table whose last append is that old has no history at all. The
// newest entry is always kept, whatever its size. Letting an entry go moves the floor up to it,
// never leaves a hole. A read is bounded by the caller's Limit.
package history
