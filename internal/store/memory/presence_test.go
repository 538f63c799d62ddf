package memory_test

import (
	"testing"

	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/store/storetest"
)

func TestPresenceConformance(t *testing.T) {
	t.Parallel()
	storetest.RunPresence(t, func(*testing.T) presence.Store { return memory.NewPresence() })
}

func TestPresenceNodes(t *testing.T) {
	t.Parallel()
	storetest.RunPresenceNodes(t, func(*testing.T) (presence.Store, presence.Store) {
		s := memory.NewPresence()
		return s, s
	})
}
