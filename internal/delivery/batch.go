package delivery

import (
	"context"
	"time"
)

// Kind is what an Item carries.
type Kind uint8

// The kinds of Item, in the order a batch holds them.
const (
	KindControl Kind = iota + 1 // a control frame, as pushed
	KindMarker                  // an overflow marker, encoded by Config.EncodeMarker
	KindData                    // a data frame, as pushed
)

func (k Kind) String() string {
	switch k {
	case KindControl:
		return "control"
	case KindMarker:
		return "marker"
	case KindData:
		return "data"
	}
	return "unknown"
}

// Item is one message for the wire: Head followed by Body.
type Item struct {
	Kind Kind
	// Head is the data frame's per-subscription prefix; nil for the other kinds.
	Head []byte
	// Body is the control frame, the encoded marker, or the data frame's shared body. The
	// writer must not modify it.
	Body []byte
	// Key and Pos are the data frame's, or a control frame's about a subscription (PushControlAt);
	// a marker has its Key and no Pos.
	Key, Pos string
	// Ends is set on the control frame that ends subscription Key (PushControlEnd).
	Ends bool
	// Marker is the range a KindMarker item announces, as it was encoded; nil for the other
	// kinds. It points into the Batch, so it is valid only until the next call.
	Marker *Marker
}

// Size is the item's length on the wire.
func (it *Item) Size() int { return len(it.Head) + len(it.Body) }

// Batch is what one Next hands the writer. The writer owns it and passes the same Batch to every
// call, so its storage is reused: what it holds is valid only until the next call.
type Batch struct {
	// Items are the messages to write, in order: control frames, then ready markers, then
	// data frames.
	Items []Item
	buf   []byte   // encoded markers; Items of KindMarker point into it
	ends  []int    // scratch for fillLocked: where each marker ends in buf
	marks []Marker // the markers of Items, which point into it
}

// Bytes is the batch's length on the wire.
func (b *Batch) Bytes() int {
	n := 0
	for i := range b.Items {
		n += b.Items[i].Size()
	}
	return n
}

// Reset empties b, holding on to nothing it held: for a writer that keeps b, or pools it,
// after its last call.
func (b *Batch) Reset() { b.reset() }

func (b *Batch) reset() {
	// Clear, not just truncate: stale Items would keep shared bodies alive.
	clear(b.Items)
	b.Items = b.Items[:0]
	b.buf = b.buf[:0]
	clear(b.marks) // they hold keys and positions
	b.marks = b.marks[:0]
}

// TryNext fills b with the next batch without blocking and reports whether there was one. It
// returns false when there is nothing to write or the lanes are closed; Next tells the two
// apart. Call it from the writer goroutine only.
func (l *Lanes) TryNext(b *Batch) bool {
	b.reset()
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.closed && l.fillLocked(b)
}

// TryNextOrPark is TryNext for a writer on demand (Config.Wake): when there is nothing to
// write it also gives up the writer's place, in the same critical section, so the next push
// calls Wake and no push is missed. The writer then ends; it must not call the lanes again
// unless Claim gives it the place back. It returns false, and does not park, once the lanes
// are closed. Call it from the writer only.
func (l *Lanes) TryNextOrPark(b *Batch) bool {
	b.reset()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.fillLocked(b) {
		return true
	}
	l.parked = true
	return false
}

// Next fills b with the next batch, blocking until there is one. It returns ErrClosed once Close
// has been called, and ctx's error when ctx ends first. Call it from the writer goroutine
// only: Lanes has room for one parked writer.
//
// The writer loop the contract expects is a non-blocking drain, a flush when idle, then a
// blocking wait:
//
//	for {
//		if !lanes.TryNext(&b) {
//			flush()
//			if err := lanes.Next(ctx, &b); err != nil {
//				return err
//			}
//		}
//		write(b.Items)
//	}
//
// Woken, Next takes the batch at once. A producer that fans out to many connections wakes
// their writers when it is done (PushDataDeferred, Wake), so a writer wakes to everything the
// fan-out queued for it rather than to its first frame.
func (l *Lanes) Next(ctx context.Context, b *Batch) error {
	b.reset()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return ErrClosed
		}
		if l.fillLocked(b) {
			l.mu.Unlock()
			return nil
		}
		l.parked = true
		l.mu.Unlock()
		select {
		case <-l.wake:
		case <-ctx.Done():
			l.mu.Lock()
			l.parked = false
			l.mu.Unlock()
			return ctx.Err()
		}
	}
}

