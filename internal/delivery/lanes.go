package delivery

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Frame is one data frame for one subscription. The bytes on the wire are Head followed by Body.
type Frame struct {
	// Head is the small per-subscription prefix, e.g. `{"type":"change","sub":"s1",`.
	Head []byte
	// Body is encoded once by the producer and shared by every subscriber it reaches. Lanes
	// never modifies it, and neither may anyone else once it is pushed.
	Body []byte
	// Key is the subscription key the frame belongs to. Markers are kept per Key.
	Key string
	// Pos is the frame's opaque stream position (an LSN like "16/B374D848", or
	// "epoch:offset"). A Marker names its lost range with these.
	Pos string
	// First, when set, says the frame stands for a range of items, First to Pos, Lost of them
	// (0: unknown): a resync a producer queues in line with its data (a durable
	// subscription's queue, which lost them before this connection's lanes). Lost itself, the
	// frame puts that range into its key's marker, so the client is still told.
	First string
	Lost  uint64
}

// lostRange is what losing f puts into its key's marker: its own position, one item; or, for a
// frame standing for a range, that range.
func (f *Frame) lostRange() (first string, count uint64) {
	if f.First != "" {
		return f.First, f.Lost
	}
	return f.Pos, 1
}

// Size is the frame's length on the wire, which is what the data lane's byte bound counts.
func (f *Frame) Size() int { return len(f.Head) + len(f.Body) }

// ErrClosed is returned by PushControl and Next once Close has been called.
var ErrClosed = errors.New("delivery: lanes closed")

// ErrDataTooLarge is TryPushData's refusal of a frame larger than the whole data lane
// (Config.MaxDataBytes): it can never be admitted.
var ErrDataTooLarge = errors.New("delivery: frame larger than the data lane")

// ErrControlFull is what a *ControlFullError unwraps to, for errors.Is.
var ErrControlFull = errors.New("delivery: control lane full")

// ControlFullError is PushControl's refusal: the control lane had no room for the frame. The
// client is not reading its own replies, so the caller closes the connection as too slow.
type ControlFullError struct {
	Size      int // bytes of the refused frame
	Frames    int // frames queued when it was refused
	Bytes     int // bytes queued when it was refused
	MaxFrames int // Config.MaxControlFrames
	MaxBytes  int // Config.MaxControlBytes
}

func (e *ControlFullError) Error() string {
	return fmt.Sprintf("delivery: control lane full: %d-byte frame refused with %d/%d frames and %d/%d bytes queued",
		e.Size, e.Frames, e.MaxFrames, e.Bytes, e.MaxBytes)
}

func (e *ControlFullError) Unwrap() error { return ErrControlFull }

// Lanes is one connection's outbound queue: a control lane, a data lane, and the table of
// overflow markers that stand in for the data frames the data lane could not take. See the
// package documentation for who may call what and for the marker contract.
type Lanes struct {
	cfg Config // read-only after New

	// wake carries one token from a producer (or Close) to a parked writer. Buffered so the
	// sender never blocks; a stale token only costs the writer one extra look.
	wake chan struct{}

	mu sync.Mutex
	// The fields below are guarded by mu.
	closed   bool
	parked   bool // the writer found nothing and is waiting on wake
	control  ring[control]
	ctlBytes int
	data     ring[Frame]
	datBytes int
	// admitted counts data frames ever admitted and taken counts those ever handed to the
	// writer; the frame admitted n-th has sequence number n. A marker is ready once
	// taken >= its barrier.
	admitted uint64
	taken    uint64
	markers  markerTable
	// roomWait is closed, and cleared, when the writer next takes control frames or at Close:
	// what ControlRoom hands a caller to wait on. Nil while nobody waits.
	roomWait chan struct{}
	// dataWait is roomWait for the data lane: closed, and cleared, when the writer next takes
	// data frames or at Close; what TryPushData hands a caller to wait on.
	dataWait chan struct{}
	// stallSince is when the current stall began; zero when not stalled (see Stalled).
	stallSince time.Time

	stats counters // atomic, bumped outside mu where possible
	total *stripe  // the stripe of Config.Totals these lanes add to; nil without one
}

// New returns the lanes for one connection.
func New(cfg Config) (*Lanes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Lanes{cfg: cfg.withDefaults(), wake: make(chan struct{}, 1), total: cfg.Totals.lanes()}, nil
}

