package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/stream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// calls is one log of what the fakes were asked, in the order they were asked, shared by the
// fakes of a test so that order across them can be checked.
type calls struct {
	mu  sync.Mutex
	log []string
}

func (c *calls) add(format string, args ...any) {
	c.mu.Lock()
	c.log = append(c.log, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

func (c *calls) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// count returns how many calls were s.
func (c *calls) count(s string) int {
	n := 0
	for _, x := range c.all() {
		if x == s {
			n++
		}
	}
	return n
}

// sent is one Send a fakeTransport took.
type sent struct {
	node string
	data []byte
}

// fakeTransport records every Send by destination; Flush counts, logs and answers flushErr.
type fakeTransport struct {
	calls *calls

	mu       sync.Mutex
	sends    []sent // guarded by mu
	flushes  int    // guarded by mu
	flushErr error  // guarded by mu
}

func (f *fakeTransport) Send(node string, data []byte) {
	f.mu.Lock()
	f.sends = append(f.sends, sent{node: node, data: slices.Clone(data)})
	f.mu.Unlock()
	f.calls.add("send %s", node)
}

func (f *fakeTransport) Flush(ctx context.Context) error {
	f.mu.Lock()
	f.flushes++
	err := f.flushErr
	f.mu.Unlock()
	f.calls.add("flush")
	return err
}

// to returns what was sent to node, in order.
func (f *fakeTransport) to(node string) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]byte
	for _, s := range f.sends {
		if s.node == node {
			out = append(out, s.data)
		}
	}
	return out
}

func (f *fakeTransport) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sends)
}

func (f *fakeTransport) flushCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushes
}

// fakeHub records what it is handed.
type fakeHub struct {
	calls      *calls
	mu         sync.Mutex
	delivered  []*stream.Message // guarded by mu
	deliverErr error             // guarded by mu
}

func (h *fakeHub) Deliver(m *stream.Message) error {
	h.mu.Lock()
	h.delivered = append(h.delivered, m)
	err := h.deliverErr
	h.mu.Unlock()
	h.calls.add("deliver %s %s", m.Channel, m.Pos)
	return err
}

func (h *fakeHub) Verify()                { h.calls.add("verify") }
func (h *fakeHub) Lost(m *stream.Message) { h.calls.add("lost %s %s", m.Channel, m.Pos) }

// fakeTables records what it is handed; Tokens answers tokens (nil: "*" and "k:id=<id>" of
// the new image, else of the old one).
type fakeTables struct {
	calls     *calls
	tokens    func(e *change.Event) ([]string, error)
	acceptErr error

	mu       sync.Mutex
	accepted []*change.Txn // guarded by mu
}

func (tb *fakeTables) Accept(ctx context.Context, txn *change.Txn) error {
	tb.mu.Lock()
	tb.accepted = append(tb.accepted, txn)
	tb.mu.Unlock()
	tb.calls.add("accept %s", txn.CommitLSN)
	return tb.acceptErr
}

func (tb *fakeTables) Stale(reason stream.Reason) { tb.calls.add("stale %s", reason) }

func (tb *fakeTables) Tokens(ctx context.Context, e *change.Event, dst []string) ([]string, error) {
	if tb.tokens != nil {
		toks, err := tb.tokens(e)
		return append(dst, toks...), err
	}
	dst = append(dst, "*")
	row := e.After
	if row == nil {
		row = e.Before
	}
	if v, ok := row.Get("id"); ok {
		dst = append(dst, "k:id="+string(v))
	}
	return dst, nil
}

func (tb *fakeTables) txns() []*change.Txn {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return slices.Clone(tb.accepted)
}

// fakePresence records what it is handed.
type fakePresence struct{ calls *calls }

func (p *fakePresence) Apply(channel string, kind stream.PresenceKind, m stream.Member) {
	p.calls.add("apply %s %s %s", channel, kind, m.ID)
}

// world is a set of nodes sharing one interest store and one transport, as nodes share one
// Redis.
type world struct {
	store   *memory.Interest
	history *memory.History
	tr      *fakeTransport
	calls   *calls
}

