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

// Flush returns at once: Deliver has already handed everything over.
func (m *Memory) Flush(context.Context) error { return nil }

// Stats is a snapshot of a bus's counters.
type Stats struct {
	Delivered uint64 // items handed to receivers
}

// Stats returns the bus's counters.
func (m *Memory) Stats() Stats { return Stats{Delivered: m.delivered.Load()} }
