package delivery

import "sync/atomic"

// Stats is a snapshot of one connection's counters. Fields are read one by one without the lock,
// so a snapshot taken while producers run may be off by the frames in flight between two
// fields; each field on its own is exact.
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

// counters backs Stats. Monotonic counters may be bumped after mu is released; gauges are moved
// only under mu, because Close resets them under mu and an update racing the reset would leave
// them wrong for good.
type counters struct {
	dataAdmitted, dataWritten        atomic.Uint64
	lostLaneFull, lostTooLarge       atomic.Uint64
	controlAdmitted, controlWritten  atomic.Uint64
	controlRefused                   atomic.Uint64
	markersEmitted, markersForgotten atomic.Uint64
	discarded                        atomic.Uint64
	dataFrames, dataBytes            atomic.Int64
	controlFrames, controlBytes      atomic.Int64
	markersOpen                      atomic.Int64
}

func (c *counters) lost(reason DropReason) {
	switch reason {
	case ReasonLaneFull:
		c.lostLaneFull.Add(1)
	case ReasonTooLarge:
		c.lostTooLarge.Add(1)
	}
}

// Stats returns a snapshot of the counters. Safe for concurrent use; it takes no lock.
func (l *Lanes) Stats() Stats {
	c := &l.stats
	return Stats{
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
		DataFrames:       c.dataFrames.Load(),
		DataBytes:        c.dataBytes.Load(),
		ControlFrames:    c.controlFrames.Load(),
		ControlBytes:     c.controlBytes.Load(),
		Markers:          c.markersOpen.Load(),
	}
}
