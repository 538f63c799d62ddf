// Package delivery owns one connection's outbound queue: a bounded control lane, a bounded data
// lane, and the overflow markers that stand in for data frames the data lane could not take.
//
// # Concurrency model
//
// Each connection has one Lanes. Producers (the session, on behalf of the router, the channel
// hub and its own replies, from many goroutines) call PushData (or PushDataDeferred and Wake),
// Gap, PushControl and Forget; PushControlAt and PushControlEnd are PushControl for a frame
// about a subscription (its subscribed, at a position; the unsubscribed that ends it), whose
// Item carries the key, the position and Ends for a transport that marks positions (SSE's
// event ids). A producer that must not lose what it sends, and may wait instead (a table
// snapshot's pages), calls TryPushData, which admits a frame only when it fits and otherwise
// hands back a channel closed when the writer next takes data frames. Exactly one writer
// goroutine, owned by the transport, calls
// TryNext and Next and writes what they return to the socket. Anyone may call Close, Stalled,
// Stats and ControlRoom.
//
// One mutex, Lanes.mu, guards both lanes, the marker table and the stall clock. Every push holds
// it for O(1) work: no I/O, no blocking, and no allocation once the lane and the marker table
// have grown. The writer holds it only while it copies a batch out of the lanes and encodes
// that batch's markers; it writes to the socket after releasing it. Producers wake a parked
// writer through a one-token channel, and only when the writer is parked, so a burst costs one
// wake, not one per frame. A fan-out to many connections may defer those wakes
// (PushDataDeferred) and make them all once it has pushed its last frame (Wake), so each writer
// wakes to everything the fan-out queued for it rather than to its first frame. The monotonic
// counters behind Stats are atomics, bumped outside the lock where possible; its gauges are
// read under mu. There is no other lock, so no lock order to keep.
//
// The writer batches: a non-blocking drain with TryNext, a flush when TryNext finds nothing,
// then a blocking wait in Next (see Next for the loop).
//
// Or the writer runs on demand (Config.Wake): it drains with TryNextOrPark and ends when that
// finds nothing, giving up its place under the same lock a push takes; the first push after
// that claims the place and calls Wake, which starts the next writer. So an idle connection
// holds no writer goroutine, a push is never missed, and there is never more than one writer.
// Claim takes the place for an owner that needs a writer with nothing pushed (a close).
//
// # Lifecycle
//
// New returns open lanes; they start no goroutine and allocate their rings on first use. Close
// ends them for good: it discards queued frames and outstanding markers, makes pushes fail
// fast (PushControl returns ErrClosed, PushData returns false) and wakes the writer, whose Next
// returns ErrClosed. Close is for a connection that is really gone; a connection that is merely
// detached and may be revived keeps its Lanes, markers included.
//
// # Overflow contract
//
// A data frame belongs to a subscription key (Frame.Key) and carries its stream position
// (Frame.Pos). The data lane holds at most Config.MaxDataFrames frames and Config.MaxDataBytes
// bytes.
//
//  1. Admission. PushData admits a frame for key K only if K has no outstanding marker, the
//     frame is no larger than MaxDataBytes, and the lane has a free slot and room for its
//     bytes. Otherwise the frame is lost: PushData returns false and the loss goes into K's
//     marker. A frame larger than MaxDataBytes is lost with ReasonTooLarge; one that does not
//     fit the lane as it stands, with ReasonLaneFull.
//
//  2. One marker per key. The first loss for K opens K's marker: First = Last = the frame's
//     Pos, Lost = 1, Reason = why it was lost. While that marker is unsent, every later frame
//     for K is lost into it too, whatever room the lane has: Last becomes its Pos and Lost
//     grows, while First and Reason stay. So K's view stays contiguous: the client sees K's
//     data up to the gap, exactly one marker naming the whole gap, then K's data after it, and
//     never a frame from inside a range it was told was lost.
//
//     Every gap takes this one path. A producer's gap (a transaction too large to hold, a
//     change whose effect on a view could not be told, a resume older than the history, a
//     rule that failed, a hop upstream that lost items) is marked with Gap, which opens or
//     widens K's marker exactly as a lost frame does, with the gap's own range, count and
//     reason. A gap whose count is unknown makes Lost 0, unknown, for the rest of the
//     marker's life: a count is given only when it is exact. Lost items are counted under
//     their marker's reason.
//
//  3. Order. A marker records as its barrier the number of data frames admitted when it
//     opened. It is ready once the writer has taken that many, i.e. every frame admitted
//     before the first loss, K's included, went out in an earlier batch. Only ready markers
//     are written; within a batch they come after control frames and before data frames.
//
//  4. Independence. Markers are per key. One key's marker never delays, suppresses or
//     replaces another key's, and never holds back another key's data.
//
//  5. Retention. Markers take no slot in either lane; they live in a per-connection table with
//     at most one entry per key, bounded by the subscriptions the server allows a connection.
//     A ready marker that does not fit the current batch's budget (Config.MaxBatchFrames and
//     MaxBatchBytes, shared with the control frames that go first) stays in the table, still
//     open and still extending, and is written in a later batch. A marker is never dropped
//     while the connection and its subscription live, and once the writer has drained the
//     data lane every marker is ready, so none can be stranded.
//
//  6. Encoding. A marker is encoded when it is written, by Config.EncodeMarker, so the range
//     it carries is the one current at that moment. Writing it closes it: K's next frame is
//     admitted normally, and a later loss opens a new marker.
//
//  7. Forgetting. Forget(K), on unsubscribe, drops K's outstanding marker: nobody is left to
//     resync. Close drops them all. Nothing else removes a marker unsent.
//
//  8. Stall. The connection is stalled from the first ReasonLaneFull loss until a batch leaves
//     the data lane empty; Stalled reports since when, by Config.Now, and the transport closes
//     the connection as too slow once that passes its limit. Config.OnStall is called as a
//     stall begins, so nothing need watch a connection that is not stalled. See Stalled for
//     the reasoning.
//
// The control lane holds at most Config.MaxControlFrames frames and MaxControlBytes bytes and
// has no markers: a control frame it cannot take is refused with *ControlFullError, because a
// client that does not read the replies to its own requests is too slow to keep. The reader of
// those requests asks ControlRoom before it takes the next one, and waits while there is none,
// so a client that sends many requests at once and reads the replies is slowed, not refused.
package delivery
