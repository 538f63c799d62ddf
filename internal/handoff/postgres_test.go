package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestAgainstPostgres runs the technique end to end on a real Postgres, with the package's own
// pieces where Herald's router and snapshot reader will stand: a changefeed streams a table
// that writers change concurrently (some transactions held open across snapshots); its sink
// keeps the whole history (the oracle: the table's state after every commit) and offers every
// transaction to each subscriber's hand-off; subscribers register at random moments, with a
// look-back of the last transactions, read their snapshot in one REPEATABLE READ transaction
// (FirstStatement, then keyset pages of the filter as SQL, each row passed through Eval), send
// the rows, emit the fence, and go live. Each subscriber's view must equal its filter over the
// oracle's state at Live and after every later transaction, with no transaction twice.
func TestAgainstPostgres(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url,
		`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`,
		`ALTER TABLE items REPLICA IDENTITY FULL`,
	)
	slot := url[strings.LastIndex(url, "/")+1:]
	if q := strings.IndexByte(slot, '?'); q >= 0 {
		slot = slot[:q]
	}
	h := &pgHarness{t: t, state: map[int]int{}, endSeen: make(chan struct{})}
	feed, err := changefeed.New(changefeed.Config{
		DatabaseURL: url, Slot: slot, Tables: []string{"public.items"}, MessagePrefixes: []string{fencePrefix},
		StatusInterval: 200 * time.Millisecond, BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnEnd:  func(err error) { t.Errorf("the changefeed's stream ended: %v", err) },
	}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	feedCtx, stopFeed := context.WithCancel(ctx)
	feedDone := make(chan error, 1)
	go func() { feedDone <- feed.Run(feedCtx) }()
	defer func() {
		stopFeed()
		if err := <-feedDone; err != nil {
			t.Errorf("feed: %v", err)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); !feed.Stats().Streaming; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the changefeed is not streaming after 30s")
		}
	}

	cols := []filter.Column{{Name: "id", OID: pgvalue.Int4OID}, {Name: "v", OID: pgvalue.Int4OID}}
	filters := []string{``, `{"lt":["v",50]}`, `{"in":["id",[1,2,3,5,8,13,21]]}`, `{"or":[{"gte":["v",90]},{"lt":["id",4]}]}`, `{"not":{"eq":["v",7]}}`}

	var writers, subscribers sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			h.write(ctx, url, uint64(w), stop)
		}()
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 12 {
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		f, err := filter.Parse(json.RawMessage(filters[i%len(filters)]), cols)
		if err != nil {
			t.Fatal(err)
		}
		subscribers.Add(1)
		go func() {
			defer subscribers.Done()
			h.subscribe(ctx, url, i, f)
		}()
	}
	subscribers.Wait()
	close(stop)
	writers.Wait()

	// Quiesce: a fence after every write, and the sink has seen it.
	conn := h.conn(ctx, url)
	if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1, 'end')`, fencePrefix); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.endSeen:
	case <-ctx.Done():
		t.Fatal("the final fence never arrived")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var skipped, delivered uint64
	for _, s := range h.subs {
		if !s.live {
			t.Errorf("subscriber %d never went live: %v", s.id, s.h.Err())
			continue
		}
		s.check(h, h.head, "at the end")
		st := s.h.Stats()
		skipped += st.Skipped
		delivered += st.Delivered
	}
	// The first subscriber that went wrong, and the stream as it judged it.
	for _, s := range h.subs {
		if !s.bad {
			continue
		}
		t.Logf("subscriber %d read %s; the stream:", s.id, s.read)
		for _, x := range h.history {
			var ev []string
			for _, e := range x.Events {
				ev = append(ev, fmt.Sprintf("%s %s %s", e.Op, e.Before.AppendJSON(nil), e.After.AppendJSON(nil)))
			}
			t.Logf("txn %s commit %s end %s visible %v delivered %v events %v", x.XID8, x.CommitLSN, x.EndLSN, s.h.snap.Visible(x.XID8), s.delivered[x.XID8], ev)
		}
		break
	}
	t.Logf("%d transactions streamed; hand-offs skipped %d as in their snapshots and delivered %d", len(h.history), skipped, delivered)
	if skipped == 0 || delivered == 0 {
		t.Errorf("the run never had a hand-off skip (%d) or deliver (%d) a transaction: it shows little", skipped, delivered)
	}
}

const fencePrefix = "herald.fence"

// pgHarness is the router's part: it holds the stream's history and offers it to hand-offs.
type pgHarness struct {
	t       *testing.T
	mu      sync.Mutex
	history []*change.Txn // guarded by mu: every transaction streamed
	states  []stateAt     // guarded by mu: the table after each
	state   map[int]int   // guarded by mu: the table now
	head    change.LSN    // guarded by mu: the last commit LSN streamed
	lastEnd change.LSN    // guarded by mu: the last end LSN streamed, or fence passed
	subs    []*pgSub      // guarded by mu
	endSeen chan struct{}
	ended   bool // guarded by mu
}

// lookback is how many of the last transactions a registration replays.
const lookback = 20

// Accept is the changefeed's sink.
func (h *pgHarness) Accept(_ context.Context, txn *change.Txn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !txn.Transactional {
		h.lastEnd = max(h.lastEnd, txn.EndLSN)
		for _, s := range h.subs {
			_ = s.h.OfferPosition(txn.EndLSN)
		}
		if len(txn.Events) == 1 && txn.Events[0].Content == "end" && !h.ended {
			h.ended = true
			close(h.endSeen)
		}
		return nil
	}
	for _, e := range txn.Events {
		id, v, ok := rowOf(e.After)
		if !ok {
			id, _, _ = rowOf(e.Before)
		}
		_, had := h.state[id]
		switch {
		case e.Op == change.Insert && !had, e.Op == change.Update && had:
			h.state[id] = v
		case e.Op == change.Delete && had:
			delete(h.state, id)
		default:
			h.t.Errorf("the stream's %s of id %d does not apply to the table (present %v)", e.Op, id, had)
		}
	}
	h.history = append(h.history, txn)
	h.states = append(h.states, stateAt{commit: txn.CommitLSN, state: maps.Clone(h.state)})
	h.head, h.lastEnd = txn.CommitLSN, txn.EndLSN
	for _, s := range h.subs {
		s.offer(txn)
	}
	return nil
}

func rowOf(r change.Row) (id, v int, ok bool) {
	if r == nil {
		return 0, 0, false
	}
	a, okA := r.Get("id")
	b, okB := r.Get("v")
	if !okA || !okB {
		return 0, 0, false
	}
	_ = json.Unmarshal(a, &id)
	_ = json.Unmarshal(b, &v)
	return id, v, true
}

func (h *pgHarness) conn(ctx context.Context, url string) *pgx.Conn {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range map[string]string{"timezone": "UTC", "datestyle": "ISO", "intervalstyle": "postgres",
		"bytea_output": "hex", "extra_float_digits": "3"} {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// write runs random transactions until stop: one to three statements over a few ids, some
// held open a while, so that snapshots find them running.
func (h *pgHarness) write(ctx context.Context, url string, seed uint64, stop <-chan struct{}) {
	c := h.conn(ctx, url)
	rng := rand.New(rand.NewPCG(seed, 99))
	for {
		select {
		case <-stop:
			return
		default:
		}
		tx, err := c.Begin(ctx)
		if err != nil {
			h.t.Error(err)
			return
		}
		for range 1 + rng.IntN(3) {
			id, v := rng.IntN(25), rng.IntN(100)
			var sql string
			switch rng.IntN(3) {
			case 0:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, %d) ON CONFLICT (id) DO UPDATE SET v = excluded.v`, id, v)
			case 1:
				sql = fmt.Sprintf(`UPDATE items SET v = %d WHERE id = %d`, v, id)
			default:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id)
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				_ = tx.Rollback(ctx)
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "40P01" {
					tx = nil // two writers locked each other's rows; one is rolled back
					break
				}
				h.t.Error(err)
				return
			}
		}
		if tx == nil {
			continue
		}
		if rng.IntN(8) == 0 {
			time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
		}
		if rng.IntN(10) == 0 {
			err = tx.Rollback(ctx)
		} else {
			err = tx.Commit(ctx)
		}
		if err != nil {
			h.t.Error(err)
			return
		}
	}
}

