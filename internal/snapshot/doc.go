// Package snapshot reads a table subscription's snapshot: the rows that match its filter, as
// one REPEATABLE READ transaction sees them, in pages, with the MVCC snapshot that
// internal/handoff joins to the change stream.
//
// Its API is Reader.Read (one snapshot into a Sink), Reader.Fence (the logical message that
// moves the stream past the snapshot's Bound) and Reader.Stats. The rest of this comment is
// filled in with the implementation.
package snapshot
