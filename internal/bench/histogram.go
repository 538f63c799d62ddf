package bench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram counts latencies in microseconds in log-linear buckets: exact below 128 µs, then 64
// buckets per power of two, so a bucket is at most 1/64 (1.6%) wide relative to its values.
// Every subscriber records into one histogram with atomic adds: no lock, and 2,048 buckets
// (16 KiB) whatever the subscriber count. Safe for concurrent use.
type histogram struct {
	counts [histBuckets]atomic.Uint64
	max    atomic.Int64 // µs
	sum    atomic.Int64 // µs, for the mean
	n      atomic.Int64
}

const (
	histSubBits = 6
	histLinear  = 2 << histSubBits // 128: values below are their own bucket
	histBuckets = 2048             // reaches 2^36 µs, 19 hours; longer goes in the last bucket
)

// bucketOf returns the bucket of v µs.
func bucketOf(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(v) - (histSubBits + 1) // v>>shift is in [64, 128)
	b := histLinear + (shift-1)<<histSubBits + int(v>>shift) - 1<<histSubBits
	if b >= histBuckets {
		return histBuckets - 1
	}
	return b
}

// bucketHigh returns the largest value of bucket b.
func bucketHigh(b int) uint64 {
	if b < histLinear {
		return uint64(b)
	}
	shift := (b-histLinear)>>histSubBits + 1
	m := uint64((b-histLinear)&(1<<histSubBits-1) + 1<<histSubBits)
	return (m+1)<<shift - 1
}

// record adds one latency. A negative one (a clock step) counts as zero.
func (h *histogram) record(d time.Duration) {
	us := d.Microseconds()
	if us < 0 {
		us = 0
	}
	h.counts[bucketOf(uint64(us))].Add(1)
	h.sum.Add(us)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if us <= m || h.max.CompareAndSwap(m, us) {
			return
		}
	}
}

// quantile returns the latency q (0 to 1) of the recorded ones are at or below: the top of its
// bucket, never more than the maximum.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for b := range h.counts {
		seen += h.counts[b].Load()
		if seen >= rank {
			v := int64(bucketHigh(b))
			if m := h.max.Load(); v > m {
				v = m
			}
			return time.Duration(v) * time.Microsecond
		}
	}
	return time.Duration(h.max.Load()) * time.Microsecond
}

func (h *histogram) mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load()/n) * time.Microsecond
}

// latency summarises the histogram in milliseconds.
func (h *histogram) latency() *Latency {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return &Latency{P50: ms(h.quantile(0.50)), P95: ms(h.quantile(0.95)), P99: ms(h.quantile(0.99)),
		Max: ms(time.Duration(h.max.Load()) * time.Microsecond), Mean: ms(h.mean())}
}