// control is one queued control frame, and the subscription and position it is about, if any.
type control struct {
	b        []byte
	key, pos string
	end      bool
}

// PushControl queues a control frame (a reply, an error, a pong) and takes ownership of b: the
// caller must not modify it afterwards. It returns ErrClosed after Close, and a
// *ControlFullError when the control lane has no room, on which the caller closes the
// connection as too slow. Safe for concurrent use.
func (l *Lanes) PushControl(b []byte) error { return l.PushControlAt(b, "", "") }

// PushControlAt is PushControl for a frame about subscription key at position pos (a
// subscribed reply), which the writer's Item carries as its Key and Pos: a transport that marks
// positions, as SSE's event ids do, reads them there rather than parse the frame back.
func (l *Lanes) PushControlAt(b []byte, key, pos string) error {
	return l.pushControl(control{b: b, key: key, pos: pos})
}

// PushControlEnd is PushControl for the frame that ends subscription key (an unsubscribed
// reply, or an unprompted one): the writer's Item carries Key and Ends, for a transport that
// keeps each live subscription's position (SSE's event ids) and lets go of key's there.
func (l *Lanes) PushControlEnd(b []byte, key string) error {
	return l.pushControl(control{b: b, key: key, end: true})
}

func (l *Lanes) pushControl(c control) error {
	b := c.b
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.stats.discarded.Add(1)
		l.total.add(tDiscarded, 1)
		return ErrClosed
	}
	if l.control.len() >= l.cfg.MaxControlFrames || l.ctlBytes+len(b) > l.cfg.MaxControlBytes {
		err := &ControlFullError{
			Size: len(b), Frames: l.control.len(), Bytes: l.ctlBytes,
			MaxFrames: l.cfg.MaxControlFrames, MaxBytes: l.cfg.MaxControlBytes,
		}
		l.mu.Unlock()
		l.stats.controlRefused.Add(1)
		l.total.add(tControlRefused, 1)
		return err
	}
	l.control.push(c, l.cfg.MaxControlFrames)
	l.ctlBytes += len(b)
	wake := l.unparkLocked()
	l.mu.Unlock()
	l.stats.controlAdmitted.Add(1)
	l.signal(wake)
	return nil
}

// ControlRoom reports whether the control lane has room for frames more frames and bytes more
// bytes. When it has not, it also returns a channel that is closed once the writer next takes
// control frames off the lane (or at Close), to wait on before asking again: a reader can hold
// back a client's next request until the replies to the earlier ones have gone out. After
// Close it reports room, since nothing will be queued any more. Safe for concurrent use.
func (l *Lanes) ControlRoom(frames, bytes int) (ok bool, wait <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.control.len()+frames <= l.cfg.MaxControlFrames && l.ctlBytes+bytes <= l.cfg.MaxControlBytes {
		return true, nil
	}
	if l.roomWait == nil {
		l.roomWait = make(chan struct{})
	}
	return false, l.roomWait
}

// PushData queues f on the data lane and reports whether it did. When it does not, the frame
// is lost into f.Key's marker (rules 1 and 2 of the package contract); after Close it is
// discarded. It never blocks beyond the lock, does no I/O and, once the lane has grown, does
// not allocate. Safe for concurrent use.
func (l *Lanes) PushData(f Frame) bool {
	ok, wake := l.PushDataDeferred(f)
	l.signal(wake)
	return ok
}

// PushDataDeferred is PushData for a fan-out that wakes the writers it fed once it has fed them
// all: rather than wake a parked writer itself, it reports wake, and the caller must then call
// Wake, once, after its last push of the fan-out. Meanwhile the writer stays parked, so what
// the fan-out queues for this connection goes out in one batch, and the writers it wakes do
// not compete for the processors with the fan-out still feeding them. Only the push that
// finds the writer parked reports wake: until Wake, later pushes, from any producer, find it
// claimed, so a caller that never calls Wake leaves the writer asleep until the next push
// after the one it claimed is taken. Safe for concurrent use.
func (l *Lanes) PushDataDeferred(f Frame) (ok, wake bool) {
	size := f.Size()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.stats.discarded.Add(1)
		l.total.add(tDiscarded, 1)
		return false, false
	}
	if m := l.markers.get(f.Key); m != nil {
		// Rule 2: the key's gap is still open, so this frame joins it. Admitting it would put
		// a frame from after the gap ahead of the marker that announces the gap.
		_, count := f.lostRange()
		return l.widenLocked(m, f.Pos, count), false
	}
	switch {
	case size > l.cfg.MaxDataBytes:
		return l.loseLocked(f, ReasonTooLarge), false
	case l.data.len() >= l.cfg.MaxDataFrames || l.datBytes+size > l.cfg.MaxDataBytes:
		return l.loseLocked(f, ReasonLaneFull), false
	}
	l.data.push(f, l.cfg.MaxDataFrames)
	l.datBytes += size
	l.admitted++
	wake = l.unparkLocked()
	l.mu.Unlock()
	l.stats.dataAdmitted.Add(1)
	return true, wake
}

