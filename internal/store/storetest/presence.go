package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/presence"
)

// NewPresence returns a fresh, empty presence store, sharing nothing with other subtests'.
type NewPresence func(t *testing.T) presence.Store

// ChannelCounter is what a store may implement for the suite to check that a channel nobody is
// in is forgotten: how many channels it holds anything for.
type ChannelCounter interface{ Channels() int }

// RunPresence runs the presence.Store conformance suite. Every subtest passes its own clock,
// so none sleeps.
func RunPresence(t *testing.T, newStore NewPresence) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const ttl = 10 * time.Second
	ctx := context.Background()
	mem := func(id, meta string) presence.Member {
		m := presence.Member{ID: id, Subject: "s-" + id}
		if meta != "" {
			m.Meta = json.RawMessage(meta)
		}
		return m
	}
	track := func(t *testing.T, s presence.Store, ch string, m presence.Member, now time.Time, max int) bool {
		t.Helper()
		joined, err := s.Track(ctx, ch, m, now, ttl, max)
		if err != nil {
			t.Fatalf("Track(%s, %s): %v", ch, m.ID, err)
		}
		return joined
	}
	members := func(t *testing.T, s presence.Store, ch string, now time.Time) []presence.Member {
		t.Helper()
		ms, err := s.Members(ctx, ch, now)
		if err != nil {
			t.Fatalf("Members(%s): %v", ch, err)
		}
		return ms
	}
	forgotten := func(t *testing.T, s presence.Store) {
		t.Helper()
		if c, ok := s.(ChannelCounter); ok && c.Channels() != 0 {
			t.Fatalf("store holds %d channels after everyone left; want 0", c.Channels())
		}
	}

	t.Run("TrackJoinsThenReplaces", func(t *testing.T) {
		s := newStore(t)
		if !track(t, s, "room", mem("a", `{"n":1}`), t0, 4) {
			t.Fatal("first track: joined false; want true")
		}
		if track(t, s, "room", mem("a", `{"n":2}`), t0.Add(time.Second), 4) {
			t.Fatal("second track of a live member: joined true; want false (it replaces the meta)")
		}
		track(t, s, "room", mem("b", ""), t0, 4)
		got := members(t, s, "room", t0.Add(2*time.Second))
		want := []presence.Member{mem("a", `{"n":2}`), mem("b", "")}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("members (-want +got):\n%s", d)
		}
		if got := members(t, s, "other", t0); len(got) != 0 {
			t.Fatalf("another channel has %v; want none", got)
		}
	})

	t.Run("MetaIsCopied", func(t *testing.T) {
		s := newStore(t)
		meta := []byte(`{"n":1}`)
		track(t, s, "room", presence.Member{ID: "a", Meta: meta}, t0, 4)
		copy(meta, `{"n":9}`)
		if got := string(members(t, s, "room", t0)[0].Meta); got != `{"n":1}` {
			t.Fatalf("meta %s after the caller reused its buffer; want {\"n\":1}", got)
		}
	})

	t.Run("Cap", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 2)
		track(t, s, "room", mem("b", ""), t0, 2)
		if _, err := s.Track(ctx, "room", mem("c", ""), t0, ttl, 2); !errors.Is(err, presence.ErrFull) {
			t.Fatalf("third member of a channel of 2: %v; want ErrFull", err)
		}
		// A member already there may replace its meta at the cap.
		if track(t, s, "room", mem("a", `{"x":1}`), t0, 2) {
			t.Fatal("replacing at the cap: joined true; want false")
		}
		// Another channel has its own cap.
		track(t, s, "hall", mem("c", ""), t0, 2)
		// An expired member frees its place, swept or not.
		track(t, s, "room", mem("b", ""), t0.Add(-ttl+time.Second), 2) // b's deadline: t0+1s
		if !track(t, s, "room", mem("c", ""), t0.Add(2*time.Second), 2) {
			t.Fatal("joining in an expired member's place: joined false; want true")
		}
	})

	t.Run("TouchRenews", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		ok, err := s.Touch(ctx, "room", "a", t0.Add(ttl-time.Second), ttl)
		if err != nil || !ok {
			t.Fatalf("Touch of a live member = %v, %v; want true", ok, err)
		}
		// Renewed: still live after its first deadline, gone after the new one.
		if got := members(t, s, "room", t0.Add(ttl+time.Second)); len(got) != 1 {
			t.Fatalf("members after a renewal = %v; want a", got)
		}
		if got := members(t, s, "room", t0.Add(2*ttl)); len(got) != 0 {
			t.Fatalf("members past the renewed deadline = %v; want none", got)
		}
	})

	t.Run("TouchOfGoneMember", func(t *testing.T) {
		s := newStore(t)
		if ok, err := s.Touch(ctx, "room", "nobody", t0, ttl); err != nil || ok {
			t.Fatalf("Touch of a member never tracked = %v, %v; want false (join again)", ok, err)
		}
		track(t, s, "room", mem("a", ""), t0, 4)
		if ok, err := s.Touch(ctx, "room", "a", t0.Add(ttl), ttl); err != nil || ok {
			t.Fatalf("Touch at the deadline = %v, %v; want false (join again)", ok, err)
		}
		forgotten(t, s)
		// Joining again is a join.
		if !track(t, s, "room", mem("a", ""), t0.Add(ttl), 4) {
			t.Fatal("track after a failed heartbeat: joined false; want true")
		}
	})

	t.Run("Untrack", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", `{"n":1}`), t0, 4)
		m, ok, err := s.Untrack(ctx, "room", "a")
		if err != nil || !ok || m.ID != "a" || string(m.Meta) != `{"n":1}` {
			t.Fatalf("Untrack = %+v, %v, %v; want a, true", m, ok, err)
		}
		if _, ok, err := s.Untrack(ctx, "room", "a"); err != nil || ok {
			t.Fatalf("second Untrack = %v, %v; want false", ok, err)
		}
		forgotten(t, s)
	})

	t.Run("ExpireRemovesAndForgets", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		track(t, s, "room", mem("b", ""), t0.Add(5*time.Second), 4)
		track(t, s, "hall", mem("c", ""), t0, 4)
		left, err := s.Expire(ctx, t0.Add(ttl))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, l := range left {
			got[l.Member.ID] = l.Channel
		}
		if d := cmp.Diff(map[string]string{"a": "room", "c": "hall"}, got); d != "" {
			t.Fatalf("expired (-want +got):\n%s", d)
		}
		if left, _ := s.Expire(ctx, t0.Add(ttl)); len(left) != 0 {
			t.Fatalf("second Expire at the same time = %v; want none (each leaves once)", left)
		}
		if got := members(t, s, "room", t0.Add(ttl)); len(got) != 1 || got[0].ID != "b" {
			t.Fatalf("room after expiry = %v; want b", got)
		}
		if left, _ := s.Expire(ctx, t0.Add(time.Hour)); len(left) != 1 {
			t.Fatalf("expiring b = %v; want b", left)
		}
		forgotten(t, s)
	})

	t.Run("ConcurrentCapHolds", func(t *testing.T) {
		s := newStore(t)
		const max, n = 5, 40
		var wg sync.WaitGroup
		var mu sync.Mutex
		joined := 0
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j, err := s.Track(ctx, "room", mem(fmt.Sprint(i), ""), t0, ttl, max)
				if err != nil && !errors.Is(err, presence.ErrFull) {
					t.Errorf("Track: %v", err)
				}
				if j {
					mu.Lock()
					joined++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if joined != max || len(members(t, s, "room", t0)) != max {
			t.Fatalf("%d of %d concurrent tracks joined a channel of %d, %d members; want %d", joined, n, max, len(members(t, s, "room", t0)), max)
		}
	})
}
