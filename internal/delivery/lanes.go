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
	// First and Count are for a frame that itself stands for a range of items (a resync the
	// producer sends): a non-empty First is the range's first position, and Count its length,
	// 0 when the producer does not know it. Lost, such a frame widens its key's marker by the
	// whole range, and a range of unknown length leaves the marker's count unknown. Both zero
	// for an ordinary frame: Pos, and one item.
	First string
	Count uint64
}

// span is the first position f stands for and how many items: 1 for an ordinary frame, a
// range's Count, 0 when that is unknown.
func (f *Frame) span() (string, uint64) {
	if f.First == "" {
		return f.Pos, 1
	}
	return f.First, f.Count
}

// Size is the frame's length on the wire, which is what the data lane's byte bound counts.
func (f *Frame) Size() int { return len(f.Head) + len(f.Body) }

// ErrClosed is returned by PushControl and Next once Close has been called.
var ErrClosed = errors.New("delivery: lanes closed")

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
	control  ring[[]byte]
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
	// stallSince is when the current stall began; zero when not stalled (see Stalled).
	stallSince time.Time

	stats counters // atomic, bumped outside mu where possible
}

// New returns the lanes for one connection.
func New(cfg Config) (*Lanes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Lanes{cfg: cfg.withDefaults(), wake: make(chan struct{}, 1)}, nil
}

// PushControl queues a control frame (a reply, an error, a pong) and takes ownership of b: the
// caller must not modify it afterwards. It returns ErrClosed after Close, and a
// *ControlFullError when the control lane has no room, on which the caller closes the
// connection as too slow. Safe for concurrent use.
func (l *Lanes) PushControl(b []byte) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.stats.discarded.Add(1)
		return ErrClosed
	}
	if l.control.len() >= l.cfg.MaxControlFrames || l.ctlBytes+len(b) > l.cfg.MaxControlBytes {
		err := &ControlFullError{
			Size: len(b), Frames: l.control.len(), Bytes: l.ctlBytes,
			MaxFrames: l.cfg.MaxControlFrames, MaxBytes: l.cfg.MaxControlBytes,
		}
		l.mu.Unlock()
		l.stats.controlRefused.Add(1)
		return err
	}
	l.control.push(b, l.cfg.MaxControlFrames)
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
	size := f.Size()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.stats.discarded.Add(1)
		return false
	}
	if m := l.markers.get(f.Key); m != nil {
		// Rule 2: the key's gap is still open, so this frame joins it. Admitting it would put
		// a frame from after the gap ahead of the marker that announces the gap.
		_, n := f.span()
		m.Last = f.Pos
		if m.Lost != 0 && n != 0 {
			m.Lost += n
		} else {
			m.Lost = 0 // one range of unknown length makes the whole gap's count unknown
		}
		reason := m.Reason // m belongs to the writer again once mu is released
		l.mu.Unlock()
		l.stats.lost(reason)
		return false
	}
	switch {
	case size > l.cfg.MaxDataBytes:
		return l.loseLocked(f, ReasonTooLarge)
	case l.data.len() >= l.cfg.MaxDataFrames || l.datBytes+size > l.cfg.MaxDataBytes:
		return l.loseLocked(f, ReasonLaneFull)
	}
	l.data.push(f, l.cfg.MaxDataFrames)
	l.datBytes += size
	l.admitted++
	wake := l.unparkLocked()
	l.mu.Unlock()
	l.stats.dataAdmitted.Add(1)
	l.signal(wake)
	return true
}

// loseLocked opens f.Key's marker with f as its first lost frame, and unlocks mu. It returns
// false so PushData can return its result.
func (l *Lanes) loseLocked(f Frame, reason DropReason) bool {
	first, n := f.span()
	m := l.markers.open(f.Key, reason, first, l.admitted)
	m.Last, m.Lost = f.Pos, n
	stalls := reason == ReasonLaneFull && l.stallSince.IsZero()
	if stalls {
		l.stallSince = l.cfg.Now()
	}
	// A frame too large for an empty lane leaves a marker that is ready at once, and a parked
	// writer would otherwise not look at it until some other frame arrived.
	wake := false
	if m.barrier <= l.taken {
		wake = l.unparkLocked()
	}
	l.mu.Unlock()
	l.stats.lost(reason)
	l.signal(wake)
	if stalls && l.cfg.OnStall != nil {
		l.cfg.OnStall()
	}
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
	l.mu.Unlock()
	l.stats.discarded.Add(uint64(discarded))
	l.stats.markersForgotten.Add(uint64(forgotten))
	// Always send: Next may be between finding nothing and parking, and must not miss this.
	l.signal(true)
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
// one is all a parked writer needs.
func (l *Lanes) signal(wake bool) {
	if !wake {
		return
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
