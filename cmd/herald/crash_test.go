package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// got is one frame a client received on its table subscription: a change (id is its row's)
// or a resync.
type got struct {
	pos    client.Position
	id     int
	resync *client.Resync
}

// follower reads one client's subscription "items" into a list, until the connection ends or
// cut says to stop: the client then closes its connection, keeping nothing after that frame.
type follower struct {
	conn *client.Conn
	mu   sync.Mutex
	got  []got // guarded by mu
	err  error // guarded by mu: a frame the test did not expect, or how the reading ended
	done chan struct{}
}

func follow(c *client.Conn, cut func(n int, ch *client.Change) bool) *follower {
	f := &follower{conn: c, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for n := 0; ; {
			fr, _, err := c.Next(context.Background())
			if err != nil {
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
				return
			}
			var g got
			switch fr := fr.(type) {
			case *client.Change:
				v, _ := fr.Row.Get("id")
				id, err := strconv.Atoi(string(v))
				if fr.Sub != "items" || fr.Op != "insert" || err != nil {
					f.fail(fmt.Errorf("unexpected change %+v", fr))
					return
				}
				g = got{pos: fr.Position(), id: id}
				n++
			case *client.Resync:
				g = got{pos: fr.Last, resync: fr}
			default:
				f.fail(fmt.Errorf("unexpected frame %T %+v", fr, fr))
				return
			}
			f.mu.Lock()
			f.got = append(f.got, g)
			f.mu.Unlock()
			if ch, ok := fr.(*client.Change); ok && cut != nil && cut(n, ch) {
				_ = c.Close()
				return
			}
		}
	}()
	return f
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	_ = f.conn.Close()
}

// list returns what the follower received so far.
func (f *follower) list() []got {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]got(nil), f.got...)
}

// lastID is the id of the last change received, 0 before any.
func (f *follower) lastID() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.got) - 1; i >= 0; i-- {
		if f.got[i].resync == nil {
			return f.got[i].id
		}
	}
	return 0
}

