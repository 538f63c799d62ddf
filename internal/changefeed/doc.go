// Package changefeed streams committed Postgres changes, exactly, from a logical replication
// slot into a Sink.
//
// One Feed holds one pgoutput slot and one publication, and creates or checks both at start
// (the publication first). Exactly one Feed per slot streams: a Postgres advisory lock, taken on
// the replication connection itself, elects it, and the others wait as standbys and take over
// within one poll when the leader's session ends.
//
// # Data flow and positions
//
//	walsender --CopyData--> reader goroutine: decode, assemble transactions, send status
//	                          |  bounded queue of committed transactions
//	                          v
//	                        sink goroutine: Sink.Accept, then record the accepted end LSN
//
// The reader waits for the server as cheaply as it can, for the server's sake as much as its own
// (see socket and receiver): on Linux the replication connection is taken out of the runtime's
// network poller, whose epoll registration made every send of the walsender wake a thread of
// ours; it is read with raw non-blocking read(2) calls, waits in ppoll(2) only when it has read
// everything, and in the middle of a transaction a read that emptied the socket is followed by a
// wait of Config.ReadLinger before the next, so that a reader keeping pace with the server is not
// woken for every few changes.
//
// A transaction reaches the sink only once committed: it is buffered from Begin to Commit, and a
// streamed (protocol 2) transaction from its first Stream Start to its Stream Commit; a Stream
// Abort discards it, or one subtransaction's share of it. Every event of a transaction carries
// its commit LSN, which is its position in the stream.
//
// pgoutput names a transaction by its 32-bit top-level xid, which wraps around; each committed
// transaction also carries that xid widened to its XID8 (change.Txn.XID8, with the epoch), the
// form Postgres's snapshots use, so a consumer can tell whether a snapshot saw it. The stream
// widens each xid to the one nearest the last (change.WidenXID), starting from the server's
// next xid, read when it connects.
//
// The feed confirms to Postgres only the end LSN of transactions the sink has accepted, never a
// position merely received; when nothing is owed, it confirms the server's WAL end from a
// keepalive, so a quiet publication does not pin WAL. Status updates go out every
// StatusInterval, each asking for a reply, and at once when the server asks. A connection from
// which nothing arrives for SilenceTimeout is abandoned without a goodbye.
//
// Postgres may resend transactions it was told about (a confirmed position is only saved at
// checkpoints), so the feed drops any transaction whose commit LSN is at or before the last one
// handed on, across its own restarts, and before Config.From on the first start.
//
// # Lifecycle
//
// Run owns the reader and sink goroutines and returns only once they have ended. A stream that
// dies on its own is recorded in Stats (Failure, ConfirmFailures, LagBytes), announced once
// through Config.OnEnd, and restarted with jittered backoff, unless the error is permanent (a
// lost slot, a missing privilege, a wrong setting), which Run returns. Stopping through ctx
// confirms what was accepted and says goodbye.
//
// Values are decoded from text by type OID in package pgvalue; the session settings that shape
// that text are pinned in the startup packet (see ConnConfig).
package changefeed
