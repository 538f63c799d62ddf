package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var timeNow = time.Unix(1_712_345_679, 0)

func TestBuckets(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 127, 128, 129, 130, 255, 256, 1000, 1 << 20, 1<<20 + 12345, 1 << 35, 1<<37 - 1} {
		b := bucketOf(v)
		if b < prev {
			t.Errorf("bucketOf(%d) = %d, below the bucket of a smaller value (%d)", v, b, prev)
		}
		prev = b
		high := bucketHigh(b)
		if high < v {
			t.Errorf("bucketHigh(bucketOf(%d)) = %d, below the value", v, high)
		}
		if b > 0 {
			if low := bucketHigh(b-1) + 1; low > v {
				t.Errorf("bucket %d starts at %d, above %d", b, low, v)
			} else if v >= histLinear && float64(high-low+1)/float64(low) > 1.0/64+1e-9 {
				t.Errorf("bucket %d is [%d, %d]: wider than 1/64 of its values", b, low, high)
			}
		}
	}
	if b := bucketOf(1 << 60); b != histBuckets-1 {
		t.Errorf("a huge value lands in bucket %d, want the last", b)
	}
}

func TestQuantiles(t *testing.T) {
	var h histogram
	r := rand.New(rand.NewPCG(1, 2))
	var vals []time.Duration
	for i := 0; i < 100000; i++ {
		d := time.Duration(r.ExpFloat64()*2000) * time.Microsecond // mean 2 ms
		vals = append(vals, d)
		h.record(d)
	}
	h.record(-time.Second) // a clock step: counts as 0
	vals = append(vals, 0)
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.95, 0.99, 1} {
		exact := vals[int(q*float64(len(vals)-1))]
		got := h.quantile(q)
		if got < exact-time.Microsecond || float64(got) > float64(exact)*(1+1.0/64)+float64(time.Microsecond) {
			t.Errorf("quantile %.2f = %v, exact %v: off by more than a bucket", q, got, exact)
		}
	}
	if h.quantile(1) != time.Duration(h.max.Load())*time.Microsecond {
		t.Errorf("quantile 1 = %v, max %dµs", h.quantile(1), h.max.Load())
	}
	var empty histogram
	if empty.quantile(0.5) != 0 || empty.mean() != 0 {
		t.Error("an empty histogram has a quantile or a mean")
	}
}