// TryPushData queues f on the data lane if it fits now, and returns nil, nil when it did. It
// is PushData for a producer that may wait rather than lose what it sends (a snapshot's pages,
// which have no position a marker could name): when f does not fit, it queues nothing, opens
// no marker and returns a channel that is closed once the writer next takes data frames off
// the lane (or at Close), to wait on before trying again. A frame larger than MaxDataBytes
// never fits: ErrDataTooLarge. After Close: ErrClosed. A frame for a key whose gap is still
// open joins it (rule 2), as with PushData, and counts as queued. Safe for concurrent use.
func (l *Lanes) TryPushData(f Frame) (wait <-chan struct{}, err error) {
	size := f.Size()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if m := l.markers.get(f.Key); m != nil {
		l.widenLocked(m, f.Pos, 1)
		return nil, nil
	}
	if size > l.cfg.MaxDataBytes {
		l.mu.Unlock()
		return nil, ErrDataTooLarge
	}
	if l.data.len() >= l.cfg.MaxDataFrames || l.datBytes+size > l.cfg.MaxDataBytes {
		if l.dataWait == nil {
			l.dataWait = make(chan struct{})
		}
		w := l.dataWait
		l.mu.Unlock()
		return w, nil
	}
	l.data.push(f, l.cfg.MaxDataFrames)
	l.datBytes += size
	l.admitted++
	wake := l.unparkLocked()
	l.mu.Unlock()
	l.stats.dataAdmitted.Add(1)
	l.signal(wake)
	return nil, nil
}

// Wake wakes the writer that a PushDataDeferred reported. Safe for concurrent use; a wake the
// writer does not need costs it one look at the lanes.
func (l *Lanes) Wake() { l.signal(true) }

// loseLocked puts f into f.Key's gap, opening it, and unlocks mu. It returns false so
// PushData can return its result.
func (l *Lanes) loseLocked(f Frame, reason DropReason) bool {
	first, count := f.lostRange()
	return l.openLocked(f.Key, first, f.Pos, count, reason)
}

// Gap marks a gap in key's stream: the items from first to last, count of them (0 when the
// count is not known exactly), may not reach the client, for reason. It is the one way every
// gap reaches a connection, whatever its source: a producer's (a transaction too large to
// hold, a change whose effect on a view could not be told, a resume older than the history, a
// rule that failed, a hop upstream that lost items) as much as the lanes' own (a frame that
// did not fit, rule 1). The gap goes into key's marker under the package's rules: it opens
// one, with first, after every frame of key admitted before it (rule 3), or widens the one
// already open (rule 2); and while it is unsent, later frames of key join it. A first of ""
// says the gap's start is unknown. After Close it does nothing. Safe for concurrent use.
func (l *Lanes) Gap(key, first, last string, count uint64, reason DropReason) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.stats.gaps.Add(1)
	l.total.add(tGaps, 1)
	if m := l.markers.get(key); m != nil {
		l.widenLocked(m, last, count)
		return
	}
	l.openLocked(key, first, last, count, reason)
}

// openLocked opens key's marker for a gap of count items (0: unknown) from first to last,
// and unlocks mu. It returns false, for PushData.
func (l *Lanes) openLocked(key, first, last string, count uint64, reason DropReason) bool {
	m := l.markers.open(key, reason, first, l.admitted)
	m.Last, m.Lost = last, count
	stalls := reason == ReasonLaneFull && l.stallSince.IsZero()
	if stalls {
		l.stallSince = l.cfg.Now()
	}
	// A gap in an empty lane leaves a marker that is ready at once, and a parked writer would
	// otherwise not look at it until some other frame arrived.
	wake := false
	if m.barrier <= l.taken {
		wake = l.unparkLocked()
	}
	l.mu.Unlock()
	l.lost(reason, count)
	l.signal(wake)
	if stalls && l.cfg.OnStall != nil {
		l.cfg.OnStall()
	}
	return false
}