// reading returns the error that ended the reading, nil while it goes on.
func (f *follower) reading() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// wait waits for the follower's reading to end and returns why it ended.
func (f *follower) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the client's reading did not end within 30s", what)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// subscribeItems connects to the node at addr and subscribes to public.items from from (zero:
// the stream's end). A node that is not listening yet, or whose change stream is not live yet
// (unavailable), is retried at once and again, as a client resuming at once after a restart
// would: the resume must not wait for the node to catch up. It gives up when ctx ends.
func subscribeItems(ctx context.Context, addr string, from client.Position) (*client.Conn, error) {
	var last error
	for ctx.Err() == nil {
		c, err := client.Dial(ctx, "ws://"+addr, client.Options{Buffer: 4096})
		if err != nil {
			last = err
			time.Sleep(5 * time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			_, err = c.Subscribe(ctx, client.Subscription{Sub: "items", Table: "public.items", From: from})
			var ce *client.Error
			if err == nil {
				return c, nil
			}
			if !errors.As(err, &ce) || !ce.Temporary() {
				_ = c.Close()
				return nil, fmt.Errorf("subscribe from %v: %w", from, err)
			}
			last = err
			time.Sleep(2 * time.Millisecond)
		}
		_ = c.Close()
	}
	return nil, fmt.Errorf("subscribe from %v: still refused after 30s: %w", from, last)
}

// followItems subscribes and follows; see follow.
func followItems(t *testing.T, addr string, from client.Position, cut func(n int, ch *client.Change) bool) *follower {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := subscribeItems(ctx, addr, from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return follow(c, cut)
}

// later reports whether table position p comes after q: by LSN, then by index within one
// transaction, where index 0 stands for the whole transaction, after each of its changes.
func later(p, q client.Position) bool {
	switch {
	case p.LSN != q.LSN:
		return p.LSN > q.LSN
	case q.Idx == 0:
		return false
	}
	return p.Idx == 0 || p.Idx > q.Idx
}

// writer inserts rows into items with ids 1, 2, 3, ..., in transactions of 3 to 12 rows, until
// stop is closed or it has written maxRows. Ids follow commit order: one writer, one transaction at a time, and a
// transaction inserts its rows in id order, so a change's row id says where it stands in the
// stream. committed is the highest id committed.
type writer struct {
	committed atomic.Int64
	stop      chan struct{}
	done      chan error
}

func startWriter(t *testing.T, url string) *writer {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer conn.Close(context.Background())
		next := 1
		for next <= maxRows {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			n := 3 + rand.IntN(10)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := conn.Exec(ctx, `INSERT INTO items SELECT g, 'row ' || g FROM generate_series($1::int, $2::int) g`, next, next+n-1)
			cancel()
			if err != nil {
				w.done <- err
				return
			}
			next += n
			w.committed.Store(int64(next - 1))
			// A steady stream, not a flood: the kill lands among many small transactions, and
			// the clients read all of them on a loaded machine.
			time.Sleep(2 * time.Millisecond)
		}
		w.done <- nil
	}()
	return w
}

// maxRows bounds what the writer writes, however long the test waits: a few seconds' worth.
const maxRows = 30000

// end stops the writer and returns the highest id it committed.
func (w *writer) end(t *testing.T) int {
	t.Helper()
	close(w.stop)
	if err := <-w.done; err != nil {
		t.Fatalf("writer: %v", err)
	}
	return int(w.committed.Load())
}

// fillerRows is the size of one transaction on a streamed table nobody subscribes to, committed
// before anything the clients receive. The restarted node streams it again before it reaches
// the clients' positions, which gives a client resuming at once the time to be attached before
// the node routes past its from: the case the test is for. A client attached later is replayed
// what it missed from history instead (see c), which the checks accept, so a slow machine makes the test check the
// hold-back less often, never fail wrongly.
const fillerRows = 20000

// TestResumeAfterKill kills a node with SIGKILL while rows are being written and delivered,
// restarts it on the same slot and address, and resumes two clients at once from the last
// position each received: a wherever the kill left it, b cut off by itself in the middle of a
// transaction. The slot's confirmed position lags what was delivered (a long status interval),
// so the new node streams again changes the clients have. A third, c, resumes from a's
// position only after the node has routed past it. Each client must get no change at or
// before its from, positions that only grow, and every committed row exactly once across the
// kill, except rows a resync reports as possibly missing; c must get what it missed replayed
// from the restarted node's history, with no resync.
func TestResumeAfterKill(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url,
		`CREATE TABLE items (id int PRIMARY KEY, v text)`,
		`ALTER TABLE items REPLICA IDENTITY FULL`,
		`CREATE TABLE filler (id int PRIMARY KEY, v text)`)
	slot := testenv.SlotName(t, url)
	env := []string{
		"HERALD_CHANGEFEED_DATABASE_URL=" + url,
		"HERALD_CHANGEFEED_SLOT=" + slot,
		"HERALD_CHANGEFEED_TABLES=public.items,public.filler",
		"HERALD_CONFIG=" + openPolicyFile(t, "public.items", "public.filler"),
		"HERALD_CHANGEFEED_FULL_IDENTITY_TABLES=public.items",
		// The slot confirms nothing while the test runs, so the restarted node re-reads all of it.
		"HERALD_CHANGEFEED_STATUS_INTERVAL=10m",
		"HERALD_CHANGEFEED_SILENCE_TIMEOUT=30m",
		// Room for every frame the test writes: a lane_full resync would be a gap of its own.
		"HERALD_LIMITS_DATA_LANE_FRAMES=200000",
		"HERALD_LIMITS_DATA_LANE_BYTES=256MiB",
	}
	first := startServe(t, 1024, env...)
	a := followItems(t, first.addr, client.Position{}, nil)
	// b leaves on its own in the middle of a transaction: at the second change of one, after
	// at least 150 (every transaction has three or more).
	b := followItems(t, first.addr, client.Position{}, func(n int, ch *client.Change) bool {
		return n >= 150 && ch.Idx == 2
	})
	testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO filler SELECT g, repeat('f', 40) FROM generate_series(1, %d) g`, fillerRows))

	w := startWriter(t, url)
	stopped := false
	defer func() {
		if !stopped {
			close(w.stop)
			<-w.done
		}
	}()
	if err := b.wait(t, "b"); err != nil {
		t.Fatalf("client b ended with %v, want its own close", err)
	}
	waitUntil(t, "client a to receive 400 changes", 30*time.Second, func() bool { return a.lastID() >= 400 })
	time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond) // a random moment
	first.kill(t)
	if err := a.wait(t, "a"); err == nil || errors.Is(err, client.ErrClosed) {
		t.Fatalf("client a ended with %v, want the connection lost", err)
	}

	beforeA, beforeB := a.list(), b.list()
	fromA, _ := a.conn.Position("items")
	fromB := beforeB[len(beforeB)-1].pos
	if fromA != beforeA[len(beforeA)-1].pos || !later(fromA, fromB) || fromB.Idx != 2 {
		t.Fatalf("from: a %v (last received %v), b %v: want b in the middle of a transaction, before a",
			fromA, beforeA[len(beforeA)-1].pos, fromB)
	}
	// The test means a restart that streams again what the clients have: the slot must not
	// have confirmed their positions.
	var confirmed string
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if c, err := client.ParsePosition(confirmed); err != nil || c.LSN >= fromB.LSN {
		t.Fatalf("the slot confirmed %s (%v), not before b's from %v: the restart would stream nothing again", confirmed, err, fromB)
	}

	// The node restarts at the same address, and both clients resume at once: they try from
	// the moment the old node is gone, as a client that lost its connection does, so they are
	// attached within moments of the new node's change stream going live.
	froms := []client.Position{fromA, fromB}
	conns := make([]*client.Conn, 2)
	errs := make([]error, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range froms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = subscribeItems(ctx, first.addr, froms[i])
		}()
	}
	startServe(t, 1024, append(env, "HERALD_LISTEN="+first.addr)...)
	wg.Wait()
	for i, c := range conns {
		if c != nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	a2, b2 := follow(conns[0], nil), follow(conns[1], nil)
	// c is a resuming late: once the node has routed past a's from, with nobody to take those
	// changes. No history is kept, so c must be told, with a resync, never left to miss them.
	waitUntil(t, "the restarted node to route past a's from", 30*time.Second, func() bool {
		return a2.lastID() > beforeA[len(beforeA)-1].id
	})
	c2 := followItems(t, first.addr, fromA, nil)
	resumedAt := int(w.committed.Load())
	waitUntil(t, "200 rows more to be written after the resume", 30*time.Second, func() bool {
		return int(w.committed.Load()) >= resumedAt+200
	})
	final := w.end(t)
	stopped = true
	waitUntil(t, fmt.Sprintf("the clients to receive row %d", final), 30*time.Second, func() bool {
		for _, f := range []*follower{a2, b2, c2} {
			if err := f.reading(); err != nil {
				t.Fatalf("a resumed client stopped reading: %v", err)
			}
		}
		return a2.lastID() >= final && b2.lastID() >= final && c2.lastID() >= final
	})

	var ids []int
	rows, err := conn.Query(context.Background(), `SELECT id FROM items ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if id != i+1 {
			t.Fatalf("items holds row %d where row %d should be", id, i+1)
		}
	}
	if len(ids) != final {
		t.Fatalf("items holds %d rows, want %d: the writer's count", len(ids), final)
	}

	for _, c := range []struct {
		name          string
		from          client.Position
		before, after []got
	}{
		{"a, resumed where the kill left it", fromA, beforeA, a2.list()},
		{"b, resumed in the middle of a transaction", fromB, beforeB, b2.list()},
		{"c, resumed from a's position after the node passed it", fromA, beforeA, c2.list()},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkResume(t, c.from, c.before, c.after, final)
		})
	}
	// c came back after the node had routed past its from: the node's history holds what it
	// missed since the restart, so it is replayed to it (checkResume checked each row came
	// once, in order), with no resync.
	if l := c2.list(); len(l) == 0 || l[0].resync != nil {
		t.Errorf("c resumed after the node had routed past its from, and got first %+v, want the next change replayed from history", l[:min(len(l), 1)])
	}
}

