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

	sweep := func(t *testing.T, s presence.Store, ch, node string, now time.Time) presence.Lease {
		t.Helper()
		l, err := s.Sweep(ctx, ch, node, now, ttl)
		if err != nil {
			t.Fatalf("Sweep(%s, %s): %v", ch, node, err)
		}
		return l
	}
	ids := func(ms []presence.Member) []string {
		out := []string{}
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	leaseIs := func(t *testing.T, what string, got presence.Lease, leader string, leads bool) {
		t.Helper()
		if got.Leader != leader || got.Leads != leads {
			t.Fatalf("%s: leader %q, leads %v; want %q, %v", what, got.Leader, got.Leads, leader, leads)
		}
	}

	t.Run("SweepElectsTheSmallestLiveClaimant", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		leaseIs(t, "n2 alone", sweep(t, s, "room", "n2", t0), "n2", true)
		leaseIs(t, "n1 beside n2", sweep(t, s, "room", "n1", t0), "n1", true)
		leaseIs(t, "n2 beside n1", sweep(t, s, "room", "n2", t0.Add(time.Second)), "n1", false)
		// Ids compare byte by byte: "n10" < "n2", and upper case before lower.
		leaseIs(t, "N3 beside n1", sweep(t, s, "room", "N3", t0.Add(time.Second)), "N3", true)
		leaseIs(t, "n10 beside N3", sweep(t, s, "room", "n10", t0.Add(2*time.Second)), "N3", false)
		// N3 and n1 stop claiming; their claims lapse a TTL after their last, and the smallest
		// claimant still live leads.
		leaseIs(t, "n2 once n1 and N3 lapsed", sweep(t, s, "room", "n2", t0.Add(ttl+time.Second)), "n10", false)
		leaseIs(t, "n10 once n1 and N3 lapsed", sweep(t, s, "room", "n10", t0.Add(ttl+time.Second)), "n10", true)
		// Another channel's lease is its own.
		leaseIs(t, "n2 in another channel", sweep(t, s, "hall", "n2", t0), "n2", true)
	})

	t.Run("OnlyTheLeaderExpires", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		track(t, s, "room", mem("b", `{"k":1}`), t0.Add(5*time.Second), 4)
		sweep(t, s, "room", "n1", t0.Add(5*time.Second))
		at := t0.Add(ttl) // a is due, b is not; n1's claim is live
		if l := sweep(t, s, "room", "n2", at); l.Leads || len(l.Left) != 0 || l.Prior != nil {
			t.Fatalf("a follower's sweep = %+v; want no lead, nothing removed, no prior", l)
		}
		if left, err := s.Expire(ctx, at); err != nil || len(left) != 0 {
			t.Fatalf("Expire of a claimed channel = %v, %v; want nothing (its leader sweeps it)", left, err)
		}
		l := sweep(t, s, "room", "n1", at)
		if d := cmp.Diff([]string{"a"}, ids(l.Left)); d != "" || !l.Leads {
			t.Fatalf("the leader's sweep removed (-want +got):\n%s (leads %v)", d, l.Leads)
		}
		if l.Left[0].Subject != "s-a" {
			t.Fatalf("a removed member %+v; want its subject", l.Left[0])
		}
		if l := sweep(t, s, "room", "n1", at); len(l.Left) != 0 {
			t.Fatalf("a second sweep at the same time removed %v; want none (each leaves once)", ids(l.Left))
		}
		if got := members(t, s, "room", at); len(got) != 1 || got[0].ID != "b" {
			t.Fatalf("members after the sweep = %v; want b", got)
		}
	})

	t.Run("LeaseCarriesTheRoster", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("b", `{"k":1}`), t0, 4)
		track(t, s, "room", mem("a", ""), t0, 4)
		// n2 claims first and leads: n1 has not claimed yet.
		if l := sweep(t, s, "room", "n2", t0); !l.Leads || l.Prior != nil {
			t.Fatalf("the first claim = %+v; want it to lead, with no prior roster", l)
		}
		// n1 now leads, but has not swept: its lease carries nothing yet.
		leaseIs(t, "n1", sweep(t, s, "room", "n1", t0), "n1", true)
		l := sweep(t, s, "room", "n2", t0)
		want := []presence.Member{{ID: "a", Subject: "s-a"}, {ID: "b", Subject: "s-b"}}
		if d := cmp.Diff(want, l.Roster); d != "" || l.Leads {
			t.Fatalf("the roster a follower reads (-want +got), no meta:\n%s", d)
		}
		if _, _, err := s.Untrack(ctx, "room", "b"); err != nil {
			t.Fatal(err)
		}
		if l := sweep(t, s, "room", "n1", t0); !cmp.Equal(want[:1], l.Roster) {
			t.Fatalf("the leader's roster after b left = %v; want a", l.Roster)
		}
		if l := sweep(t, s, "room", "n2", t0); !cmp.Equal(want[:1], l.Roster) {
			t.Fatalf("the follower's roster after b left = %v; want a", l.Roster)
		}
		// Everyone leaves: an empty roster, which is not none.
		if _, _, err := s.Untrack(ctx, "room", "a"); err != nil {
			t.Fatal(err)
		}
		sweep(t, s, "room", "n1", t0)
		if l := sweep(t, s, "room", "n2", t0); l.Roster == nil || len(l.Roster) != 0 {
			t.Fatalf("the roster of an empty channel = %#v; want empty, not nil", l.Roster)
		}
	})

	t.Run("TakeoverCarriesThePriorRoster", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		track(t, s, "room", mem("b", ""), t0, 4)
		sweep(t, s, "room", "n2", t0)
		sweep(t, s, "room", "n1", t0) // n1 leads and writes a, b
		// b leaves and its leave is lost (the node that made it died before relaying it); n1
		// stops sweeping.
		if _, _, err := s.Untrack(ctx, "room", "b"); err != nil {
			t.Fatal(err)
		}
		track(t, s, "room", mem("a", ""), t0.Add(ttl/2), 4)
		track(t, s, "room", mem("c", ""), t0.Add(ttl/2), 4)
		l := sweep(t, s, "room", "n2", t0.Add(ttl))
		if !l.Leads {
			t.Fatalf("n2 once n1's claim lapsed: %+v; want it to lead", l)
		}
		if d := cmp.Diff([]string{"a", "b"}, ids(l.Prior)); d != "" {
			t.Fatalf("prior roster (-want +got):\n%s", d)
		}
		if d := cmp.Diff([]string{"a", "c"}, ids(l.Roster)); d != "" {
			t.Fatalf("new roster (-want +got):\n%s", d)
		}
		if l := sweep(t, s, "room", "n2", t0.Add(ttl)); l.Prior != nil {
			t.Fatalf("the next sweep of the same leader: prior %v; want none (no takeover)", ids(l.Prior))
		}
	})

	t.Run("ReleaseHandsOver", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		sweep(t, s, "room", "n1", t0)
		sweep(t, s, "room", "n2", t0)
		track(t, s, "room", mem("b", ""), t0, 4)
		// n1 lets go: its roster is written again first, so it names b, which joined after n1's
		// last sweep.
		if err := s.Release(ctx, "room", "n1", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		l := sweep(t, s, "room", "n2", t0.Add(time.Second))
		if !l.Leads || !cmp.Equal([]string{"a", "b"}, ids(l.Prior)) {
			t.Fatalf("n2 after n1 released = leads %v, prior %v; want it to lead at once, prior a, b", l.Leads, ids(l.Prior))
		}
		if err := s.Release(ctx, "room", "nobody", t0); err != nil {
			t.Fatalf("releasing a claim never made: %v", err)
		}
		if err := s.Release(ctx, "hall", "n1", t0); err != nil {
			t.Fatalf("releasing in a channel nobody is in: %v", err)
		}
	})

	t.Run("RosterIsCapped", func(t *testing.T) {
		s := newStore(t)
		n := presence.RosterLimit + 2
		// Tracked from 8 goroutines, last id first: on Redis, one round trip each.
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += 8 {
					if _, err := s.Track(ctx, "big", mem(fmt.Sprintf("m%05d", n-1-i), ""), t0, ttl, n); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sweep(t, s, "big", "n1", t0)
		l := sweep(t, s, "big", "n2", t0)
		if len(l.Roster) != presence.RosterLimit || l.Roster[0].ID != "m00000" || l.Roster[presence.RosterLimit-1].ID != fmt.Sprintf("m%05d", presence.RosterLimit-1) {
			t.Fatalf("a roster of %d members: %d, from %v; want the first %d ids in order", n, len(l.Roster), l.Roster[:1], presence.RosterLimit)
		}
	})

	t.Run("ExpireTakesUnclaimedChannels", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		track(t, s, "hall", mem("b", ""), t0, 4)
		sweep(t, s, "room", "n1", t0)
		// At ttl, n1's claim and both members are due: nobody claims either channel live.
		left, err := s.Expire(ctx, t0.Add(ttl))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, l := range left {
			got[l.Member.ID] = l.Channel
		}
		if d := cmp.Diff(map[string]string{"a": "room", "b": "hall"}, got); d != "" {
			t.Fatalf("expired (-want +got):\n%s", d)
		}
		forgotten(t, s)
	})

	t.Run("ForgottenWithTheLastClaim", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		sweep(t, s, "room", "n1", t0)
		sweep(t, s, "room", "n2", t0)
		if _, _, err := s.Untrack(ctx, "room", "a"); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"n2", "n1"} {
			if err := s.Release(ctx, "room", n, t0); err != nil {
				t.Fatal(err)
			}
		}
		forgotten(t, s)
		// A claim on a channel nobody is in, never released: forgotten once it lapsed and a
		// sweep met it.
		sweep(t, s, "hall", "n1", t0)
		if _, err := s.Expire(ctx, t0.Add(ttl)); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "hall", "n2", t0.Add(ttl)); err != nil {
			t.Fatal(err)
		}
		forgotten(t, s)
	})

	t.Run("ConcurrentClaimsAgree", func(t *testing.T) {
		s := newStore(t)
		track(t, s, "room", mem("a", ""), t0, 4)
		const nodes = 8
		var wg sync.WaitGroup
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Sweep(ctx, "room", fmt.Sprint("n", i), t0, ttl); err != nil {
					t.Errorf("Sweep: %v", err)
				}
			}()
		}
		wg.Wait()
		leaders := 0
		for i := range nodes {
			l := sweep(t, s, "room", fmt.Sprint("n", i), t0)
			if l.Leader != "n0" {
				t.Errorf("n%d sees leader %q; want n0", i, l.Leader)
			}
			if l.Leads {
				leaders++
			}
		}
		if leaders != 1 {
			t.Fatalf("%d nodes lead; want 1", leaders)
		}
	})
}
