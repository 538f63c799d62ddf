package delivery

import "sync/atomic"

// Stats is a snapshot of one connection's counters. The monotonic counters are atomics read one
// by one, so a snapshot taken while producers run may be off between two of them by the frames
// in flight (DataWritten may briefly lead DataAdmitted); each is exact on its own. The gauges
// are read together under the lock and agree with each other.
type Stats struct {
	// Monotonic counters.
	DataAdmitted     uint64 // data frames queued
	DataWritten      uint64 // data frames handed to the writer
	LostLaneFull     uint64 // data frames lost into a marker opened by ReasonLaneFull
	LostTooLarge     uint64 // data frames lost into a marker opened by ReasonTooLarge
	ControlAdmitted  uint64 // control frames queued
	ControlWritten   uint64 // control frames handed to the writer
	ControlRefused   uint64 // control frames refused with *ControlFullError
	MarkersEmitted   uint64 // markers handed to the writer
	MarkersForgotten uint64 // markers dropped unsent by Forget or Close
	Gaps             uint64 // gaps marked by Gap, whatever their source
	Discarded        uint64 // frames dropped because the lanes were closed (queued at Close, or pushed after)

	// Gauges: what is queued now.
	DataFrames    int64 // data frames queued
	DataBytes     int64 // data bytes queued
	ControlFrames int64 // control frames queued
	ControlBytes  int64 // control bytes queued
	Markers       int64 // outstanding markers
}

// Lost returns the data frames lost for reason. A frame lost while its key's marker was
// already open counts under that marker's reason, so the losses by reason add up to the Lost
// of every marker ever opened.
func (s Stats) Lost(reason DropReason) uint64 {
	switch reason {
	case ReasonLaneFull:
		return s.LostLaneFull
	case ReasonTooLarge:
		return s.LostTooLarge
	}
	return 0
}

// QueuedBytes is the bytes queued on both lanes.
func (s Stats) QueuedBytes() int64 { return s.DataBytes + s.ControlBytes }

// counters backs the monotonic half of Stats. They only grow, so they can be bumped after mu
// is released; the gauges need no counters of their own, Stats reads them from the lanes.
type counters struct {
	dataAdmitted, dataWritten        atomic.Uint64
	lostLaneFull, lostTooLarge       atomic.Uint64
	controlAdmitted, controlWritten  atomic.Uint64
	controlRefused                   atomic.Uint64
	markersEmitted, markersForgotten atomic.Uint64
	discarded                        atomic.Uint64
	gaps                             atomic.Uint64
}

// lost counts n items lost under reason, in the lanes' counters and their Totals.
func (l *Lanes) lost(reason DropReason, n uint64) {
	switch reason {
	case ReasonLaneFull:
		l.stats.lostLaneFull.Add(n)
		l.total.add(tLostLaneFull, n)
	case ReasonTooLarge:
		l.stats.lostTooLarge.Add(n)
		l.total.add(tLostTooLarge, n)
	}
}

// Stats returns a snapshot of the counters. Safe for concurrent use; it holds the lock only to
// read the gauges.
func (l *Lanes) Stats() Stats {
	c := &l.stats
	s := Stats{
		DataAdmitted:     c.dataAdmitted.Load(),
		DataWritten:      c.dataWritten.Load(),
		LostLaneFull:     c.lostLaneFull.Load(),
		LostTooLarge:     c.lostTooLarge.Load(),
		ControlAdmitted:  c.controlAdmitted.Load(),
		ControlWritten:   c.controlWritten.Load(),
		ControlRefused:   c.controlRefused.Load(),
		MarkersEmitted:   c.markersEmitted.Load(),
		MarkersForgotten: c.markersForgotten.Load(),
		Discarded:        c.discarded.Load(),
		Gaps:             c.gaps.Load(),
	}
	l.mu.Lock()
	s.DataFrames, s.DataBytes = int64(l.data.len()), int64(l.datBytes)
	s.ControlFrames, s.ControlBytes = int64(l.control.len()), int64(l.ctlBytes)
	s.Markers = int64(l.markers.len())
	l.mu.Unlock()
	return s
}
