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