// pgSub is one subscriber: its hand-off and its client's view.
type pgSub struct {
	id        int
	f         *filter.Filter
	h         *Handoff[mview]
	harness   *pgHarness
	client    map[int]int
	delivered map[change.XID8]bool
	rowsSent  bool
	live      bool
	read      string // what its snapshot read, for a failure's message
	bad       bool   // its view went wrong: the history is logged at the end
}

func (s *pgSub) in(id, v int) bool {
	return s.f.Eval(change.Row{{Name: "id", Value: json.RawMessage(fmt.Sprint(id))}, {Name: "v", Value: json.RawMessage(fmt.Sprint(v))}}) == filter.True
}

// offer hands a transaction to the hand-off as the router would: as this subscriber's views.
func (s *pgSub) offer(txn *change.Txn) {
	o := &Txn[mview]{XID8: txn.XID8, CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN}
	for _, e := range txn.Events {
		var oldIn, newIn bool
		var key, val int
		if id, v, ok := rowOf(e.Before); ok {
			oldIn, key = s.in(id, v), id
		}
		if id, v, ok := rowOf(e.After); ok {
			newIn, key, val = s.in(id, v), id, v
		}
		switch {
		case oldIn && newIn:
			o.Items = append(o.Items, mview{'u', key, val})
		case newIn:
			o.Items = append(o.Items, mview{'e', key, val})
		case oldIn:
			o.Items = append(o.Items, mview{'l', key, 0})
		}
	}
	o.Bytes = 24 * len(o.Items)
	if err := s.h.Offer(o); err != nil {
		s.harness.t.Errorf("subscriber %d: offer of %s: %v", s.id, txn.XID8, err)
	}
}

