package delivery

import (
	"sync/atomic"

	"github.com/heraldrt/herald/internal/stream"
)

// Totals sums the counters of every Lanes made with it (Config.Totals): a node's metrics read
// the sums of all its connections in constant time, whatever their number, and hold no lock of
// theirs. The lanes add to their Totals as they count, so a connection that ends leaves its
// counts behind in it: the sums never go down, and a connection that ends while they are read
// is counted once.
//
// The frames queued (DataAdmitted, ControlAdmitted) are not summed: they are counted once per
// frame on the fan-out's path, and one more atomic add there, on memory every connection
// shares, costs more than the metric is worth; what is written is counted once per batch.
//
// The counters are striped over cache lines, and each Lanes adds to one stripe, picked in turn
// as lanes are made: connections on different processors seldom write to one line, and a read
// sums a few dozen stripes. Safe for concurrent use. The zero value is ready to use.
type Totals struct {
	next    atomic.Uint32
	stripes [totalStripes]stripe
}

// totalStripes is how many stripes a Totals spreads its counters over: enough that the
// writers of a machine's processors seldom share one, few enough that a read stays cheap.
const totalStripes = 32

// The counters of a stripe, by index.
const (
	tDataWritten = iota
	tControlWritten
	tControlRefused
	tLostLaneFull
	tLostTooLarge
	tMarkersEmitted
	tMarkersForgotten
	tGaps
	tDiscarded
	tMarkerReasons // the markers written, by reason: one counter per reasonIndex from here
)

// reasons is stream.Reasons, indexed for the markers' counters.
var reasons = stream.Reasons()

// numTotals is how many of a stripe's counters are used: the markers' counters hold one more
// for a reason stream.Reasons does not list.
var numTotals = tMarkerReasons + len(reasons) + 1

// maxReasons is the room a stripe has for the markers' counters: an array's length is a
// constant, and stream.Reasons may grow. init checks that it fits.
const maxReasons = 16

// stripe is one cache-line-padded share of a Totals' counters. The padding keeps two stripes'
// counters off one line, and off the neighbouring line a processor may fetch with it.
type stripe struct {
	c [tMarkerReasons + maxReasons]atomic.Uint64
	_ [128]byte
}

func init() {
	if numTotals > tMarkerReasons+maxReasons {
		panic("delivery: stream.Reasons has outgrown maxReasons; raise it")
	}
}

// add adds n to counter i; s may be nil (lanes without Totals).
func (s *stripe) add(i int, n uint64) {
	if s != nil && n != 0 {
		s.c[i].Add(n)
	}
}

// reasonIndex is reason's marker counter.
func reasonIndex(r DropReason) int {
	for i, x := range reasons {
		if x == r {
			return tMarkerReasons + i
		}
	}
	return tMarkerReasons + len(reasons)
}

// lanes hands the next Lanes its stripe.
func (t *Totals) lanes() *stripe {
	if t == nil {
		return nil
	}
	return &t.stripes[t.next.Add(1)%totalStripes]
}

// TotalStats is a snapshot of a Totals: the monotonic counters of Stats, summed over every
// connection that ever counted into it (DataAdmitted and ControlAdmitted are not summed, and
// stay zero), and the markers written by reason.
type TotalStats struct {
	Stats
	// MarkersByReason counts the markers written by the reason their gap opened for, for
	// each of stream.Reasons; a reason it does not list counts under "". They add up to
	// MarkersEmitted.
	MarkersByReason map[DropReason]uint64
}

// Stats sums the stripes. Each counter is exact on its own; two of them may be off from each
// other by the frames in flight, as Lanes.Stats are.
func (t *Totals) Stats() TotalStats {
	var sum [len(stripe{}.c)]uint64
	for i := range t.stripes {
		s := &t.stripes[i]
		for j := 0; j < numTotals; j++ {
			sum[j] += s.c[j].Load()
		}
	}
	out := TotalStats{
		Stats: Stats{
			DataWritten:      sum[tDataWritten],
			ControlWritten:   sum[tControlWritten],
			ControlRefused:   sum[tControlRefused],
			LostLaneFull:     sum[tLostLaneFull],
			LostTooLarge:     sum[tLostTooLarge],
			MarkersEmitted:   sum[tMarkersEmitted],
			MarkersForgotten: sum[tMarkersForgotten],
			Gaps:             sum[tGaps],
			Discarded:        sum[tDiscarded],
		},
		MarkersByReason: make(map[DropReason]uint64, len(reasons)+1),
	}
	for i, r := range reasons {
		out.MarkersByReason[r] = sum[tMarkerReasons+i]
	}
	if n := sum[tMarkerReasons+len(reasons)]; n > 0 {
		out.MarkersByReason[""] = n
	}
	return out
}
