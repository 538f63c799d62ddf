package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/presence"
)

// TestPresenceLeavesNoKeys: a channel whose members all left, by Untrack, by a heartbeat too
// late or by Expire, holds no key, and its shard's index forgets it; while members are there,
// the channel's keys carry a TTL (the backstop).
func TestPresenceLeavesNoKeys(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		s := NewPresence(c)
		now := time.Now()
		const ttl = 10 * time.Second
		for _, ch := range []string{"a", "b", "c"} {
			if _, err := s.Track(ctx, ch, presence.Member{ID: "m1", Subject: "x"}, now, ttl, 4); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range keysUnder(t, ctx, c) {
			if k == s.channelKeys("a")[0] || k == s.channelKeys("b")[0] || k == s.channelKeys("c")[0] {
				continue // an index lives as long as its shard has channels
			}
			ms, err := c.rc.Do(ctx, c.rc.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil || ms <= 0 || ms > 2*ttl.Milliseconds() {
				t.Errorf("PTTL %s = %d, %v; want in (0, %d]", k, ms, err, 2*ttl.Milliseconds())
			}
		}
		if _, ok, err := s.Untrack(ctx, "a", "m1"); !ok || err != nil {
			t.Fatalf("Untrack = %v, %v", ok, err)
		}
		if ok, err := s.Touch(ctx, "b", "m1", now.Add(ttl), ttl); ok || err != nil {
			t.Fatalf("late Touch = %v, %v; want false", ok, err)
		}
		if left, err := s.Expire(ctx, now.Add(ttl)); len(left) != 1 || err != nil {
			t.Fatalf("Expire = %v, %v; want c's member", left, err)
		}
		if keys := keysUnder(t, ctx, c); len(keys) != 0 {
			t.Fatalf("keys after everyone left: %q", keys)
		}
	})
}

// TestPresenceExpireSweepsEveryChannel: a shard with more channels due than one script sweeps
// is swept to the end in one Expire, past more claimed channels than one script looks at,
// which stay.
func TestPresenceExpireSweepsEveryChannel(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := NewPresence(dial(t, url))
		now := time.Now()
		var claimed, same []string // channels of one shard: the claimed ones fall due first
		for i := 0; len(same) < 2*expireBatch+3; i++ {
			ch := fmt.Sprint("ch", i)
			switch {
			case presenceShard(ch) != 0:
			case len(claimed) < expireBatch+5:
				claimed = append(claimed, ch)
			default:
				same = append(same, ch)
			}
		}
		for _, ch := range claimed {
			if _, err := s.Track(ctx, ch, presence.Member{ID: "m"}, now.Add(-time.Millisecond), time.Second, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Sweep(ctx, ch, "n1", now, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for _, ch := range append(same, "elsewhere") {
			if _, err := s.Track(ctx, ch, presence.Member{ID: "m"}, now, time.Second, 1); err != nil {
				t.Fatal(err)
			}
		}
		left, err := s.Expire(ctx, now.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != len(same)+1 {
			t.Fatalf("Expire returned %d members; want %d", len(left), len(same)+1)
		}
		if n := s.Channels(); n != len(claimed) {
			t.Fatalf("%d channels after Expire; want the %d claimed ones", n, len(claimed))
		}
		// Their claims lapsed: the next Expire takes them.
		left, err = s.Expire(ctx, now.Add(time.Minute))
		if err != nil || len(left) != len(claimed) {
			t.Fatalf("Expire after the claims lapsed = %d members, %v; want %d", len(left), err, len(claimed))
		}
		if n := s.Channels(); n != 0 {
			t.Fatalf("%d channels after Expire; want 0", n)
		}
		if keys := keysUnder(t, ctx, s.c); len(keys) != 0 {
			t.Fatalf("keys after everyone left: %q", keys)
		}
	})
}

// TestPresenceLeaseKeys: a lease carries a TTL while it is claimed, and is deleted with its last
// claim, members or not.
func TestPresenceLeaseKeys(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		s := NewPresence(c)
		now := time.Now()
		const ttl = 10 * time.Second
		if _, err := s.Track(ctx, "room", presence.Member{ID: "m1"}, now, ttl, 4); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"n1", "n2"} {
			if _, err := s.Sweep(ctx, "room", n, now, ttl); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Sweep(ctx, "empty", "n1", now, ttl); err != nil {
			t.Fatal(err)
		}
		for _, ch := range []string{"room", "empty"} {
			ms, err := c.rc.Do(ctx, c.rc.B().Pttl().Key(s.leaseKey(ch)).Build()).AsInt64()
			if err != nil || ms <= 0 || ms > 2*ttl.Milliseconds() {
				t.Errorf("PTTL of %s's lease = %d, %v; want in (0, %d]", ch, ms, err, 2*ttl.Milliseconds())
			}
		}
		if _, _, err := s.Untrack(ctx, "room", "m1"); err != nil {
			t.Fatal(err)
		}
		for _, r := range []struct{ ch, node string }{{"room", "n1"}, {"room", "n2"}, {"empty", "n1"}} {
			if err := s.Release(ctx, r.ch, r.node, now); err != nil {
				t.Fatal(err)
			}
		}
		if keys := keysUnder(t, ctx, c); len(keys) != 0 {
			t.Fatalf("keys after every claim was released: %q", keys)
		}
	})
}