// subscribe registers, reads the snapshot, sends the rows, emits the fence and waits for live.
func (h *pgHarness) subscribe(ctx context.Context, url string, id int, f *filter.Filter) {
	t := h.t
	s := &pgSub{id: id, f: f, harness: h, client: map[int]int{}, delivered: map[change.XID8]bool{}}
	conn := h.conn(ctx, url)

	// Register between two transactions, with the look-back.
	h.mu.Lock()
	s.h = New[mview](Config{Head: h.head}, s)
	for _, txn := range h.history[max(0, len(h.history)-lookback):] {
		s.offer(txn)
	}
	if h.lastEnd > 0 {
		_ = s.h.OfferPosition(h.lastEnd)
	}
	h.subs = append(h.subs, s)
	h.mu.Unlock()

	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Error(err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var first First
	if err := tx.QueryRow(ctx, FirstStatement).Scan(&first.Snapshot, &first.InsertLSN, &first.Isolation, &first.InRecovery); err != nil {
		t.Error(err)
		return
	}
	snap, err := first.Check()
	if err != nil {
		t.Error(err)
		return
	}
	h.mu.Lock()
	err = s.h.SetSnapshot(snap)
	h.mu.Unlock()
	if err != nil {
		t.Errorf("subscriber %d: SetSnapshot: %v", id, err)
		return
	}

	// Keyset pages of the filter as SQL, each row passed through Eval, as the reader will.
	rows := map[int]int{}
	last := -1
	for {
		args := []any{fmt.Sprint(last)}
		where, _ := f.SQL(&args)
		r, err := tx.Query(ctx, `SELECT id::text AS id_text, v::text AS v_text FROM items WHERE id > $1::int4 AND `+where+` ORDER BY id LIMIT 7`, args...)
		if err != nil {
			t.Errorf("subscriber %d: page after %d: %v", id, last, err)
			return
		}
		n := 0
		for r.Next() {
			var a, b string
			if err := r.Scan(&a, &b); err != nil {
				t.Error(err)
				return
			}
			row := change.Row{{Name: "id", Value: pgvalue.JSON(pgvalue.Int4OID, []byte(a))}, {Name: "v", Value: pgvalue.JSON(pgvalue.Int4OID, []byte(b))}}
			k, v, _ := rowOf(row)
			if f.Eval(row) == filter.True {
				rows[k] = v
			}
			last, n = k, n+1
		}
		if err := r.Err(); err != nil {
			t.Error(err)
			return
		}
		if n < 7 {
			break
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Error(err)
		return
	}

	maps.Copy(s.client, rows)
	h.mu.Lock()
	s.read = fmt.Sprintf("snapshot %s, bound %s, rows %v", snap.String(), snap.Bound, rows)
	s.rowsSent = true
	err = s.h.RowsSent()
	h.mu.Unlock()
	if err != nil {
		t.Errorf("subscriber %d: RowsSent: %v", id, err)
		return
	}
	if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1, 'x')`, fencePrefix); err != nil {
		t.Error(err)
		return
	}
	select {
	case <-s.h.Done():
		if err := s.h.Err(); err != nil {
			t.Errorf("subscriber %d: %v", id, err)
		}
	case <-ctx.Done():
		t.Errorf("subscriber %d: not live before the deadline (phase %s)", id, s.h.Phase())
	}
}

// Deliver is the client receiving a transaction; called under the harness's lock.
func (s *pgSub) Deliver(t *Txn[mview]) {
	h := s.harness
	if !s.rowsSent {
		h.t.Errorf("subscriber %d: %s delivered before the rows", s.id, t.XID8)
	}
	if s.delivered[t.XID8] {
		h.t.Errorf("subscriber %d: %s delivered twice", s.id, t.XID8)
	}
	s.delivered[t.XID8] = true
	for _, v := range t.Items {
		_, has := s.client[v.key]
		switch {
		case v.op == 'e' && has, v.op != 'e' && !has:
			h.t.Errorf("subscriber %d: %s: %c of id %d does not apply (present %v): a duplicate or a gap", s.id, t.XID8, v.op, v.key, has)
		case v.op == 'l':
			delete(s.client, v.key)
		default:
			s.client[v.key] = v.val
		}
	}
	if s.live {
		s.check(h, t.CommitLSN, "after "+t.XID8.String())
	}
}

// Live is the client learning its view is complete; called under the harness's lock.
func (s *pgSub) Live(head change.LSN) {
	s.live = true
	s.check(s.harness, head, "at live")
}

// check compares the client's view with the filter over the oracle's state at lsn. The
// harness's lock is held.
func (s *pgSub) check(h *pgHarness, lsn change.LSN, when string) {
	i := sort.Search(len(h.states), func(i int) bool { return h.states[i].commit > lsn })
	want := map[int]int{}
	if i > 0 {
		for k, v := range h.states[i-1].state {
			if s.in(k, v) {
				want[k] = v
			}
		}
	}
	if !maps.Equal(want, s.client) {
		s.bad = true
		h.t.Errorf("subscriber %d (%s, filter %s) at %s: client %v, want %v", s.id, when, s.f.String(), lsn, s.client, want)
	}
}
