package redis

import "sync/atomic"

// TransportStats is a snapshot of a Transport's counters, for metrics. The counters only grow,
// from NewTransport on, across Runs.
type TransportStats struct {
	// Sending.
	Sent             uint64 // payloads appended to their destination's stream
	SentBytes        uint64 // the bytes of those payloads
	DroppedQueueFull uint64 // payloads dropped at a full queue (DropQueueFull)
	DroppedNoStream  uint64 // payloads whose destination had no stream (DropNoStream)
	Ticks            uint64 // ticks appended: heartbeats, and news of payloads dropped last

	// Receiving.
	Received       uint64 // payloads handed to the Receiver
	ReceivedBytes  uint64 // the bytes of those payloads
	GapsLost       uint64 // gaps reported as GapLost
	GapsRestart    uint64 // gaps reported as GapRestart
	GapsStreamGone uint64 // gaps reported as GapStreamGone

	// Redis load, by the senders and the reader together.
	Commands   uint64 // commands sent
	RoundTrips uint64 // round trips (a batch of commands is one)
	Failures   uint64 // round trips that failed (Redis did not answer, or refused): each is retried

	// Gauges: what waits now.
	Destinations int   // destinations sent to since NewTransport, each with its sender
	Queued       int64 // payloads waiting in the destinations' queues
	QueuedBytes  int64 // the bytes of those payloads
}

// Dropped returns the payloads dropped for reason.
func (s TransportStats) Dropped(reason DropReason) uint64 {
	switch reason {
	case DropQueueFull:
		return s.DroppedQueueFull
	case DropNoStream:
		return s.DroppedNoStream
	}
	return 0
}

// Gaps returns the gaps reported for reason.
func (s TransportStats) Gaps(reason GapReason) uint64 {
	switch reason {
	case GapLost:
		return s.GapsLost
	case GapRestart:
		return s.GapsRestart
	case GapStreamGone:
		return s.GapsStreamGone
	}
	return 0
}

// transportCounters backs the counters of TransportStats. They are atomics, bumped by the
// senders and the reader outside any lock, and read by Stats from any goroutine.
type transportCounters struct {
	sent, sentBytes                       atomic.Uint64
	droppedQueueFull, droppedNoStream     atomic.Uint64
	ticks                                 atomic.Uint64
	received, receivedBytes               atomic.Uint64
	gapsLost, gapsRestart, gapsStreamGone atomic.Uint64
	commands, roundTrips, failures        atomic.Uint64
}

func (c *transportCounters) drop(reason DropReason, n uint64) {
	if n == 0 {
		return
	}
	switch reason {
	case DropQueueFull:
		c.droppedQueueFull.Add(n)
	case DropNoStream:
		c.droppedNoStream.Add(n)
	}
}

func (c *transportCounters) gap(reason GapReason) {
	switch reason {
	case GapLost:
		c.gapsLost.Add(1)
	case GapRestart:
		c.gapsRestart.Add(1)
	case GapStreamGone:
		c.gapsStreamGone.Add(1)
	}
}

// Stats returns a snapshot of the counters and of the queues. Safe for concurrent use; it takes
// each destination's lock in turn, only to read its queue's length.
func (t *Transport) Stats() TransportStats {
	c := &t.stats
	s := TransportStats{
		Sent:             c.sent.Load(),
		SentBytes:        c.sentBytes.Load(),
		DroppedQueueFull: c.droppedQueueFull.Load(),
		DroppedNoStream:  c.droppedNoStream.Load(),
		Ticks:            c.ticks.Load(),
		Received:         c.received.Load(),
		ReceivedBytes:    c.receivedBytes.Load(),
		GapsLost:         c.gapsLost.Load(),
		GapsRestart:      c.gapsRestart.Load(),
		GapsStreamGone:   c.gapsStreamGone.Load(),
		Commands:         c.commands.Load(),
		RoundTrips:       c.roundTrips.Load(),
		Failures:         c.failures.Load(),
	}
	ds := t.destList()
	s.Destinations = len(ds)
	for _, d := range ds {
		d.mu.Lock()
		s.Queued += int64(len(d.queue))
		s.QueuedBytes += int64(d.bytes)
		d.mu.Unlock()
	}
	return s
}
