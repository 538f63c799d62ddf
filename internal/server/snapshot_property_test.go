package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/snapshot"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestSnapshotHandoffProperty: against a real Postgres, the whole stack in process (changefeed,
// router, hand-offs, snapshot reader, sessions, WebSocket), writers change a table at random
// (some transactions held open across subscribes and snapshots, so they begin before a snapshot
// and commit after it, others commit while a snapshot is read), and subscribers subscribe with
// snapshot at random moments, with random filters, under a row policy that hides some rows,
// some subscribing again with snapshot after a while (the client's rule for a resync). A second
// changefeed on a slot of its own, made before any write, folds every transaction into the
// table's state after each commit: the oracle.
//
// For each subscriber, its rows and the changes after them, applied strictly (an insert or
// enter of a row it has, an update, delete or leave of one it has not, fails), must equal the
// filter and the policy over the oracle's state at its live position, after every later
// transaction it was sent, and at the end: no gap, no duplicate. The seed is logged; set
// HERALD_TEST_SNAPSHOT_SEED to replay its choices.
func TestSnapshotHandoffProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HERALD_TEST_SNAPSHOT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HERALD_TEST_SNAPSHOT_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (HERALD_TEST_SNAPSHOT_SEED=%d replays its choices)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	url := testenv.NewDatabase(t)
	testenv.Exec(t, url,
		`CREATE TABLE items (id int PRIMARY KEY, org text NOT NULL, v int NOT NULL)`,
		`ALTER TABLE items REPLICA IDENTITY FULL`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The oracle, streaming from before the first write.
	o := &oracle{t: t, state: map[int]item{}, sentinel: make(chan struct{})}
	feed, err := changefeed.New(changefeed.Config{
		DatabaseURL: url, Slot: testenv.SlotName(t, url) + "_oracle", Publication: "oracle", Tables: []string{"public.items"},
		StatusInterval: 200 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, o)
	if err != nil {
		t.Fatal(err)
	}
	feedCtx, stopFeed := context.WithCancel(ctx)
	feedDone := make(chan error, 1)
	go func() { feedDone <- feed.Run(feedCtx) }()
	defer func() {
		stopFeed()
		if err := <-feedDone; err != nil {
			t.Errorf("the oracle's changefeed: %v", err)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); !feed.Stats().Streaming; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the oracle's changefeed is not streaming after 30s")
		}
	}

	cfg := baseConfig()
	cfg.Session.MaxSubscriptions = 8
	cfg.Changefeed = feedConfig(t, url)
	// Every row but those whose id is 3 modulo 7.
	cfg.Policy = policy.Rules{Tables: map[string]policy.TableRules{"public.items": {Row: `row.id % 7 != 3`}}}
	// Small pages, and a read that dawdles after its snapshot and between its pages (a busy
	// database, a slow network): the writers commit while it reads.
	cfg.Snapshots = snapshot.Config{PageRows: 3}
	dawdle := rand.New(rand.NewPCG(rng.Uint64(), 3))
	var dawdleMu sync.Mutex
	cfg.wrapSnapshots = func(r snapshotReader) snapshotReader {
		return slowReader{snapshotReader: r, pause: func() time.Duration {
			dawdleMu.Lock()
			defer dawdleMu.Unlock()
			return time.Duration(dawdle.IntN(60)) * time.Millisecond
		}}
	}
	r := start(t, cfg)
	waitReady(t, r)

	// Writers.
	var writers sync.WaitGroup
	stop := make(chan struct{})
	for w := range 5 {
		writers.Add(1)
		wseed := rng.Uint64()
		go func() {
			defer writers.Done()
			propertyWriter(ctx, t, url, wseed, w == 0, stop)
		}()
	}

	// Subscribers, at random moments while the writers write.
	var subs []*snapSubscriber
	var readers sync.WaitGroup
	for i := range 20 {
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		f := propertyFilters[rng.IntN(len(propertyFilters))]
		s := newSnapSubscriber(ctx, t, r, i, f, rng.IntN(3) == 0)
		subs = append(subs, s)
		readers.Add(1)
		go func() {
			defer readers.Done()
			s.run(ctx)
		}()
	}
	time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
	close(stop)
	writers.Wait()

	// Quiesce: every subscriber is live (its last snapshot included), then a sentinel row,
	// which each connection's plain subscription receives after everything committed before
	// it, and the oracle too.
	for _, s := range subs {
		select {
		case <-s.settled:
		case <-ctx.Done():
			t.Fatalf("subscriber %d never went live for good", s.id)
		}
	}
	testenv.Exec(t, url, `INSERT INTO items VALUES (1000, 'zz', 0)`)
	select {
	case <-o.sentinel:
	case <-ctx.Done():
		t.Fatal("the oracle never saw the sentinel")
	}
	readers.Wait()

	o.mu.Lock()
	defer o.mu.Unlock()
	checked, live, pending := 0, 0, 0
	for _, s := range subs {
		if s.failed != "" {
			t.Errorf("subscriber %d (%s): %s", s.id, s.filter.text, s.failed)
			continue
		}
		for _, c := range s.checks {
			want := s.filter.view(o.at(c.lsn))
			if c.what == "at the end" {
				// Whether the sentinel's own change came before the sentinel subscription's
				// is not promised; everything before it is.
				delete(want, 1000)
				delete(c.view, 1000)
			}
			if !maps.Equal(c.view, want) {
				t.Errorf("subscriber %d (%s), %s at %s: view %v, want %v", s.id, s.filter.text, c.what, c.lsn, sorted(c.view), sorted(want))
			}
			checked++
		}
		live += s.lives
		pending += s.beforeLive
	}
	st := r.srv.tables.snaps
	t.Logf("%d transactions streamed; %d snapshots went live; %d views checked; %d changes came between rows and live; hand-offs skipped %d transactions as in their snapshot and delivered %d, %d of them running when it was taken",
		len(o.states), live, checked, pending, st.skipped.Load(), st.delivered.Load(), st.straddled.Load())
	if st.skipped.Load() == 0 || st.delivered.Load() == 0 || st.straddled.Load() == 0 || pending == 0 {
		t.Errorf("the run never had a hand-off skip (%d) and deliver (%d) a transaction, deliver one that began before its snapshot (%d), or send one before live (%d): it shows little",
			st.skipped.Load(), st.delivered.Load(), st.straddled.Load(), pending)
	}
}

