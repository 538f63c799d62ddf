package redis

import (
	"context"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/store/storetest"
)

func TestInterestConformance(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunInterest(t, func(t *testing.T, cfg interest.Config) interest.Store {
			s, err := NewInterest(dial(t, url), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func TestBrokerConformance(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunBroker(t, func(t *testing.T, maxOffset uint64) channel.Broker {
			b, err := NewBroker(dial(t, url), BrokerConfig{Node: "n1", MaxOffset: maxOffset})
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	})
}

func TestHistoryConformance(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunHistory(t, func(t *testing.T, cfg history.Config) history.Store {
			s, err := NewHistory(dial(t, url), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func TestChannelHistoryConformance(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunChannelHistory(t, func(t *testing.T, cfg channel.HistoryConfig) channel.History {
			b, err := NewBroker(dial(t, url), BrokerConfig{Node: "n1", History: cfg})
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	})
}

func TestPresenceConformance(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunPresence(t, func(t *testing.T) presence.Store { return NewPresence(dial(t, url)) })
	})
}

// TestPresenceNodes: two nodes' presence over one Redis, each through its own client.
func TestPresenceNodes(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunPresenceNodes(t, func(t *testing.T) (presence.Store, presence.Store) {
			a := dial(t, url)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := Dial(ctx, Config{URL: url, Prefix: a.Prefix()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			return NewPresence(a), NewPresence(b)
		})
	})
}

func TestDurableConformance(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunDurable(t, func(t *testing.T, lim durable.Limits) durable.Store { return NewDurable(dial(t, url), lim) })
	})
}
