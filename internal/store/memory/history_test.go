package memory_test

import (
	"testing"

	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/store/storetest"
)

func TestHistoryConformance(t *testing.T) {
	t.Parallel()
	storetest.RunHistory(t, func(t *testing.T, cfg history.Config) history.Store {
		s, err := memory.NewHistory(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
