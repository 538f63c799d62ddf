package router

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/stream"
)

// liveRecorder keeps what a subscriber is given as "op:id", "resync:reason" or "live:pos".
type liveRecorder struct {
	mu  sync.Mutex
	got []string
}

func (l *liveRecorder) Push(_ string, it *stream.Item) {
	var s string
	switch {
	case it.Live != nil:
		s = "live:" + it.Live.Pos.String()
	case it.Gap != nil:
		s = "resync:" + string(it.Gap.Reason)
	case it.Change != nil:
		id := "-"
		for _, r := range []change.Row{it.Change.Row, it.Change.Old} {
			if v, ok := r.Get("id"); ok {
				id = string(v)
				break
			}
		}
		s = string(it.Change.Op) + ":" + id
	}
	l.mu.Lock()
	l.got = append(l.got, s)
	l.mu.Unlock()
}

func (l *liveRecorder) items() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string{}, l.got...)
}

// xact is a committed transaction of public.items with its id and end: end is lsn+8.
func xact(lsn change.LSN, xid change.XID8, events ...change.Event) *change.Txn {
	t := txn(lsn, events...)
	t.XID8, t.Transactional, t.EndLSN = xid, true, lsn+8
	return t
}

func ins(id int, org string) change.Event {
	return change.Event{Op: change.Insert, After: row(id, org, 1)}
}

func newHistoryRouter(t testing.TB, hc HandoffConfig) *Router {
	t.Helper()
	r, err := New(Config{Schema: schema, Tables: []string{"public.items"}, Bus: bus.NewMemory(), History: NewHistory(0, 0), Handoff: hc})
	if err != nil {
		t.Fatal(err)
	}
	r.Seed(1)
	return r
}