// widenLocked extends m, which is open, to last by count items (0: unknown), and unlocks mu.
// One range of unknown length makes the whole gap's count unknown: a count is given only when
// it is exact. It returns false, for PushData.
func (l *Lanes) widenLocked(m *marker, last string, count uint64) bool {
	m.Last = last
	if m.Lost != 0 && count != 0 {
		m.Lost += count
	} else {
		m.Lost = 0
	}
	reason := m.Reason // m belongs to the writer again once mu is released
	l.mu.Unlock()
	l.lost(reason, max(count, 1))
	return false
}

// Forget drops key's outstanding marker, if any: the subscription is gone, so nobody is left to
// resync. Its lost frames stay counted as lost. Data frames already queued for key are still
// written; the session ignores frames for a subscription it no longer has. Safe for
// concurrent use.
func (l *Lanes) Forget(key string) {
	l.mu.Lock()
	m := l.markers.get(key)
	if m == nil {
		l.mu.Unlock()
		return
	}
	l.markers.remove(m)
	l.mu.Unlock()
	l.stats.markersForgotten.Add(1)
	l.total.add(tMarkersForgotten, 1)
}

// Close marks the connection gone: it discards every queued frame and outstanding marker,
// makes later pushes fail fast, and wakes a writer blocked in Next, which returns ErrClosed.
// It is idempotent and safe for concurrent use.
func (l *Lanes) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	discarded := l.control.len() + l.data.len()
	forgotten := l.markers.len()
	l.control.release()
	l.data.release()
	l.markers.release()
	l.ctlBytes, l.datBytes = 0, 0
	l.taken = l.admitted // nothing is owed any more
	l.stallSince = time.Time{}
	l.parked = false
	if l.roomWait != nil {
		close(l.roomWait)
		l.roomWait = nil
	}
	if l.dataWait != nil {
		close(l.dataWait)
		l.dataWait = nil
	}
	l.mu.Unlock()
	l.stats.discarded.Add(uint64(discarded))
	l.stats.markersForgotten.Add(uint64(forgotten))
	l.total.add(tDiscarded, uint64(discarded))
	l.total.add(tMarkersForgotten, uint64(forgotten))
	// Always send: Next may be between finding nothing and parking, and must not miss this.
	// A writer on demand is not started for lanes that are closed.
	if l.cfg.Wake == nil {
		l.signal(true)
	}
}

// Stalled reports whether the connection is stalled and since when, by Config.Now.
//
// The rule: a stall begins at the first ReasonLaneFull loss while not stalled, and ends when a
// Next leaves the data lane empty (or at Close). So since is the moment the data lane first
// overflowed after it was last emptied by the writer: from then on the client has never caught
// up. A burst the client absorbs clears within one drain; a client that reads slower than its
// subscriptions produce stays stalled, and the transport closes it with the "too slow" code
// once time.Since(since) passes its limit. A ReasonTooLarge loss is not a stall: it says
// nothing about the client's speed. Config.OnStall is called as each stall begins, so the
// limit can be enforced by a timer armed then, which looks here when it fires. Safe for
// concurrent use.
func (l *Lanes) Stalled() (since time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stallSince, !l.stallSince.IsZero()
}

// Claim takes the writer's place for the caller when no writer is present (it ended in
// TryNextOrPark) and the lanes are open, and reports whether it did: the caller then runs the
// writer, or starts it. It is for lanes with Config.Wake, whose owner must start a writer for a
// reason of its own, not a push (to write the frames that explain a close, say). At most one
// of a Claim and the pushes that race it gets the place. Safe for concurrent use.
func (l *Lanes) Claim() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || !l.parked {
		return false
	}
	l.parked = false
	return true
}

// unparkLocked claims the parked writer, if any, for the caller to wake after unlocking. Only
// one producer claims it, so a burst of pushes costs one channel send, not one per frame.
func (l *Lanes) unparkLocked() bool {
	if !l.parked {
		return false
	}
	l.parked = false
	return true
}

// signal wakes the writer when wake is set. It never blocks: wake holds at most one token, and
// one is all a parked writer needs. With Config.Wake it starts a writer instead.
func (l *Lanes) signal(wake bool) {
	if !wake {
		return
	}
	if l.cfg.Wake != nil {
		l.cfg.Wake()
		return
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