// slowReader reads as its reader does, pausing after the snapshot is taken and before each page.
type slowReader struct {
	snapshotReader
	pause func() time.Duration
}

func (r slowReader) Read(ctx context.Context, req snapshot.Request, sink snapshot.Sink) (snapshot.Progress, error) {
	return r.snapshotReader.Read(ctx, req, slowSink{Sink: sink, pause: r.pause})
}

type slowSink struct {
	snapshot.Sink
	pause func() time.Duration
}

func (s slowSink) Snapshot(x handoff.Snapshot) error {
	err := s.Sink.Snapshot(x)
	time.Sleep(s.pause())
	return err
}

func (s slowSink) Page(rows []change.Row, p snapshot.Progress, last bool) error {
	time.Sleep(s.pause())
	return s.Sink.Page(rows, p, last)
}

// item is one row of the test table.
type item struct {
	org string
	v   int
}

// propertyFilter is a subscription's filter, as JSON and as the test decides it.
type propertyFilter struct {
	text string // JSON; "" for none
	keep func(id int, it item) bool
}

// view is the rows of state a subscriber sees: its filter and the policy.
func (f propertyFilter) view(state map[int]item) map[int]item {
	out := map[int]item{}
	for id, it := range state {
		if id%7 != 3 && f.keep(id, it) {
			out[id] = it
		}
	}
	return out
}

var propertyFilters = []propertyFilter{
	{"", func(int, item) bool { return true }},
	{`{"eq":["org","a"]}`, func(_ int, it item) bool { return it.org == "a" }},
	{`{"in":["org",["b","c"]]}`, func(_ int, it item) bool { return it.org == "b" || it.org == "c" }},
	{`{"lt":["v",50]}`, func(_ int, it item) bool { return it.v < 50 }},
	{`{"or":[{"gte":["v",80]},{"lt":["id",6]}]}`, func(id int, it item) bool { return it.v >= 80 || id < 6 }},
	{`{"not":{"eq":["org","a"]}}`, func(_ int, it item) bool { return it.org != "a" }},
	{`{"in":["id",[1,2,3,5,8,13,21,34]]}`, func(id int, _ item) bool {
		switch id {
		case 1, 2, 3, 5, 8, 13, 21, 34:
			return true
		}
		return false
	}},
}

func sorted(m map[int]item) string {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%d:%s/%d ", id, m[id].org, m[id].v)
	}
	return b.String()
}

// oracle folds every transaction of the table, from empty, into its state after each commit.
type oracle struct {
	t        *testing.T
	mu       sync.Mutex
	state    map[int]item  // guarded by mu: now
	states   []oracleAt    // guarded by mu: after each commit, in commit order
	sentinel chan struct{} // closed once the sentinel row (id 1000) was inserted
}

type oracleAt struct {
	lsn   change.LSN
	state map[int]item
}

