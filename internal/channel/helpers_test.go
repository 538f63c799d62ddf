package channel

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// got is one Deliver call as a recorder saw it.
type got struct {
	Sub     string
	Channel string
	Event   string
	Pos     wire.Position
}

// recorder is a Subscriber that keeps everything delivered to it.
type recorder struct {
	mu  sync.Mutex
	got []got
}

func (r *recorder) Push(sub string, it *stream.Item) {
	m := it.Message
	r.mu.Lock()
	r.got = append(r.got, got{Sub: sub, Channel: m.Channel, Event: m.Event, Pos: m.Pos})
	r.mu.Unlock()
}

// testHub returns a hub on a memory bus, its broker handing out epochs from newEpoch (nil: the
// default) and offsets up to maxOffset (0: the default) and keeping no history, closed when
// the test ends. historyHub makes one with a history.
func testHub(t testing.TB, newEpoch func() string, maxOffset uint64) *Hub {
	h, err := New(Config{Bus: bus.NewMemory(), Broker: NewMemoryBroker(MemoryBrokerConfig{NewEpoch: newEpoch, MaxOffset: maxOffset,
		History: HistoryConfig{Size: -1}})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// flush waits until everything published so far has been handed to the bus.
func flush(t testing.TB, h *Hub) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// take returns what was delivered since the last take.
func (r *recorder) take() []got {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

// counterEpochs returns a Config.NewEpoch that hands out "e1", "e2", ... so tests can name
// the epochs they expect.
func counterEpochs() func() string {
	var n atomic.Uint64
	return func() string { return "e" + strconv.FormatUint(n.Add(1), 10) }
}

func mustPattern(t testing.TB, glob, event string) Pattern {
	t.Helper()
	p, err := ParsePattern(glob, event)
	if err != nil {
		t.Fatalf("ParsePattern(%q, %q): %v", glob, event, err)
	}
	return p
}

func mustPublish(t testing.TB, h *Hub, channel, event, data string) wire.Position {
	t.Helper()
	pos, err := h.Publish(channel, event, []byte(data))
	if err != nil {
		t.Fatalf("Publish(%q, %q): %v", channel, event, err)
	}
	// The fan-out is asynchronous: what the test reads next should include this publication.
	flush(t, h)
	return pos
}

// bruteMatch is the reference matcher the hub is checked against: it splits both sides and
// tries every way "**" can take one or more segments, wherever it stands. It shares no code
// with Pattern.
func bruteMatch(glob, eventFilter, name, event string) bool {
	if eventFilter != "" && eventFilter != event {
		return false
	}
	g, n := strings.Split(glob, "/"), strings.Split(name, "/")
	var match func(i, j int) bool
	match = func(i, j int) bool {
		if i == len(g) {
			return j == len(n)
		}
		if j == len(n) {
			return false
		}
		switch g[i] {
		case "**":
			return match(i+1, j+1) || match(i, j+1)
		case "*":
			return match(i+1, j+1)
		}
		return g[i] == n[j] && match(i+1, j+1)
	}
	return match(0, 0)
}
