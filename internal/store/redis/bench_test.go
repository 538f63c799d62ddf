package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/store/storetest"
	"github.com/heraldrt/herald/internal/testenv"
)

// BenchmarkInterest measures round trips to the private Redis: one per Watched, one per Add and
// one per Remove. Figures depend on the machine and its load; compare them within one run.
func BenchmarkInterest(b *testing.B) {
	c := dialB(b, testenv.RedisURL(b))
	s, err := NewInterest(c, interest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchInterest(b, s)
}

// BenchmarkPresence measures round trips to the private Redis: a heartbeat (Touch), a read of a
// channel of 64 members (Members), and a sweep of it, as its leader (claim, expiry, roster of
// 64 written) and as a follower (claim, roster read). Compare figures within one run.
func BenchmarkPresence(b *testing.B) {
	ctx := context.Background()
	s := NewPresence(dialB(b, testenv.RedisURL(b)))
	now := time.Now()
	for i := range 64 {
		if _, err := s.Track(ctx, "room", presence.Member{ID: fmt.Sprint(i), Meta: []byte(`{"n":1}`)}, now, time.Hour, 64); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Touch", func(b *testing.B) {
		for b.Loop() {
			if ok, err := s.Touch(ctx, "room", "7", now, time.Hour); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Members64", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Members(ctx, "room", now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SweepLeader64", func(b *testing.B) {
		for b.Loop() {
			if l, err := s.Sweep(ctx, "room", "n1", now, time.Hour); err != nil || !l.Leads || len(l.Roster) != 64 {
				b.Fatal(l, err)
			}
		}
	})
	b.Run("SweepFollower64", func(b *testing.B) {
		for b.Loop() {
			if l, err := s.Sweep(ctx, "room", "n2", now, time.Hour); err != nil || l.Leads || len(l.Roster) != 64 {
				b.Fatal(l, err)
			}
		}
	})
}
