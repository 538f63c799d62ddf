// Package snapshot reads a table subscription's snapshot: the rows that match its filter, as
// one REPEATABLE READ transaction sees them, in pages, with the MVCC snapshot that
// internal/handoff joins to the change stream.
//
// # A read
//
// Reader.Read takes a slot (at most Config.MaxConcurrent reads at once; a read that waits
// Config.QueueWait for one fails with snapshot_busy), a connection of its pool, and runs:
//
//	BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY
//	SET LOCAL statement_timeout, idle_in_transaction_session_timeout (and transaction_timeout
//	    from Postgres 17) to what is left of Config.Timeout; SET LOCAL the settings the
//	    changefeed pins (TimeZone UTC, DateStyle ISO, IntervalStyle postgres, bytea_output hex,
//	    extra_float_digits 3); LOCK TABLE ... IN ACCESS SHARE MODE        -- one round trip
//	handoff.FirstStatement, and the sync-standby guard's count   -- takes the snapshot;
//	    First.Check; the guards (below); Sink.Snapshot
//	the table's columns, from the snapshot's catalog, checked against Request.Columns
//	DECLARE herald_snapshot NO SCROLL CURSOR FOR
//	    SELECT t."c1", ... FROM "schema"."table" AS t WHERE <Filter.SQL> ORDER BY t."k1", ...
//	FETCH FORWARD <PageRows> FROM herald_snapshot   -- until a FETCH comes back short
//	COMMIT
//
// Neither SET nor LOCK takes a snapshot, so FirstStatement is still the statement that fixes
// it, and reports it with the insert position read after it (handoff.Snapshot.Bound). The
// Sink hears of the snapshot before any row is read, so the hand-off judges the stream from
// then on.
//
// Why the table is locked first: ALTER TABLE takes ACCESS EXCLUSIVE, so from the lock to
// COMMIT no change to the table's columns can commit, and one that committed before the lock
// also committed before the snapshot, which sees it. The columns the snapshot's catalog shows
// are then the columns every row is read with, and the check against Request.Columns (each
// column present, in order, of the type the request converts it by or a domain over it) is
// exact: a dropped, renamed or retyped column fails the read with schema_changed. Without the
// lock, a change committed between the snapshot and the first read of the table would apply to
// the rows unseen by the catalog read, and one that rewrites the table would show the
// snapshot an empty table. The cost: a pending ALTER TABLE waits for the read, and every
// writer of the table then waits behind it; Config.Timeout bounds that.
//
// # Guards
//
// A snapshot the stream could not be joined to without a gap is refused, after First.Check and
// before Sink.Snapshot, with a reason the client retries on.
//
// table_not_ready. A transaction that began before its table joined the publication (ALTER
// PUBLICATION ... ADD TABLE) may have changed it in ways the stream never carries: the decoder
// judges each change by the publication as it stood for that transaction, and a change made
// before the join is not published. Request.Joined, when set, is a transaction id assigned
// once the table was seen in the publication, so every transaction running when it joined has
// a smaller one; a snapshot that saw one of those still running, in this database, is refused.
// For a table already in the publication when the stream started, whose join nobody saw, it
// is one past the ids of the transactions holding a write lock on it then. Once none is left,
// every transaction of this database with a smaller id ended before the snapshot, which sees
// it whole (the hand-off skips whatever the stream carried of it), and every transaction the
// snapshot does not see got its id after the join, and with it every change it made, all of
// which the stream carries. Another database's transactions write none of this one's rows and
// are not in its stream, so a long writer elsewhere on the server holds nothing back. The
// check costs nothing while the snapshot's Xmin has reached Joined; below it, one more
// statement asks pg_stat_activity and pg_prepared_xacts which database holds each older
// running transaction, and any it cannot place elsewhere (one that has just ended, unseen by
// the snapshot, included) refuses the read. Nor must the router first have routed the join's commit: the
// join committed before Joined was assigned, so before the snapshot and its Bound, and the
// hand-off goes live only once the stream has passed Bound.
//
// sync_standby_stalled. A commit that waits for a synchronous standby has written its record,
// and the stream hands it on, but no snapshot sees it until the standby answers. The router
// offers a new hand-off the transactions it routed during its look-back (handoff.lookback), so
// such a commit reaches the subscriber after the rows, unless the router routed it before the
// look-back began: unless it has waited longer than that. While synchronous_standby_names
// names a standby, the first statement also counts this database's transactions waiting for
// one (wait event SyncRep) that began more than Config.Lookback ago, and any fails the read;
// another database's commits are never in this database's stream. It errs
// towards refusing: a transaction's start stands for its wait's, which is later. It is read in
// the statement that takes the snapshot, so a commit that stops waiting between the two goes
// unseen only within that statement's execution. It sees what the role may: without
// pg_read_all_stats's privileges, pg_stat_activity shows only the role's own backends' waits
// (GuardAccess says so; herald serve logs it when its stream starts and herald doctor warns).
//
// # Values
//
// A row must be exactly the row the changefeed would deliver for the same tuple, or one row
// would reach a client as two different values, and the filter and row rule could judge them
// differently. pgoutput sends each value as its type's output function writes it, and the
// changefeed converts that text with internal/changefeed/pgvalue by the column's type OID. So
// the cursor selects the columns themselves, not casts to text (true::text is "true" where the
// output is "t"; char(n)::text loses its padding; inet::text adds /32), the results come in
// text format, and each value goes through pgvalue.AppendJSON with Request.Columns' OID, under
// the same session settings as the walsender. SQL NULL is JSON null. A row is a change.Row in
// Request.Columns' order. The values test compares a many-typed table's rows with what a real
// changefeed delivered for them.
//
// # Pages
//
// The cursor is one plan over the whole read (one scan, one sort if any), fetched PageRows at
// a time, so memory holds one page however large the table, and ending early (too_large, a
// failure) reads no further. Each row is converted, then passed to Request.Keep (the filter's
// Eval, the row rule, the projection; the filter's SQL only narrows the scan). A page holds
// at most Config.PageRows rows and ends at the row that brings it to Config.PageBytes; it is
// handed on when the next row to send arrives, so only the last page is marked last, and only
// an empty result gives an empty page. More than Config.MaxRows rows to send, or more than
// Config.MaxBytes of them (as JSON objects), fail the read with snapshot_too_large; rows
// Keep drops do not count. The last page is handed on after COMMIT, with the connection and
// the slot given back, so a client slow to take it holds nothing in the database.
//
// # Bounds and failures
//
// Config.Timeout bounds the read from taking a connection to COMMIT, the Sink's pages
// included: a context deadline on the client's side, and on the server's the timeouts above,
// so the server ends the transaction by itself (releasing its snapshot, which holds VACUUM
// back for the whole database, and its lock) even while Herald waits on a Sink. Before
// Postgres 17, which has no transaction_timeout, each statement and each wait between them is
// bounded, not their sum. A Sink's Page cannot be interrupted: one that outlasts the timeout
// fails the read when it returns.
//
// Read returns a *handoff.Error for each failure the hand-off names: snapshot_busy,
// snapshot_timeout, snapshot_too_large, snapshot_on_standby and snapshot_isolation (from
// First.Check), table_not_ready and sync_standby_stalled (the guards), snapshot_mismatch, schema_changed (the columns check, or a table or column
// gone: SQLSTATE 42P01, 42703, 3F000), policy_error (Keep's error); the Sink's own error as it
// returned it; the caller's context's error; and any other error wrapped with the table's
// name. Stats counts each read by Outcome, the same values as metric labels.
//
// # What the caller must provide
//
//   - A pool reaching the primary that holds the replication slot (a standby's snapshot is
//     refused), directly or through a pooler that keeps a transaction on one server
//     connection, with a role that can SELECT the table and is not subject to its row-level
//     security (rows the policy hides from the role would be missing here and present in the
//     stream). Its session settings do not matter: the read sets its own.
//   - A table with a key (Request.Key): a table without one is refused by the caller.
//   - Request.Columns as the changefeed streams the table (changefeed.DescribeTable gives
//     them). A column left out (a generated column, not published before Postgres 18, or one
//     outside the publication's column list) is not read; a column added since the request was
//     made is not an error here, but the stream's Relation message for it is the caller's to
//     act on. A publication's row filter is not applied here.
//   - The changefeed configured to hand on logical messages of FencePrefix
//     (changefeed.Config.MessagePrefixes). Reader.Fence emits one outside any transaction
//     (pg_logical_emit_message(false, 'herald.fence', id), flushed at once from Postgres 17)
//     and returns its LSN; written after the snapshot's Bound was read, it moves the stream
//     past the Bound however quiet the database is. Without the prefix the stream passes the
//     Bound only with the next change or keepalive.
//
// # Concurrency
//
// A Reader is safe for concurrent use and starts no goroutine: a read runs on its caller's
// goroutine, Sink calls included. The slots are a buffered channel. Reader.mu guards the
// counters Stats reads and nothing else; it is never held across I/O or a Sink call, and no
// other lock is taken under it.
//
// # Defaults
//
//	MaxConcurrent  4          reads at once on this Reader
//	QueueWait      5s         wait for a slot, then snapshot_busy
//	Timeout        60s        connection to COMMIT, then snapshot_timeout
//	MaxRows        100,000    rows to send, then snapshot_too_large
//	MaxBytes       64 MiB     their bytes as JSON, then snapshot_too_large
//	PageRows       500        rows a page, and a FETCH
//	PageBytes      256 KiB    bytes a page
//	Lookback       10s        a commit waiting for a synchronous standby longer: stalled
package snapshot
