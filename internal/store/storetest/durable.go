package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/stream"
)

// NewDurable returns a fresh, empty durable store with lim, sharing nothing with other
// subtests'.
type NewDurable func(t *testing.T, lim durable.Limits) durable.Store

// RunDurable runs the durable.Store conformance suite. Every subtest passes its own clock, as
// durable.Store takes the caller's now, so none sleeps, but for the owner's claim, whose TTL a
// store may keep by its own clock.
func RunDurable(t *testing.T, newStore NewDurable) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := durable.Key{Subject: "alice", App: "web", Name: "jobs"}
	single := durable.Def{Channel: "jobs/eu", Mode: durable.Single}
	feed := durable.Def{Channel: "news", Event: "post", Mode: durable.Broadcast}

	t.Run("FollowsTheQueueRules", func(t *testing.T) {
		// The same random steps on the store and on durable.Queue, the rules' statement,
		// answer alike, step by step.
		for seed := uint64(1); seed <= 24; seed++ {
			for _, def := range []durable.Def{single, feed} {
				t.Run(fmt.Sprintf("%s/%d", def.Mode, seed), func(t *testing.T) {
					differential(t, newStore, key, def, seed, t0)
				})
			}
		}
	})

	t.Run("BindDefinesAndChecks", func(t *testing.T) {
		s := newStore(t, durable.Limits{MaxPerHolder: 2})
		b, err := s.Bind(ctx, key, single, durable.Conn{ID: "c1", Node: "n1"}, t0)
		if err != nil || !b.Created || b.Def != single || !b.Start.IsZero() || !b.Tail.IsZero() {
			t.Fatalf("first bind: %+v, %v; want created, no start or tail", b, err)
		}
		start := stream.ChannelPosition("e1", 7)
		if err := s.Begin(ctx, key, start); err != nil {
			t.Fatal(err)
		}
		if err := s.Begin(ctx, key, stream.ChannelPosition("e1", 9)); err != nil {
			t.Fatal(err)
		}
		b, err = s.Bind(ctx, key, single, durable.Conn{ID: "c2", Node: "n2"}, t0)
		if err != nil || b.Created || b.Start != start {
			t.Fatalf("second bind: %+v, %v; want not created, start %s (the first Begin's)", b, err, start)
		}
		for _, other := range []durable.Def{{Channel: "jobs/us", Mode: durable.Single}, {Channel: "jobs/eu", Mode: durable.Broadcast},
			{Channel: "jobs/eu", Event: "x", Mode: durable.Single}} {
			if b, err := s.Bind(ctx, key, other, durable.Conn{ID: "c3"}, t0); !errors.Is(err, durable.ErrConflict) || b.Def != single {
				t.Errorf("bind with %+v: %+v, %v; want ErrConflict naming %+v", other, b, err, single)
			}
		}
		k2 := key
		k2.Name = "two"
		if _, err := s.Bind(ctx, k2, feed, durable.Conn{ID: "c1"}, t0); err != nil {
			t.Fatal(err)
		}
		k3 := key
		k3.Name = "three"
		if _, err := s.Bind(ctx, k3, feed, durable.Conn{ID: "c1"}, t0); !errors.Is(err, durable.ErrTooMany) {
			t.Fatalf("a third for the holder: %v, want ErrTooMany", err)
		}
		// Another app is another holder.
		k4 := k3
		k4.App = "mobile"
		if _, err := s.Bind(ctx, k4, feed, durable.Conn{ID: "c1"}, t0); err != nil {
			t.Fatalf("another app's: %v", err)
		}
		if ok, err := s.Forget(ctx, k2); !ok || err != nil {
			t.Fatalf("Forget: %v, %v", ok, err)
		}
		if ok, err := s.Forget(ctx, k2); ok || err != nil {
			t.Fatalf("Forget again: %v, %v; want false", ok, err)
		}
		if _, err := s.Bind(ctx, k3, feed, durable.Conn{ID: "c1"}, t0); err != nil {
			t.Fatalf("after a forget the holder has room again: %v", err)
		}
	})

	t.Run("GoneIsErrGone", func(t *testing.T) {
		s := newStore(t, durable.Limits{})
		if _, err := s.Append(ctx, key, []durable.Entry{durableEntry(1)}, t0); !errors.Is(err, durable.ErrGone) {
			t.Errorf("Append: %v", err)
		}
		if _, _, err := s.Ack(ctx, key, "c1", stream.ChannelPosition("e1", 1), t0); !errors.Is(err, durable.ErrGone) {
			t.Errorf("Ack: %v", err)
		}
		if _, err := s.Unbind(ctx, key, "c1", t0); !errors.Is(err, durable.ErrGone) {
			t.Errorf("Unbind: %v", err)
		}
		if _, err := s.Expire(ctx, key, t0); !errors.Is(err, durable.ErrGone) {
			t.Errorf("Expire: %v", err)
		}
		if err := s.Touch(ctx, key, []string{"c1"}, t0); !errors.Is(err, durable.ErrGone) {
			t.Errorf("Touch: %v", err)
		}
		if _, _, err := s.Claim(ctx, key, "n1", t0, time.Second); !errors.Is(err, durable.ErrGone) {
			t.Errorf("Claim: %v", err)
		}
	})

	t.Run("IdleIsForgotten", func(t *testing.T) {
		s := newStore(t, durable.Limits{IdleTTL: time.Minute, MaxPerHolder: 1})
		if _, err := s.Bind(ctx, key, feed, durable.Conn{ID: "c1"}, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Unbind(ctx, key, "c1", t0); err != nil {
			t.Fatal(err)
		}
		if o, err := s.Expire(ctx, key, t0.Add(time.Minute-time.Millisecond)); err != nil || o.Gone {
			t.Fatalf("before the idle TTL: %+v, %v", o, err)
		}
		if o, err := s.Expire(ctx, key, t0.Add(time.Minute)); err != nil || !o.Gone {
			t.Fatalf("at the idle TTL: %+v, %v; want gone", o, err)
		}
		k2 := key
		k2.Name = "other"
		if _, err := s.Bind(ctx, k2, feed, durable.Conn{ID: "c1"}, t0); err != nil {
			t.Fatalf("the forgotten one no longer counts for the holder: %v", err)
		}
	})

	t.Run("DeadNodesConnectionsExpire", func(t *testing.T) {
		s := newStore(t, durable.Limits{ConnTTL: 10 * time.Second, Lease: time.Hour})
		mustBind(t)(s.Bind(ctx, key, single, durable.Conn{ID: "a", Node: "n1"}, t0))
		mustBind(t)(s.Bind(ctx, key, single, durable.Conn{ID: "b", Node: "n2"}, t0))
		o, err := s.Append(ctx, key, []durable.Entry{durableEntry(1)}, t0)
		if err != nil || renderDurable(o) != "b@n2:1#1" {
			t.Fatalf("append: %s, %v; want it leased to b", renderDurable(o), err)
		}
		// n1 renews a; n2 died holding b's lease.
		if err := s.Touch(ctx, key, []string{"a"}, t0.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		o, err = s.Expire(ctx, key, t0.Add(10*time.Second))
		if err != nil || renderDurable(o) != "a@n1:1#2" || o.Retried != 1 {
			t.Fatalf("expire: %s (%+v), %v; want b unbound and its lease to a", renderDurable(o), o, err)
		}
	})

	t.Run("OneOwnerAtATime", func(t *testing.T) {
		s := newStore(t, durable.Limits{})
		mustBind(t)(s.Bind(ctx, key, single, durable.Conn{ID: "a", Node: "n1"}, t0))
		const ttl = 300 * time.Millisecond
		start := stream.ChannelPosition("e1", 4)
		if err := s.Begin(ctx, key, start); err != nil {
			t.Fatal(err)
		}
		if o, from, err := s.Claim(ctx, key, "n1", t0, ttl); err != nil || o != "n1" || from != start {
			t.Fatalf("n1 claims: %q from %s, %v; want n1 from the start %s", o, from, err, start)
		}
		if o, _, err := s.Claim(ctx, key, "n2", t0, ttl); err != nil || o != "n1" {
			t.Fatalf("n2 claims while n1 owns: %q, %v; want n1", o, err)
		}
		if o, _, err := s.Claim(ctx, key, "n1", t0, ttl); err != nil || o != "n1" {
			t.Fatalf("n1 renews: %q, %v", o, err)
		}
		if _, err := s.Append(ctx, key, []durable.Entry{durableEntry(5), durableEntry(6)}, t0); err != nil {
			t.Fatal(err)
		}
		// n1 stops renewing: once its claim has run out, n2's succeeds, and feeds from the last
		// position taken.
		deadline := time.Now().Add(10 * time.Second)
		for now := t0; ; now = now.Add(ttl / 3) {
			o, from, err := s.Claim(ctx, key, "n2", now, ttl)
			if err != nil {
				t.Fatal(err)
			}
			if o == "n2" {
				if want := stream.ChannelPosition("e1", 6); from != want {
					t.Fatalf("n2 feeds from %s, want the tail %s", from, want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("n2 never took over from %q", o)
			}
			time.Sleep(ttl / 3)
		}
	})
}

// mustBind fails t when the bind it is handed failed.
func mustBind(t *testing.T) func(durable.Bound, error) {
	return func(_ durable.Bound, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// entry is a publication at e1:off.
func durableEntry(off uint64) durable.Entry {
	return durable.Entry{Msg: &stream.Message{Pos: stream.ChannelPosition("e1", off), Channel: "jobs/eu",
		Data: []byte(fmt.Sprintf(`{"n":%d}`, off))}}
}

// render writes an outcome's deliveries as conn@node:offset#attempt and conn@node:gap(...)
// items, with its counters.
func renderDurable(o durable.Outcome) string {
	var out []string
	for _, d := range o.Deliveries {
		for _, e := range d.Entries {
			if g := e.Gap; g != nil {
				out = append(out, fmt.Sprintf("%s@%s:gap(%s-%s,%d,%s)", d.Conn.ID, d.Conn.Node, g.First, g.Last, g.Lost, g.Reason))
				continue
			}
			m := e.Msg
			out = append(out, fmt.Sprintf("%s@%s:%d#%d", d.Conn.ID, d.Conn.Node, m.Pos.Offset, e.Attempt))
			_ = m
		}
	}
	return strings.Join(out, " ")
}

// full is render with the counters and the messages' contents.
func fullDurable(o durable.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[d%d a%d r%d p%d x%d depth %d gone %v] ", o.Delivered, o.Acked, o.Retried, o.Parked, o.Dropped, o.Depth, o.Gone)
	for _, d := range o.Deliveries {
		for _, e := range d.Entries {
			if m := e.Msg; m != nil {
				fmt.Fprintf(&b, "%s:%s/%s/%s/%s#%d ", d.Conn.ID, m.Pos, m.Channel, m.Event, m.Data, e.Attempt)
				continue
			}
			g := e.Gap
			fmt.Fprintf(&b, "%s:gap(%s-%s,%d,%s) ", d.Conn.ID, g.First, g.Last, g.Lost, g.Reason)
		}
	}
	return b.String()
}

// differential drives a store and a durable.Queue with the same random steps and compares
// every answer.
func differential(t *testing.T, newStore NewDurable, key durable.Key, def durable.Def, seed uint64, t0 time.Time) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	lim := durable.Limits{MaxItems: 1 + rng.IntN(8), MaxBytes: 1024 + rng.IntN(1024), Lease: time.Second,
		MaxAttempts: 1 + rng.IntN(3), MaxInFlight: 1 + rng.IntN(3), IdleTTL: time.Hour, ConnTTL: 4 * time.Second}
	s := newStore(t, lim)
	now := t0
	var q *durable.Queue
	var bound []string
	conns := 0
	next := uint64(0)
	var delivered []uint64
	same := func(step string, want durable.Outcome, got durable.Outcome, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if w, g := fullDurable(want), fullDurable(got); w != g {
			t.Fatalf("%s:\n store %s\n rules %s", step, g, w)
		}
		for _, d := range got.Deliveries {
			for _, e := range d.Entries {
				if e.Msg != nil {
					delivered = append(delivered, e.Msg.Pos.Offset)
				}
			}
		}
	}
	for step := 0; step < 120; step++ {
		switch k := rng.IntN(16); {
		case q == nil || k < 2:
			if len(bound) >= 3 {
				continue
			}
			conns++
			c := durable.Conn{ID: fmt.Sprintf("c%d", conns), Node: fmt.Sprintf("n%d", 1+conns%2)}
			b, err := s.Bind(ctx, key, def, c, now)
			if q == nil {
				q = durable.NewQueue(def, lim, now)
			}
			bound = append(bound, c.ID)
			same("bind "+c.ID, q.Bind(c, now), b.Outcome, err)
		case k < 3:
			if len(bound) == 0 {
				continue
			}
			id := bound[rng.IntN(len(bound))]
			bound = slices.DeleteFunc(bound, func(c string) bool { return c == id })
			o, err := s.Unbind(ctx, key, id, now)
			same("unbind "+id, q.Unbind(id, now), o, err)
		case k < 7:
			var ents []durable.Entry
			for n := rng.IntN(4); n >= 0; n-- {
				next++
				e := durableEntry(next)
				if rng.IntN(3) == 0 {
					e.Msg.Event = "post"
				}
				e.Msg.Data = []byte(fmt.Sprintf(`"%s"`, strings.Repeat("x", rng.IntN(300))))
				ents = append(ents, e)
			}
			if rng.IntN(5) == 0 {
				// A gap the hub reported, between publications.
				next += 2
				g := &stream.Gap{First: stream.ChannelPosition("e1", next-1), Last: stream.ChannelPosition("e1", next), Lost: 2, Reason: stream.ReasonUpstreamGap}
				ents = append(ents, durable.Entry{Gap: g})
			}
			if rng.IntN(4) == 0 {
				ents = append(ents, ents[0]) // again: appends are idempotent
			}
			o, err := s.Append(ctx, key, ents, now)
			same("append", q.Append(ents, now), o, err)
		case k < 11:
			if len(bound) == 0 {
				continue
			}
			id := bound[rng.IntN(len(bound))]
			off := uint64(1 + rng.IntN(int(next)+1))
			if len(delivered) > 0 && rng.IntN(3) > 0 {
				off = delivered[rng.IntN(len(delivered))]
			}
			pos := stream.ChannelPosition("e1", off)
			wr, wo := q.Ack(id, pos, now)
			gr, gotO, err := s.Ack(ctx, key, id, pos, now)
			if gr != wr {
				t.Fatalf("ack %d by %s: store %s, rules %s", off, id, gr, wr)
			}
			same(fmt.Sprintf("ack %d by %s", off, id), wo, gotO, err)
		case k < 13:
			var ids []string
			for _, id := range bound {
				if rng.IntN(4) > 0 {
					ids = append(ids, id)
				}
			}
			if err := s.Touch(ctx, key, ids, now); err != nil {
				t.Fatal(err)
			}
			q.Touch(ids, now)
		default:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			want := q.Expire(now)
			for _, c := range slices.Clone(bound) {
				if !slices.ContainsFunc(q.Conns(), func(x durable.Conn) bool { return x.ID == c }) {
					bound = slices.DeleteFunc(bound, func(x string) bool { return x == c })
				}
			}
			o, err := s.Expire(ctx, key, now)
			same("expire", want, o, err)
		}
	}
}