// fillLocked moves the next batch into b, which is empty, and reports whether it took anything.
//
// Order within a batch: control first, since replies are small and the client waits on them;
// then the ready markers; then data. A marker is ready when every data frame admitted before
// its first loss was taken by an earlier batch, so placing markers ahead of this batch's data
// never puts one before a frame it must follow, and no data frame of a marker's key can be in
// this batch at all (rule 2 kept them out of the lane).
func (l *Lanes) fillLocked(b *Batch) bool {
	maxFrames, maxBytes := l.cfg.MaxBatchFrames, l.cfg.MaxBatchBytes
	bytes := 0
	fits := func(size int) bool {
		return len(b.Items) == 0 || (len(b.Items) < maxFrames && bytes+size <= maxBytes)
	}

	nControl := 0
	for l.control.len() > 0 && fits(len(l.control.front().b)) {
		c := l.control.pop()
		b.Items = append(b.Items, Item{Kind: KindControl, Body: c.b, Key: c.key, Pos: c.pos, Ends: c.end})
		bytes += len(c.b)
		l.ctlBytes -= len(c.b)
		nControl++
	}
	if nControl > 0 && l.roomWait != nil {
		close(l.roomWait) // whoever waits in ControlRoom asks again
		l.roomWait = nil
	}

	// Markers are encoded now, so they carry the range as it stands. One that does not fit
	// stays in the table, still open and still extending, and goes in a later batch.
	firstMarker := len(b.Items)
	b.ends, b.marks = b.ends[:0], b.marks[:0]
	for m := l.markers.head; m != nil && m.barrier <= l.taken && len(b.Items) < maxFrames; m = l.markers.head {
		start := len(b.buf)
		b.buf = l.cfg.EncodeMarker(b.buf, m.Marker)
		size := len(b.buf) - start
		if !fits(size) {
			b.buf = b.buf[:start]
			break
		}
		b.Items = append(b.Items, Item{Kind: KindMarker, Key: m.Key})
		b.ends = append(b.ends, len(b.buf))
		b.marks = append(b.marks, m.Marker)
		bytes += size
		l.markers.remove(m)
	}
	// Point the markers into b only now: appending may have moved b.buf and b.marks.
	start := 0
	for i, end := range b.ends {
		it := &b.Items[firstMarker+i]
		it.Body = b.buf[start:end:end]
		it.Marker = &b.marks[i]
		start = end
	}

	nData := 0
	for l.data.len() > 0 && fits(l.data.front().Size()) {
		f := l.data.pop()
		size := f.Size()
		b.Items = append(b.Items, Item{Kind: KindData, Head: f.Head, Body: f.Body, Key: f.Key, Pos: f.Pos})
		bytes += size
		l.datBytes -= size
		nData++
	}
	l.taken += uint64(nData)
	if nData > 0 && l.dataWait != nil {
		close(l.dataWait) // whoever waits in TryPushData tries again
		l.dataWait = nil
	}
	if l.data.len() == 0 {
		// The client has caught up with everything queued: whatever stall there was is over.
		l.stallSince = time.Time{}
	}

	// One atomic add per counter per batch, not per frame.
	l.stats.controlWritten.Add(uint64(nControl))
	l.stats.markersEmitted.Add(uint64(len(b.ends)))
	l.stats.dataWritten.Add(uint64(nData))
	if t := l.total; t != nil {
		t.add(tControlWritten, uint64(nControl))
		t.add(tMarkersEmitted, uint64(len(b.ends)))
		t.add(tDataWritten, uint64(nData))
		for i := range b.marks {
			t.add(reasonIndex(b.marks[i].Reason), 1)
		}
	}
	return len(b.Items) > 0
}
