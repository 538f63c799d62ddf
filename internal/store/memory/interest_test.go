package memory_test

import (
	"testing"

	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/store/storetest"
)

func TestInterestConformance(t *testing.T) {
	t.Parallel()
	storetest.RunInterest(t, func(t *testing.T, cfg interest.Config) interest.Store {
		s, err := memory.NewInterest(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
