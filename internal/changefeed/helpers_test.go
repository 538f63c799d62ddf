package changefeed

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// collector is a Sink that keeps every transaction it accepts.
type collector struct {
	mu     sync.Mutex
	txns   []*change.Txn // guarded by mu
	notify chan struct{}
	// refuse, when set, is asked first and may refuse a transaction.
	refuse func(*change.Txn) error
}

func newCollector() *collector { return &collector{notify: make(chan struct{}, 1)} }

func (c *collector) Accept(_ context.Context, txn *change.Txn) error {
	if c.refuse != nil {
		if err := c.refuse(txn); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.txns = append(c.txns, txn)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return nil
}

func (c *collector) snapshot() ([]*change.Txn, []change.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	txns := append([]*change.Txn(nil), c.txns...)
	var events []change.Event
	for _, t := range txns {
		events = append(events, t.Events...)
	}
	return txns, events
}

// waitFor polls until cond holds over the collected events, or fails the test.
func (c *collector) waitFor(t *testing.T, what string, cond func(txns []*change.Txn, events []change.Event) bool) ([]*change.Txn, []change.Event) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		txns, events := c.snapshot()
		if cond(txns, events) {
			return txns, events
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; have %d transactions, %d events: %s", what, len(txns), len(events), summarize(events))
		}
		select {
		case <-c.notify:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *collector) waitEvents(t *testing.T, n int) []change.Event {
	t.Helper()
	_, events := c.waitFor(t, fmt.Sprintf("%d events", n), func(_ []*change.Txn, e []change.Event) bool { return len(e) >= n })
	return events
}

func summarize(events []change.Event) string {
	var b strings.Builder
	for i, e := range events {
		if i == 10 {
			fmt.Fprintf(&b, " ... (%d more)", len(events)-10)
			break
		}
		fmt.Fprintf(&b, " [%s %s after=%s]", e.Op, e.Table, mustJSON(e.After))
	}
	return b.String()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// testLog writes a test's feed logs to the test's own log, shown only when it fails.
type testLog struct{ t testing.TB }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// testConfig is a fast-ticking feed config for db.
func testConfig(db string, tables ...string) Config {
	return Config{
		DatabaseURL:    db,
		Slot:           slotFor(db),
		Tables:         tables,
		StatusInterval: 200 * time.Millisecond,
		SilenceTimeout: 2 * time.Second,
		LeaderPoll:     100 * time.Millisecond,
		BackoffMin:     50 * time.Millisecond,
		BackoffMax:     500 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// slotFor is the test database's own slot name: slots are global to the cluster.
func slotFor(url string) string {
	i := strings.LastIndex(url, "/")
	name := url[i+1:]
	if q := strings.IndexByte(name, '?'); q >= 0 {
		name = name[:q]
	}
	return name
}

// logTo sends cfg's logs to t's log.
func logTo(t testing.TB, cfg Config) Config {
	cfg.Logger = slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return cfg
}

// running is a feed running in the background of a test.
type running struct {
	feed *Feed
	stop context.CancelFunc
	done chan error
}

// start runs a feed until the test ends (or stop is called), and waits until it streams.
func start(t *testing.T, cfg Config, sink Sink) *running {
	t.Helper()
	f, err := New(logTo(t, cfg), sink)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{feed: f, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- f.Run(ctx) }()
	t.Cleanup(func() { r.halt(t) })
	r.waitStreaming(t)
	return r
}

func (r *running) waitStreaming(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !r.feed.Stats().Streaming {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("feed ended before streaming: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("feed not streaming after 30s: %+v", r.feed.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// halt stops the feed and waits for Run to return.
func (r *running) halt(t *testing.T) error {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return within 30s of its context ending")
		return nil
	}
}

// db is a fresh database with the given setup SQL.
func db(t *testing.T, setup ...string) string {
	t.Helper()
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, setup...)
	return url
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// queryLSN runs a query returning one LSN.
func queryLSN(t *testing.T, url, sql string) change.LSN {
	t.Helper()
	var s *string
	c := connect(t, url)
	if err := c.QueryRow(context.Background(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return 0
	}
	l, err := change.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func col(t *testing.T, r change.Row, name string) string {
	t.Helper()
	v, ok := r.Get(name)
	if !ok {
		t.Fatalf("row %s has no column %q", mustJSON(r), name)
	}
	return string(v)
}

func jsonValid(b []byte) bool { return json.Valid(b) }