func snapshotSub(t *testing.T, r *Router, target stream.Receiver, sub, f string) (Subscription, func()) {
	t.Helper()
	req := Request{Table: "public.items", Sub: sub, Target: target, Snapshot: true}
	if f != "" {
		req.Filter = json.RawMessage(f)
	}
	s, un, err := r.Subscribe(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if s.Snapshot == nil || s.Snapshot.Handoff == nil {
		t.Fatal("a snapshot subscription came without its hand-off")
	}
	t.Cleanup(un)
	return s, un
}

func accept(t *testing.T, r *Router, txns ...*change.Txn) {
	t.Helper()
	for _, x := range txns {
		if err := r.Accept(context.Background(), x); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandoffJudgesByTheSnapshot: a snapshot subscription's changes are held until its rows are
// sent and the stream has passed the snapshot's bound; then exactly the transactions the
// snapshot does not see are delivered, in commit order, then live at the last commit offered,
// then every later change directly. The look-back reaches a transaction routed before the
// subscription that the snapshot does not see (it is delivered), and skips one it sees.
func TestHandoffJudgesByTheSnapshot(t *testing.T) {
	tests := []struct {
		name string
		xip  []change.XID8
		want []string
	}{
		// 100 routed before the subscription, 101 and 102 after: the snapshot sees 100 and
		// 101, not 102, which was running when it was taken.
		{"running at the snapshot", []change.XID8{102}, []string{"insert:3", "live:0/300", "insert:4"}},
		// 100 was routed before the subscription and still running at the snapshot (a
		// commit waiting on a synchronous standby): only the look-back has it.
		{"routed before, running at the snapshot", []change.XID8{100, 102}, []string{"insert:1", "insert:3", "live:0/300", "insert:4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newHistoryRouter(t, HandoffConfig{})
			accept(t, r, xact(0x100, 100, ins(1, "acme")))
			rec := &liveRecorder{}
			sub, _ := snapshotSub(t, r, rec, "s", "")
			h := sub.Snapshot.Handoff
			accept(t, r, xact(0x200, 101, ins(2, "acme")), xact(0x300, 102, ins(3, "acme")))
			if got := rec.items(); len(got) != 0 {
				t.Fatalf("delivered before the snapshot was even known: %v", got)
			}
			if err := h.SetSnapshot(handoff.Snapshot{Xmin: 100, Xmax: 103, XIP: tt.xip, Bound: 0x208}); err != nil {
				t.Fatal(err)
			}
			if got := rec.items(); len(got) != 0 {
				t.Fatalf("delivered before the rows were sent: %v", got)
			}
			h.RowsSent()
			accept(t, r, xact(0x400, 103, ins(4, "acme")))
			if diff := cmp.Diff(tt.want, rec.items()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
			if n := r.Stats().Handoffs; n != 0 {
				t.Errorf("%d hand-offs still in progress after live", n)
			}
		})
	}
}

// TestHandoffGoesLiveOnAPosition: on a quiet database the hand-off goes live when the stream
// passes the bound: a transaction the subscription sees nothing of, or the fence, a logical
// message sent outside any transaction, count as positions.
func TestHandoffGoesLiveOnAPosition(t *testing.T) {
	for _, tc := range []struct {
		name string
		next *change.Txn
		want []string
	}{
		{"a transaction it does not see", xact(0x300, 102, ins(9, "other")), []string{"live:0/300"}},
		{"the fence", &change.Txn{CommitLSN: 0x300, EndLSN: 0x300, Events: []change.Event{{Op: change.Message, Prefix: "herald.fence", LSN: 0x300}}},
			[]string{"live:0/200"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newHistoryRouter(t, HandoffConfig{})
			rec := &liveRecorder{}
			sub, _ := snapshotSub(t, r, rec, "s", `{"eq":["org_id","acme"]}`)
			h := sub.Snapshot.Handoff
			accept(t, r, xact(0x200, 101, ins(2, "acme")))
			if err := h.SetSnapshot(handoff.Snapshot{Xmin: 102, Xmax: 102, Bound: 0x2F0}); err != nil {
				t.Fatal(err)
			}
			h.RowsSent()
			if got := rec.items(); len(got) != 0 {
				t.Fatalf("live before the stream passed the bound: %v", got)
			}
			accept(t, r, tc.next)
			if diff := cmp.Diff(tc.want, rec.items()); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandoffFails: a loss the stream reports (GapAll) or a restart of the stream fails a
// hand-off in progress with replication_restarted, and nothing of it is delivered; a live one
// is told the gap as any subscription is. An unsubscribe lets go of a hand-off.
func TestHandoffFails(t *testing.T) {
	for _, how := range []string{"gap", "restart"} {
		t.Run(how, func(t *testing.T) {
			r := newHistoryRouter(t, HandoffConfig{})
			rec, liveRec := &liveRecorder{}, &liveRecorder{}
			sub, _ := snapshotSub(t, r, rec, "s", "")
			done, _ := snapshotSub(t, r, liveRec, "d", "")
			accept(t, r, xact(0x200, 101, ins(2, "acme")))
			// "d" goes live; "s" is still reading.
			if err := done.Snapshot.Handoff.SetSnapshot(handoff.Snapshot{Xmin: 101, Xmax: 101, Bound: 0x100}); err != nil {
				t.Fatal(err)
			}
			done.Snapshot.Handoff.RowsSent()
			switch how {
			case "gap":
				r.GapAll(stream.TablePosition(0x200, 0), stream.TablePosition(0x900, 0), stream.ReasonUpstreamGap)
			case "restart":
				r.Seed(0x208)
			}
			if reason, ok := handoff.ReasonOf(sub.Snapshot.Handoff.Err()); !ok || reason != handoff.ReasonReplicationRestarted {
				t.Errorf("the hand-off in progress ended with %v, want replication_restarted", sub.Snapshot.Handoff.Err())
			}
			if got := rec.items(); len(got) != 0 {
				t.Errorf("the failed hand-off delivered %v", got)
			}
			accept(t, r, xact(0xA00, 110, ins(5, "acme")))
			if got := rec.items(); len(got) != 0 {
				t.Errorf("the failed hand-off delivered %v", got)
			}
			want := []string{"insert:2", "live:0/200", "insert:5"}
			if how == "gap" {
				want = []string{"insert:2", "live:0/200", "resync:upstream_gap", "insert:5"}
			}
			if diff := cmp.Diff(want, liveRec.items()); diff != "" {
				t.Errorf("the live subscription got (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("unsubscribe", func(t *testing.T) {
		r := newHistoryRouter(t, HandoffConfig{})
		sub, un := snapshotSub(t, r, &liveRecorder{}, "s", "")
		if n := r.Stats().Handoffs; n != 1 {
			t.Fatalf("%d hand-offs in progress, want 1", n)
		}
		un()
		if n := r.Stats().Handoffs; n != 0 {
			t.Errorf("%d hand-offs in progress after the unsubscribe, want 0", n)
		}
		select {
		case <-sub.Snapshot.Handoff.Done():
		default:
			t.Error("the hand-off of an ended subscription holds on")
		}
	})
}

// TestHandoffOverflow: a transaction too large to hold that the snapshot does not see reaches
// the subscriber as its resync, after the rows; one it sees is skipped.
func TestHandoffOverflow(t *testing.T) {
	r := newHistoryRouter(t, HandoffConfig{})
	rec := &liveRecorder{}
	sub, _ := snapshotSub(t, r, rec, "s", "")
	over := func(lsn change.LSN, xid change.XID8) *change.Txn {
		return &change.Txn{CommitLSN: lsn, EndLSN: lsn + 8, XID8: xid, Transactional: true,
			Overflow: &change.Overflow{Tables: map[string]int{"public.items": 3}, Changes: 3}}
	}
	accept(t, r, over(0x200, 101), over(0x300, 102))
	h := sub.Snapshot.Handoff
	if err := h.SetSnapshot(handoff.Snapshot{Xmin: 102, Xmax: 102, Bound: 0x208}); err != nil {
		t.Fatal(err)
	}
	h.RowsSent()
	if diff := cmp.Diff([]string{"resync:transaction_too_large", "live:0/300"}, rec.items()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

// TestHandoffLookbackWindow: the look-back offers only what the router routed within it.
func TestHandoffLookbackWindow(t *testing.T) {
	r := newHistoryRouter(t, HandoffConfig{Lookback: time.Hour})
	accept(t, r, xact(0x100, 100, ins(1, "acme")), xact(0x180, 101, ins(2, "acme")))
	before := r.Stats().Lookbacks
	snapshotSub(t, r, &liveRecorder{}, "s", "")
	if got := r.Stats().Lookbacks - before; got != 2 {
		t.Errorf("%d transactions offered as the look-back, want 2", got)
	}
	// Everything is older than a nanosecond's look-back.
	r2 := newHistoryRouter(t, HandoffConfig{Lookback: time.Nanosecond})
	accept(t, r2, xact(0x100, 100, ins(1, "acme")))
	time.Sleep(time.Millisecond)
	snapshotSub(t, r2, &liveRecorder{}, "s", "")
	if got := r2.Stats().Lookbacks; got != 0 {
		t.Errorf("%d transactions offered as the look-back, want none", got)
	}
}

// TestSnapshotKeep: a snapshot's rows are decided as a change's new image is: the filter,
// then projected onto the columns asked for, the key always.
func TestSnapshotKeep(t *testing.T) {
	r := newHistoryRouter(t, HandoffConfig{})
	s, _, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: &liveRecorder{}, Snapshot: true,
		Filter: json.RawMessage(`{"eq":["org_id","acme"]}`), Columns: []string{"qty"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		row  change.Row
		keep bool
		want string
	}{
		{row(1, "acme", 5), true, `{"id":1,"qty":5}`},
		{row(2, "other", 5), false, ""},
	} {
		got, keep, err := s.Snapshot.Keep(tc.row)
		if err != nil || keep != tc.keep || keep && string(got.AppendJSON(nil)) != tc.want {
			t.Errorf("Keep(%s) = %s, %v, %v; want %s, %v", tc.row.AppendJSON(nil), got.AppendJSON(nil), keep, err, tc.want, tc.keep)
		}
	}
	if got := fmt.Sprintf("%v %d %s", s.Snapshot.Key, len(s.Snapshot.Columns), s.Snapshot.Table); got != "[id] 3 public.items" {
		t.Errorf("snapshot of %s", got)
	}
}

// TestSnapshotRefusals: a snapshot with a from, or of a table without a key, is refused.
func TestSnapshotRefusals(t *testing.T) {
	keyless := fakeSchema{"public.items": {Columns: schema["public.items"].Columns, Identity: IdentityFull}}
	for _, tc := range []struct {
		name   string
		schema Schema
		from   stream.Position
	}{
		{"with from", schema, stream.TablePosition(0x10, 0)},
		{"no key", keyless, stream.Position{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(Config{Schema: tc.schema, Bus: bus.NewMemory()})
			if err != nil {
				t.Fatal(err)
			}
			r.Seed(1)
			_, _, err = r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: &liveRecorder{}, Snapshot: true, From: tc.from})
			if fe, ok := fault.As(err); !ok || fe.Code != fault.CodeBadFrame || fe.Field != "snapshot" {
				t.Errorf("Subscribe = %v, want bad_frame on snapshot", err)
			}
			if n := r.Stats().Subscriptions; n != 0 {
				t.Errorf("%d subscriptions attached", n)
			}
		})
	}
}

// TestMessageIsNoHead: a logical message sent outside any transaction (the reader's fence) is
// positioned by the end of its record, where the commit record of a transaction whose changes
// came before it may begin: that transaction is routed all the same.
func TestMessageIsNoHead(t *testing.T) {
	r := newHistoryRouter(t, HandoffConfig{})
	rec := &liveRecorder{}
	subscribe(t, r, rec, "s", "")
	accept(t, r, xact(0x100, 100, ins(1, "acme")),
		&change.Txn{CommitLSN: 0x200, EndLSN: 0x200, Events: []change.Event{{Op: change.Message, Prefix: "herald.fence", LSN: 0x200}}},
		xact(0x200, 101, ins(2, "acme")))
	if diff := cmp.Diff([]string{"insert:1", "insert:2"}, rec.items()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if h := r.Head(); h != 0x200 {
		t.Errorf("head %s, want 0/200", h)
	}
}

// TestHandoffHeldForTheLookback: a router without the history a look-back needs (a node among
// many) holds what it routes for a hand-off asked with Hold until the look-back, read from the
// history the nodes share, is opened: the look-back first, oldest first, then what was held
// that committed after it, each once.
func TestHandoffHeldForTheLookback(t *testing.T) {
	histTxn := func(lsn change.LSN, xid change.XID8, id int) history.Txn {
		e := ins(id, "acme")
		e.Table, e.LSN = "public.items", lsn
		return history.Txn{LSN: lsn, XID8: xid, End: lsn + 8, Events: []history.Event{{Idx: 1, Event: e}}}
	}
	newHold := func(t *testing.T, early int) (*Router, *liveRecorder, Subscription) {
		r, err := New(Config{Schema: schema, Tables: []string{"public.items"}, Bus: bus.NewMemory(), Handoff: HandoffConfig{EarlyBytes: early}})
		if err != nil {
			t.Fatal(err)
		}
		r.Seed(1)
		rec := &liveRecorder{}
		s, un, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: rec, Snapshot: true, Hold: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(un)
		if s.Snapshot.Open == nil {
			t.Fatal("a held hand-off came without Open")
		}
		return r, rec, s
	}
	t.Run("look-back, then what was held", func(t *testing.T) {
		r, rec, s := newHold(t, 0)
		// Routed while the look-back is read: 0x200 is in it too, 0x300 is not.
		accept(t, r, xact(0x200, 101, ins(2, "acme")), xact(0x300, 102, ins(3, "acme")))
		s.Snapshot.Open([]history.Txn{histTxn(0x100, 100, 1), histTxn(0x200, 101, 2)}, 0x200)
		h := s.Snapshot.Handoff
		// The snapshot sees none of them: all three are delivered, each once.
		if err := h.SetSnapshot(handoff.Snapshot{Xmin: 100, Xmax: 100, Bound: 0x80}); err != nil {
			t.Fatal(err)
		}
		h.RowsSent()
		accept(t, r, xact(0x400, 103, ins(4, "acme")))
		if diff := cmp.Diff([]string{"insert:1", "insert:2", "insert:3", "live:0/300", "insert:4"}, rec.items()); diff != "" {
			t.Errorf("delivered (-want +got):\n%s", diff)
		}
	})
	t.Run("an entry of an older node", func(t *testing.T) {
		_, _, s := newHold(t, 0)
		old := histTxn(0x100, 0, 1)
		s.Snapshot.Open([]history.Txn{old}, 0x100)
		if reason, ok := handoff.ReasonOf(s.Snapshot.Handoff.Err()); !ok || reason != handoff.ReasonReplicationRestarted {
			t.Errorf("the hand-off ended with %v, want replication_restarted", s.Snapshot.Handoff.Err())
		}
	})
	t.Run("held past its bound", func(t *testing.T) {
		r, _, s := newHold(t, 1000)
		for i := range 10 {
			accept(t, r, xact(change.LSN(0x200+0x10*i), change.XID8(101+i), ins(i, "acme")))
		}
		if reason, ok := handoff.ReasonOf(s.Snapshot.Handoff.Err()); !ok || reason != handoff.ReasonBufferFull {
			t.Errorf("the hand-off ended with %v, want handoff_buffer_full", s.Snapshot.Handoff.Err())
		}
		if n := r.Stats().Handoffs; n != 0 {
			t.Errorf("%d hand-offs in progress after it failed", n)
		}
	})
	t.Run("since", func(t *testing.T) {
		r, err := New(Config{Schema: schema, Bus: bus.NewMemory(), Handoff: HandoffConfig{Lookback: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		r.Seed(0x50)
		accept(t, r, xact(0x100, 100, ins(1, "acme")))
		s, un, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: &liveRecorder{}, Snapshot: true, Hold: true})
		if err != nil {
			t.Fatal(err)
		}
		defer un()
		// Nothing is an hour old: the look-back starts where the router started.
		if s.Snapshot.Since != 0x4F {
			t.Errorf("Since = %s, want 0/4F, where the router started", s.Snapshot.Since)
		}
	})
}

// BenchmarkAcceptWithHandoffs measures what snapshot subscriptions in hand-off cost routing:
// time per transaction with that many hand-offs offered each one (their filters match none of
// its rows: each offer is a position and a judgement), against none.
func BenchmarkAcceptWithHandoffs(b *testing.B) {
	for _, n := range []int{0, 10, 100} {
		b.Run(fmt.Sprintf("handoffs=%d", n), func(b *testing.B) {
			r, err := New(Config{Schema: schema, Tables: []string{"public.items"}, Bus: bus.NewMemory()})
			if err != nil {
				b.Fatal(err)
			}
			r.Seed(1)
			target := &countTarget{}
			for i := range 100 {
				subscribe(b, r, target, fmt.Sprintf("s%d", i), fmt.Sprintf(`{"eq":["org_id","org%d"]}`, i))
			}
			for i := range n {
				s, _, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: fmt.Sprintf("h%d", i), Target: target,
					Snapshot: true, Filter: json.RawMessage(`{"eq":["org_id","nobody"]}`)})
				if err != nil {
					b.Fatal(err)
				}
				// Never live: the bound is past every transaction.
				if err := s.Snapshot.Handoff.SetSnapshot(handoff.Snapshot{Xmin: 1, Xmax: 1, Bound: 1 << 62}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				x := xact(change.LSN(0x100+16*i), change.XID8(10+i), ins(i, fmt.Sprintf("org%d", i%100)))
				if err := r.Accept(context.Background(), x); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
