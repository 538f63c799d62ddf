package memory_test

import (
	"testing"

	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/store/storetest"
)

func BenchmarkInterest(b *testing.B) {
	s, err := memory.NewInterest(interest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchInterest(b, s)
}
