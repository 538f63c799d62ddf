package bus

import (
	"context"
	"sync/atomic"

	"github.com/heraldrt/herald/internal/stream"
)

// Memory is the bus of one node: every receiver is a local session, so Deliver hands the item
// over on the caller's goroutine. It holds no queue of its own, so nothing is lost on it and
// Flush has nothing to wait for.
type Memory struct {
	delivered atomic.Uint64
}

// NewMemory returns a node's bus.
func NewMemory() *Memory { return &Memory{} }

// Deliver hands it to r's subscription sub at once.
func (m *Memory) Deliver(r stream.Receiver, sub string, it *stream.Item) {
	r.Push(sub, it)
	m.delivered.Add(1)
}

// DeliverDeferred is Deliver for a fan-out that wakes the writers it fed once it is done: a
// receiver that can (stream.DeferringReceiver) adds its writer to w rather than waking it, and
// the caller calls w.Wake after its last delivery. Order and once hold as for Deliver.
func (m *Memory) DeliverDeferred(r stream.Receiver, sub string, it *stream.Item, w *stream.Wakeups) {
	if dr, ok := r.(stream.DeferringReceiver); ok {
		dr.PushDeferred(sub, it, w)
	} else {
		r.Push(sub, it)
	}
	m.delivered.Add(1)
}

// Flush returns at once: Deliver has already handed everything over.
func (m *Memory) Flush(context.Context) error { return nil }

// Stats is a snapshot of a bus's counters.
type Stats struct {
	Delivered uint64 // items handed to receivers
}

// Stats returns the bus's counters.
func (m *Memory) Stats() Stats { return Stats{Delivered: m.delivered.Load()} }
