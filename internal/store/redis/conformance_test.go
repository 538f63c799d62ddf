package redis

import (
	"testing"

	"github.com/heraldrt/herald/internal/channel"
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

func TestPresenceConformance(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		storetest.RunPresence(t, func(t *testing.T) presence.Store { return NewPresence(dial(t, url)) })
	})
}