func (o *oracle) Accept(_ context.Context, txn *change.Txn) error {
	if !txn.Transactional {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range txn.Events {
		switch e.Op {
		case change.Insert:
			id, it := rowItem(e.After)
			o.state[id] = it
			if id == 1000 {
				defer close(o.sentinel)
			}
		case change.Update:
			oid, _ := rowItem(e.Before)
			delete(o.state, oid)
			id, it := rowItem(e.After)
			o.state[id] = it
		case change.Delete:
			id, _ := rowItem(e.Before)
			delete(o.state, id)
		case change.Truncate:
			clear(o.state)
		}
	}
	o.states = append(o.states, oracleAt{lsn: txn.CommitLSN, state: maps.Clone(o.state)})
	return nil
}

// at is the table after every transaction committed at or before lsn. The caller holds mu.
func (o *oracle) at(lsn change.LSN) map[int]item {
	i := sort.Search(len(o.states), func(i int) bool { return o.states[i].lsn > lsn })
	if i == 0 {
		return map[int]item{}
	}
	return o.states[i-1].state
}

func rowItem(r change.Row) (int, item) {
	var id int
	var it item
	if v, ok := r.Get("id"); ok {
		_ = json.Unmarshal(v, &id)
	}
	if v, ok := r.Get("org"); ok {
		_ = json.Unmarshal(v, &it.org)
	}
	if v, ok := r.Get("v"); ok {
		_ = json.Unmarshal(v, &it.v)
	}
	return id, it
}

// propertyWriter runs random transactions over 40 ids until stop: one to four statements,
// some held open for a while (so that subscribes and snapshots come while they run, and they
// commit after), and, on the long writer, one held open for a second at a time.
func propertyWriter(ctx context.Context, t *testing.T, url string, seed uint64, long bool, stop <-chan struct{}) {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close(context.Background())
	rng := rand.New(rand.NewPCG(seed, 2))
	orgs := []string{"a", "b", "c", "d"}
	for {
		select {
		case <-stop:
			return
		default:
		}
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		for range 1 + rng.IntN(4) {
			id, org, v := rng.IntN(40), orgs[rng.IntN(len(orgs))], rng.IntN(100)
			var sql string
			switch rng.IntN(4) {
			case 0, 1:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, '%s', %d) ON CONFLICT (id) DO UPDATE SET org = excluded.org, v = excluded.v`, id, org, v)
			case 2:
				sql = fmt.Sprintf(`UPDATE items SET v = %d WHERE id = %d`, v, id)
			default:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id)
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				// Two writers deadlocked on the same rows: one gives way.
				_ = tx.Rollback(ctx)
				tx = nil
				break
			}
		}
		if tx == nil {
			continue
		}
		switch {
		case long && rng.IntN(2) == 0:
			time.Sleep(time.Second)
		case rng.IntN(5) == 0:
			time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		}
		if err := tx.Commit(ctx); err != nil && ctx.Err() == nil {
			continue // a serialization failure: the transaction did not happen
		}
		time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
	}
}

// snapSubscriber is one client: a connection with a plain subscription for the sentinel, and a
// snapshot subscription it reads strictly, recording its view at live and after each
// transaction.
type snapSubscriber struct {
	id     int
	filter propertyFilter
	again  bool // subscribes again with snapshot once live, as after a resync
	conn   *websocket.Conn

	settled chan struct{} // closed once the last snapshot went live, or the subscriber failed
	once    sync.Once

	// Written by run only, read after it ends.
	checks     []viewCheck
	lives      int
	beforeLive int // changes between rows and live
	failed     string
}

type viewCheck struct {
	what string
	lsn  change.LSN
	view map[int]item
}

func newSnapSubscriber(ctx context.Context, t *testing.T, r *running, id int, f propertyFilter, again bool) *snapSubscriber {
	c, _ := connect(t, r)
	s := &snapSubscriber{id: id, filter: f, again: again, conn: c.c, settled: make(chan struct{})}
	s.send(ctx, `{"type":"subscribe","id":"z","sub":"z","table":"public.items","filter":{"eq":["org","zz"]}}`)
	s.subscribe(ctx, "s1")
	return s
}

func (s *snapSubscriber) send(ctx context.Context, frame string) {
	if err := s.conn.Write(ctx, websocket.MessageText, []byte(frame)); err != nil && s.failed == "" {
		s.failed = "send: " + err.Error()
	}
}

func (s *snapSubscriber) subscribe(ctx context.Context, sub string) {
	f := ""
	if s.filter.text != "" {
		f = `,"filter":` + s.filter.text
	}
	s.send(ctx, `{"type":"subscribe","id":"`+sub+`","sub":"`+sub+`","table":"public.items"`+f+`,"snapshot":true}`)
}

// run reads the connection until the sentinel has arrived, applying the current snapshot
// subscription's frames.
func (s *snapSubscriber) run(ctx context.Context) {
	defer s.conn.CloseNow()
	settle := func() { s.once.Do(func() { close(s.settled) }) }
	defer settle()
	sub := "s1"
	view := map[int]item{}
	live := false
	last := change.LSN(0) // the commit LSN of the last change applied since live
	fail := func(format string, args ...any) {
		if s.failed == "" {
			s.failed = fmt.Sprintf(format, args...)
		}
	}
	for s.failed == "" {
		_, b, err := s.conn.Read(ctx)
		if err != nil {
			fail("read: %v", err)
			return
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			fail("frame %s: %v", b, err)
			return
		}
		if m["sub"] == "z" && m["type"] == "change" {
			// The sentinel: everything committed before it has arrived.
			lsn, err := change.ParseLSN(m["pos"].(string))
			if err != nil {
				fail("sentinel pos %v: %v", m["pos"], err)
				return
			}
			if live && last != 0 && last != lsn {
				s.checks = append(s.checks, viewCheck{"after the transaction", last, maps.Clone(view)})
			}
			s.checks = append(s.checks, viewCheck{"at the end", lsn, maps.Clone(view)})
			return
		}
		if m["sub"] != sub {
			if m["type"] == "error" || m["type"] == "unsubscribed" && m["code"] != nil {
				fail("frame %s", b)
			}
			continue
		}
		switch m["type"] {
		case "subscribed":
			if m["snapshot"] != true {
				fail("subscribed without snapshot: %s", b)
			}
		case "rows":
			if live {
				fail("rows after live: %s", b)
			}
			for _, x := range m["rows"].([]any) {
				id, it := frameItem(x)
				if _, had := view[id]; had {
					fail("row %d twice in the snapshot", id)
				}
				view[id] = it
			}
		case "change":
			lsn, err := change.ParseLSN(m["pos"].(string))
			if err != nil {
				fail("pos %v: %v", m["pos"], err)
				continue
			}
			if live && last != 0 && lsn != last {
				s.checks = append(s.checks, viewCheck{"after the transaction", last, maps.Clone(view)})
			}
			if !live {
				s.beforeLive++
			} else {
				last = lsn
			}
			if err := applyStrict(view, m); err != nil {
				fail("%s at %s: %v", m["op"], m["pos"], err)
			}
		case "live":
			lsn, err := change.ParseLSN(m["pos"].(string))
			if err != nil {
				fail("live pos %v: %v", m["pos"], err)
				continue
			}
			live = true
			s.lives++
			s.checks = append(s.checks, viewCheck{"at live", lsn, maps.Clone(view)})
			last = 0
			if s.again {
				// Subscribe again with snapshot, as a client does on a resync: a new view.
				s.again = false
				s.send(ctx, `{"type":"unsubscribe","id":"u","sub":"`+sub+`"}`)
				sub = "s2"
				view, live = map[int]item{}, false
				s.subscribe(ctx, sub)
				continue
			}
			settle()
		case "resync":
			fail("resync: %s", b)
		case "unsubscribed":
			fail("ended: %s", b)
		default:
			fail("unexpected frame %s", b)
		}
	}
}

// frameItem reads a row of a frame.
func frameItem(x any) (int, item) {
	r := x.(map[string]any)
	id, _ := r["id"].(float64)
	org, _ := r["org"].(string)
	v, _ := r["v"].(float64)
	return int(id), item{org: org, v: int(v)}
}

// applyStrict applies a change frame to view, refusing one that does not fit it: an insert or
// enter of a row it has, an update, delete or leave of one it has not.
func applyStrict(view map[int]item, m map[string]any) error {
	var id, old int
	var it item
	if r, ok := m["row"]; ok {
		id, it = frameItem(r)
	}
	if r, ok := m["old"]; ok {
		old, _ = frameItem(r)
	}
	switch m["op"] {
	case "insert", "enter":
		if _, had := view[id]; had {
			return fmt.Errorf("row %d is in view already", id)
		}
		view[id] = it
	case "update":
		key := id
		if _, ok := m["old"]; ok {
			key = old
		}
		if _, had := view[key]; !had {
			return fmt.Errorf("row %d is not in view", key)
		}
		delete(view, key)
		view[id] = it
	case "delete", "leave":
		if _, had := view[old]; !had {
			return fmt.Errorf("row %d is not in view", old)
		}
		delete(view, old)
	case "truncate":
		clear(view)
	default:
		return fmt.Errorf("op %v", m["op"])
	}
	return nil
}
