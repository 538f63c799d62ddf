package channel_test

import (
	"testing"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/store/storetest"
)

func TestMemoryBrokerConformance(t *testing.T) {
	storetest.RunBroker(t, func(t *testing.T, maxOffset uint64) channel.Broker {
		return channel.NewMemoryBroker(channel.MemoryBrokerConfig{MaxOffset: maxOffset})
	})
}

func TestMemoryHistoryConformance(t *testing.T) {
	storetest.RunChannelHistory(t, func(t *testing.T, cfg channel.HistoryConfig) channel.History {
		return channel.NewMemoryBroker(channel.MemoryBrokerConfig{History: cfg})
	})
}