// checkResume checks what one client received before and after its resume from from: row ids
// 1, 2, 3, ... in order up to final, each once; positions that only grow; after the resume
// nothing at or before from. A row may be missing only right after a resync, which says it
// may be.
func checkResume(t *testing.T, from client.Position, before, after []got, final int) {
	t.Helper()
	want := 1
	var prev client.Position
	for i, g := range before {
		switch {
		case g.resync != nil:
			t.Fatalf("before the kill, frame %d: resync %+v: the test meant no gap there", i, g.resync)
		case i > 0 && !later(g.pos, prev):
			t.Fatalf("before the kill, frame %d (row %d) at %v, after %v: positions must grow", i, g.id, g.pos, prev)
		case g.id != want:
			t.Fatalf("before the kill, frame %d is row %d, want row %d", i, g.id, want)
		}
		prev, want = g.pos, want+1
	}
	if prev != from {
		t.Fatalf("from %v is not the last position received, %v", from, prev)
	}
	var gap *client.Resync // a resync whose range no change has passed yet
	lost := 0
	for i, g := range after {
		if g.resync != nil {
			t.Logf("after the resume from %v, frame %d: resync %+v", from, i, g.resync)
			if !g.resync.First.IsZero() && !later(g.resync.First, prev) || later(prev, g.resync.Last) {
				t.Errorf("after the resume, frame %d: resync from %v to %v reaches back before %v, which the client has", i, g.resync.First, g.resync.Last, prev)
			}
			gap, prev = g.resync, g.resync.Last
			continue
		}
		switch {
		case !later(g.pos, from):
			t.Fatalf("after the resume from %v, frame %d is row %d at %v: at or before from, which the client has", from, i, g.id, g.pos)
		case !later(g.pos, prev):
			t.Fatalf("after the resume, frame %d (row %d) at %v, after %v: positions must grow", i, g.id, g.pos, prev)
		case g.id < want:
			t.Fatalf("after the resume, frame %d is row %d again (want row %d)", i, g.id, want)
		case g.id > want && gap == nil:
			t.Fatalf("after the resume, frame %d is row %d: rows %d..%d are missing with no resync", i, g.id, want, g.id-1)
		case g.id > want:
			t.Logf("rows %d..%d were reported by the resync %+v", want, g.id-1, gap)
			lost += g.id - want
		}
		gap, prev, want = nil, g.pos, g.id+1
	}
	if want != final+1 {
		t.Fatalf("the last row received is %d, want %d", want-1, final)
	}
	t.Logf("from %v: %d changes before, %d after, %d rows reported lost", from, len(before), len(after), lost)
}
