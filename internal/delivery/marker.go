package delivery

import "github.com/heraldrt/herald/internal/stream"

// DropReason says why a gap opened: stream.Reason. The same constant is the log attribute, the
// metric label and the reason a Marker carries.
type DropReason = stream.Reason

// The reasons the lanes themselves lose a frame for; a producer's gap brings its own (Gap).
const (
	// ReasonLaneFull: the data lane had no free slot or not enough free bytes for the frame.
	ReasonLaneFull = stream.ReasonLaneFull
	// ReasonTooLarge: the frame is larger than the whole data lane (Config.MaxDataBytes), so
	// it could never be queued however fast the client read.
	ReasonTooLarge = stream.ReasonTooLarge
)

// Reasons returns the reasons the lanes lose frames for, for metrics that pre-create their
// labels.
func Reasons() []DropReason { return []DropReason{ReasonLaneFull, ReasonTooLarge} }

// Marker tells a client that the frames of one subscription from First to Last were lost, so its
// view went stale there and it must resync from that point. It is what Config.EncodeMarker
// encodes, at write time.
type Marker struct {
	Key    string     // the subscription key whose frames were lost
	Reason DropReason // why the gap opened; later losses join the same gap
	First  string     // Pos of the first lost item; "" when unknown
	Last   string     // Pos of the last lost item so far
	Lost   uint64     // how many items were lost, First and Last included; 0 when unknown
}

// marker is an outstanding Marker in a Lanes' table. Everything in it is guarded by Lanes.mu.
type marker struct {
	Marker
	// barrier is the data lane's admission count when the marker opened: every data frame
	// admitted before the first loss has a sequence number <= barrier, and the marker may be
	// written only once the writer has taken that many frames.
	barrier    uint64
	prev, next *marker // the open list, in opening order
}

// markerTable holds the outstanding markers of one connection: at most one per key, so it is
// bounded by the number of subscriptions the server allows a connection.
//
// Markers open with barrier = the admission count at that moment, which never decreases, so
// the open list in opening order is also in barrier order. The ready markers are therefore a
// prefix of the list, and the writer finds them without scanning the table.
//
// Not safe for concurrent use: guarded by Lanes.mu.
type markerTable struct {
	byKey      map[string]*marker
	head, tail *marker // the open list: oldest barrier first
	free       *marker // emitted markers kept for reuse, linked by next
}

func (t *markerTable) len() int { return len(t.byKey) }

func (t *markerTable) get(key string) *marker {
	if len(t.byKey) == 0 {
		// The common case on a healthy connection: skip hashing the key.
		return nil
	}
	return t.byKey[key]
}

// open adds a marker for key, which must not already have one.
func (t *markerTable) open(key string, reason DropReason, pos string, barrier uint64) *marker {
	m := t.free
	if m != nil {
		t.free = m.next
	} else {
		m = new(marker)
	}
	*m = marker{
		Marker:  Marker{Key: key, Reason: reason, First: pos, Last: pos, Lost: 1},
		barrier: barrier,
		prev:    t.tail,
	}
	if t.tail != nil {
		t.tail.next = m
	} else {
		t.head = m
	}
	t.tail = m
	if t.byKey == nil {
		t.byKey = make(map[string]*marker)
	}
	t.byKey[key] = m
	return m
}

// remove takes m out of the table and keeps it for reuse.
func (t *markerTable) remove(m *marker) {
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		t.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		t.tail = m.prev
	}
	delete(t.byKey, m.Key)
	*m = marker{next: t.free}
	t.free = m
}

// release forgets every marker and the free list.
func (t *markerTable) release() { *t = markerTable{} }
