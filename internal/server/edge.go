package server

import (
	"sync"
	"sync/atomic"

	"github.com/heraldrt/herald/internal/session"
)

// edge is the server as one transport's Registry: it admits and tracks that transport's
// connections through the server, and counts them, their sessions and their subscriptions for
// /metrics as they come and go, so a scrape reads a few atomics, not the sessions.
type edge struct {
	s    *Server
	name string // the transport, as the metrics' transport label: "ws", "sse"

	conns    atomic.Int64   // connections holding a slot
	sessions atomic.Int64   // live sessions
	opened   atomic.Uint64  // sessions ever tracked
	counts   session.Counts // the subscriptions of its sessions
}

var _ session.Registry = (*edge)(nil)

func newEdge(s *Server, name string) *edge { return &edge{s: s, name: name} }

// session is the sessions' Config for this transport: the server's, counting into this edge.
func (e *edge) session() session.Config {
	c := e.s.cfg.Session
	c.Counts = &e.counts
	return c
}

// Admit reserves one of the server's connection slots.
func (e *edge) Admit() (func(), bool) {
	release, ok := e.s.Admit()
	if !ok {
		return release, false
	}
	e.conns.Add(1)
	var once sync.Once
	return func() { once.Do(func() { e.conns.Add(-1); release() }) }, true
}

// Track tracks sess with the server.
func (e *edge) Track(sess *session.Session) func() {
	e.sessions.Add(1)
	e.opened.Add(1)
	untrack := e.s.Track(sess)
	var once sync.Once
	return func() { once.Do(func() { untrack(); e.sessions.Add(-1) }) }
}

// Stopping is the server's.
func (e *edge) Stopping() <-chan struct{} { return e.s.Stopping() }