func newWorld(t *testing.T) *world {
	t.Helper()
	s, err := memory.NewInterest(interest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := memory.NewHistory(history.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &calls{}
	return &world{store: s, history: h, tr: &fakeTransport{calls: c}, calls: c}
}

// peer is one node of a world and its fakes.
type peer struct {
	*Node
	hub    *fakeHub
	tables *fakeTables
	pres   *fakePresence
}

// node returns a node of w named id, not running; edit changes its Config first.
func (w *world) node(t *testing.T, id string, edit func(*Config)) *peer {
	t.Helper()
	p := &peer{hub: &fakeHub{calls: w.calls}, tables: &fakeTables{calls: w.calls}, pres: &fakePresence{calls: w.calls}}
	cfg := Config{Node: id, Interest: w.store, Transport: w.tr, Hub: p.hub, Tables: p.tables, Presence: p.pres,
		RowTTL: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if edit != nil {
		edit(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Node = n
	return p
}

// run runs n until the test ends, and waits for Run to return then.
func run(t *testing.T, n *Node) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// eventually polls cond until it holds, failing the test with what() after 10 seconds.
func eventually(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not so after 10s: %s", what())
		}
		time.Sleep(time.Millisecond)
	}
}

// routed waits until every publication and presence event queued on n was routed.
func routed(t *testing.T, n *Node) {
	t.Helper()
	eventually(t, func() bool { return n.Stats().Routing == 0 }, func() string { return fmt.Sprintf("%d items wait to be routed", n.Stats().Routing) })
}

// received waits until everything n received was handed on.
func received(t *testing.T, n *Node) {
	t.Helper()
	eventually(t, func() bool { return n.Stats().Receiving == 0 }, func() string { return fmt.Sprintf("%d items wait to be handed on", n.Stats().Receiving) })
}

// watchChannel files a subscription to glob on n, as the server's channels do.
func watchChannel(t *testing.T, n *Node, glob string) (release func()) {
	t.Helper()
	p, err := channel.ParsePattern(glob, "")
	if err != nil {
		t.Fatal(err)
	}
	owner, token := ChannelInterest(p)
	release, err = n.Watch(context.Background(), owner, token, "alice")
	if err != nil {
		t.Fatalf("Watch %s: %v", glob, err)
	}
	return release
}

// rowsOf returns the nodes of the rows under owner's tokens, sorted.
func rowsOf(t *testing.T, s interest.Store, owner string, tokens ...string) []string {
	t.Helper()
	rows, err := s.Rows(context.Background(), owner, tokens)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r.Node)
	}
	slices.Sort(out)
	return out
}

func message(ch string, offset uint64, data string) *stream.Message {
	return &stream.Message{Pos: stream.ChannelPosition("ep1", offset), Channel: ch, Event: "ev", Data: []byte(data)}
}

// spyStore is an interest.Store that logs the calls the fan-out's ordering rests on, can fail
// Stamp, and can run a function inside the next Refresh, before it reaches the store.
type spyStore struct {
	interest.Store
	calls *calls

	mu        sync.Mutex
	stampErr  error  // guarded by mu
	rowsErr   error  // guarded by mu
	onRefresh func() // guarded by mu; run once
}

func (s *spyStore) Stamp(ctx context.Context, owner string, mark uint64, tokens []string) (uint64, []bool, error) {
	s.calls.add("stamp %s %d", owner, mark)
	s.mu.Lock()
	err := s.stampErr
	s.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	return s.Store.Stamp(ctx, owner, mark, tokens)
}

func (s *spyStore) Rows(ctx context.Context, owner string, tokens []string) ([]interest.Row, error) {
	s.calls.add("rows %s", owner)
	s.mu.Lock()
	err := s.rowsErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Store.Rows(ctx, owner, tokens)
}

func (s *spyStore) Sockets(ctx context.Context, owner string) ([]string, error) {
	s.calls.add("sockets %s", owner)
	return s.Store.Sockets(ctx, owner)
}

func (s *spyStore) Refresh(ctx context.Context, owner, socket string) (int, error) {
	s.mu.Lock()
	f := s.onRefresh
	s.onRefresh = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return s.Store.Refresh(ctx, owner, socket)
}

// spyHistory is a history.Store that logs each Append as "append <tables, sorted>", keeps the
// Prev each entry was given, and can fail.
type spyHistory struct {
	history.Store
	calls *calls

	mu        sync.Mutex
	appendErr error                 // guarded by mu
	prevs     map[string]change.LSN // guarded by mu: the last Append's entries' Prev, by table
}

func (s *spyHistory) Append(ctx context.Context, entries []history.Entry) error {
	var tables []string
	prevs := map[string]change.LSN{}
	for _, e := range entries {
		tables = append(tables, e.Table)
		prevs[e.Table] = e.Prev
	}
	slices.Sort(tables)
	s.calls.add("append %s", strings.Join(tables, ","))
	s.mu.Lock()
	err := s.appendErr
	s.prevs = prevs
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Append(ctx, entries)
}

func (s *spyHistory) lastPrevs() map[string]change.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prevs
}
