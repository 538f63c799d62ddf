// Package client is Herald's Go client: one WebSocket connection speaking protocol herald.v1
// (docs/PROTOCOL.md), with requests that wait for their replies and a reader of the data frames
// the server pushes.
//
// # Concurrency
//
// A Conn runs one reader goroutine. It reads every frame, hands each reply to the request
// waiting for it (matched by request id), and queues data frames (change, message, resync, a
// snapshot's rows and live, a presence subscription's roster, join and leave, unprompted
// error, expiring, an unsubscribed the server chose) for Next, in the order the server sent
// them. Every method of Conn is safe for concurrent use.
//
// The queue for Next is bounded (Options.Buffer). When it is full the reader stops reading, so
// the server's own queue for the connection fills, and the server replaces data with a resync
// marker and, if it persists, closes with 4000 too_slow. Replies travel behind the data on the
// same connection, so a request made while nobody calls Next can wait behind a full queue:
// call Next from its own goroutine while data flows.
//
// # Lifecycle
//
// Dial upgrades, sends connect, and returns once the welcome arrived. The connection lives
// until Close, until the server closes it, or until it drops. Then Next returns, once the
// queued frames are read, a *CloseError carrying the close code, its Reaction and the error
// frame that explained it, if one did; pending requests return the same error. Close sends
// close 1000 and returns once the reader has ended.
//
// # Reconnecting
//
// A Conn does not reconnect. It records, per subscription, the position of the last frame Next
// returned (Conn.Position), which is what a resume needs. A reconnecting caller, on a
// *CloseError whose Reaction is Reconnect (or Reauthenticate, with a fresh token), waits
// ReconnectDelay(attempt) (exponential backoff with full jitter), Dials again, and Subscribes
// to each subscription with From set to its Position, as docs/PROTOCOL.md "Reconnecting"
// describes. A snapshot subscription has no Position until its Live: one that drops before it
// subscribes again with Snapshot. A Single or Durable subscription resumes from its own queue:
// subscribe again without From. Presence is the connection's: after a reconnect, Track again,
// and a presence subscription starts over with a new Roster.
//
// # Types
//
// The frame types are Herald's internal wire package's; this package re-exports the ones a
// client meets under its own names (Change, Message, Resync, ...) so code outside the module
// can name them.
package client
