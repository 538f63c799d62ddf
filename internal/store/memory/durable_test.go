package memory_test

import (
	"testing"

	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/store/storetest"
)

func TestDurableConformance(t *testing.T) {
	storetest.RunDurable(t, func(_ *testing.T, lim durable.Limits) durable.Store { return memory.NewDurable(lim) })
}
