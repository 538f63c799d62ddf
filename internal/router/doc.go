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
// For each candidate the router evaluates the filter on the old image (where Postgres sent
// one) and on the new image, and sends what the subscriber's view needs:
//
//	was in view   is in view   frame
//	yes           yes          update
//	no            yes          enter   (the row moved into the view)
//	yes           no           leave   (the row moved out: old image, never the new values)
//	no            no           nothing
//	can't tell    yes          update  (an upsert: the client adds it if absent)
//	can't tell    no           leave   (remove if present), when an old image exists
//
// "Can't tell" is a filter column the old image lacks: REPLICA IDENTITY DEFAULT logs only the
// key on UPDATE and DELETE, and nothing at all for an UPDATE that kept the key. A row moving
// out of a filter on a non-key column is then invisible to its old subscribers; tables whose
// filters read non-key columns should be REPLICA IDENTITY FULL (changefeed.full_identity_tables
// makes preflight insist).
//
// A truncate reaches every subscriber of the table. A transaction too large for the changefeed
// to hold (change.Txn.Overflow) reaches every subscriber of each table it touched as a resync.
//
// # Concurrency and ordering
//
// Accept is the changefeed's sink: one goroutine routes one transaction at a time, in commit
// order, under the read side of mu; Subscribe takes the write side, so a subscription becomes
// live between two transactions, and the position it reports is the last transaction routed
// before it. Frames are handed to sessions, whose lanes never block, so Accept returns once
// every delivery of the transaction is queued: only then does the changefeed confirm it.
// Bodies are encoded once per (change, op, column list) and shared by every subscriber of that
// shape.
package router
