package redis

import (
	"testing"

	"github.com/heraldrt/herald/internal/interest"
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
