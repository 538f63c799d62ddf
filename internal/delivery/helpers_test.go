package delivery

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// encodeMarker is the test stand-in for the wire package's encoder. It appends by hand so the
// benchmarks measure the lanes, not fmt.
func encodeMarker(dst []byte, m Marker) []byte {
	dst = append(dst, "marker "...)
	dst = append(dst, m.Key...)
	dst = append(dst, ' ')
	dst = append(dst, m.Reason...)
	dst = append(dst, ' ')
	dst = append(dst, m.First...)
	dst = append(dst, ".."...)
	dst = append(dst, m.Last...)
	dst = append(dst, ' ')
	return strconv.AppendUint(dst, m.Lost, 10)
}

func newLanes(t testing.TB, cfg Config) *Lanes {
	t.Helper()
	if cfg.EncodeMarker == nil {
		cfg.EncodeMarker = encodeMarker
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// frame returns a data frame for key at pos whose wire size is size (at least 1: a one-byte
// head).
func frame(key, pos string, size int) Frame {
	return Frame{Head: []byte("h"), Body: make([]byte, max(size-1, 0)), Key: key, Pos: pos}
}

// render writes an item the way the rule tests spell their expectations:
// "c:<body>", "m:<key> <reason> <first>..<last> <lost>", "d:<key>@<pos>".
func render(it Item) string {
	switch it.Kind {
	case KindControl:
		return "c:" + string(it.Body)
	case KindMarker:
		return "m:" + strings.TrimPrefix(string(it.Body), "marker ")
	case KindData:
		return "d:" + it.Key + "@" + it.Pos
	}
	return "?"
}

// clock is an injected clock that moves only when told to.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