func TestRosterEncoding(t *testing.T) {
	for _, v := range []string{"1:a", "2:ab1:", "x", "3:ab", "1:a-1:"} {
		if _, err := decodeRoster(v); err == nil {
			t.Errorf("decodeRoster(%q) succeeded; want an error", v)
		}
	}
	got, err := decodeRoster("1:b0:3:a/x1:a")
	want := []presence.Member{{ID: "a/x", Subject: "a"}, {ID: "b"}}
	if d := cmp.Diff(want, got); err != nil || d != "" {
		t.Fatalf("decodeRoster = %+v, %v; want %+v, ordered by id", got, err, want)
	}
	if got, err := decodeRoster(""); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("decodeRoster(\"\") = %#v, %v; want empty, not nil", got, err)
	}
}

// TestPresenceCapAcrossNodes: tracks from several clients (nodes) at once never pass the cap.
func TestPresenceCapAcrossNodes(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		first := dial(t, url)
		const nodes, perNode, max = 4, 15, 7
		stores := []*Presence{NewPresence(first)}
		for range nodes - 1 {
			c, err := Dial(ctx, Config{URL: url, Prefix: first.Prefix()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			stores = append(stores, NewPresence(c))
		}
		now := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		joined := 0
		for n, s := range stores {
			for i := range perNode {
				wg.Add(1)
				go func() {
					defer wg.Done()
					j, err := s.Track(ctx, "room", presence.Member{ID: fmt.Sprint(n, "-", i)}, now, time.Minute, max)
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
		}
		wg.Wait()
		ms, err := stores[0].Members(ctx, "room", now)
		if err != nil {
			t.Fatal(err)
		}
		if joined != max || len(ms) != max {
			t.Fatalf("%d joined, %d members of a channel of %d; want %d", joined, len(ms), max, max)
		}
	})
}

func TestMemberEncoding(t *testing.T) {
	for _, m := range []presence.Member{
		{ID: "a"},
		{ID: "b", Subject: "x:y\x00z", Meta: []byte(`{"k":"v"}`)},
		{ID: "c", Subject: "12:", Meta: []byte(`1`)},
	} {
		got, err := decodeMember(m.ID, encodeMember(m))
		if err != nil || got.Subject != m.Subject || string(got.Meta) != string(m.Meta) || (m.Meta == nil) != (got.Meta == nil) {
			t.Errorf("round trip of %+v = %+v, %v", m, got, err)
		}
	}
	for _, v := range []string{"", "x", "5:ab", "-1:"} {
		if _, err := decodeMember("a", v); err == nil {
			t.Errorf("decodeMember(%q) succeeded; want an error", v)
		}
	}
}

// TestPresenceLargeChannel: a channel of more members than Lua's stack holds (about 8000)
// reads and expires whole.
func TestPresenceLargeChannel(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := NewPresence(dial(t, url))
		const n = 10000
		now := time.Now()
		execs := make([]rueidis.LuaExec, n)
		for i := range execs {
			m := presence.Member{ID: fmt.Sprintf("m%05d", i)}
			execs[i] = rueidis.LuaExec{
				Keys: s.channelKeys("big"),
				Args: []string{"big", m.ID, encodeMember(m), unixMillis(now), unixMillis(now.Add(time.Minute)), strconv.Itoa(n), keepMillis(time.Minute)},
			}
		}
		for _, r := range s.track.ExecMulti(ctx, s.c.rc, execs...) {
			if j, err := r.AsInt64(); err != nil || j != 1 {
				t.Fatalf("track = %d, %v; want 1", j, err)
			}
		}
		ms, err := s.Members(ctx, "big", now)
		if err != nil || len(ms) != n {
			t.Fatalf("Members = %d members, %v; want %d", len(ms), err, n)
		}
		left, err := s.Expire(ctx, now.Add(time.Minute))
		if err != nil || len(left) != n {
			t.Fatalf("Expire = %d members, %v; want %d", len(left), err, n)
		}
	})
}

// TestPresenceOneCommandEach: each warm presence call is one script call; Expire is one per
// shard.
func TestPresenceOneCommandEach(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		cc := &counting{Client: c.rc}
		s := NewPresence(&Client{rc: cc, prefix: c.prefix, timeout: c.timeout})
		now := time.Now()
		warm := func() { // loads every script
			_, _ = s.Track(ctx, "room", presence.Member{ID: "w"}, now, time.Minute, 4)
			_, _ = s.Touch(ctx, "room", "w", now, time.Minute)
			_, _ = s.Members(ctx, "room", now)
			_, _ = s.Sweep(ctx, "room", "n1", now, time.Minute)
			_ = s.Release(ctx, "room", "n1", now)
			_, _, _ = s.Untrack(ctx, "room", "w")
			_, _ = s.Expire(ctx, now)
		}
		warm()
		for _, call := range []struct {
			name string
			do   func() error
			want int64
		}{
			{"Track", func() error {
				_, err := s.Track(ctx, "room", presence.Member{ID: "a"}, now, time.Minute, 4)
				return err
			}, 1},
			{"Touch", func() error { _, err := s.Touch(ctx, "room", "a", now, time.Minute); return err }, 1},
			{"Members", func() error { _, err := s.Members(ctx, "room", now); return err }, 1},
			{"Sweep", func() error { _, err := s.Sweep(ctx, "room", "n1", now, time.Minute); return err }, 1},
			{"Release", func() error { return s.Release(ctx, "room", "n1", now) }, 1},
			{"Untrack", func() error { _, _, err := s.Untrack(ctx, "room", "a"); return err }, 1},
			{"Expire", func() error { _, err := s.Expire(ctx, now); return err }, PresenceShards},
		} {
			cc.n.Store(0)
			if err := call.do(); err != nil {
				t.Fatalf("%s: %v", call.name, err)
			}
			if got := cc.n.Load(); got != call.want {
				t.Errorf("a warm %s sent %d commands, want %d", call.name, got, call.want)
			}
		}
	})
}
