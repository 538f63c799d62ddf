package channel

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/stream"
)

// historyHub returns a hub whose MemoryBroker keeps hist, handing out epochs e1, e2, ...
func historyHub(t testing.TB, hist HistoryConfig) (*Hub, *MemoryBroker) {
	t.Helper()
	b := NewMemoryBroker(MemoryBrokerConfig{NewEpoch: counterEpochs(), History: hist})
	h, err := New(Config{Bus: bus.NewMemory(), Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, b
}

// describe renders items as anyRecorder does: "e1:3", "gap e1:1..e1:2 lost 2 history_expired".
func describe(items []*stream.Item) []string {
	r := &anyRecorder{}
	for _, it := range items {
		r.Push("", it)
	}
	return r.take()
}

// resume subscribes rec to pattern from from until the test ends, and returns where it starts
// and its replay, described.
func resume(t *testing.T, h *Hub, rec *anyRecorder, pattern, event string, from stream.Position) (stream.Position, []string) {
	t.Helper()
	start, unsub, err := h.SubscribeFrom(rec, "r", mustPattern(t, pattern, event), from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsub)
	return start.Pos, describe(start.Replay)
}

func pos(epoch string, off uint64) stream.Position { return stream.ChannelPosition(epoch, off) }

func TestHistoryReplayWindow(t *testing.T) {
	h, _ := historyHub(t, HistoryConfig{Size: 5})
	for i := 1; i <= 10; i++ {
		event := "chat"
		if i%2 == 0 {
			event = "mention"
		}
		mustPublish(t, h, "room", event, fmt.Sprint(i))
	}
	tests := []struct {
		name  string
		from  stream.Position
		event string
		want  []string
	}{
		{"at the head", pos("e1", 10), "", nil},
		{"inside the window", pos("e1", 7), "", []string{"e1:8", "e1:9", "e1:10"}},
		{"at the window's edge", pos("e1", 5), "", []string{"e1:6", "e1:7", "e1:8", "e1:9", "e1:10"}},
		// Beyond it, one gap for the whole range: the lanes would hold back a replay behind it.
		{"beyond the window", pos("e1", 2), "", []string{"gap e1:3..e1:10 lost 8 history_expired"}},
		{"before the first", pos("e1", 0), "", []string{"gap e1:1..e1:10 lost 10 history_expired"}},
		{"event filter inside", pos("e1", 6), "mention", []string{"e1:8", "e1:10"}},
		// With a filter the count of what it would have passed is unknown.
		{"event filter beyond", pos("e1", 1), "chat", []string{"gap e1:2..e1:10 lost 0 history_expired"}},
		{"another epoch", pos("gone", 4), "", []string{"gap ..e1:10 lost 0 stream_reset"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &anyRecorder{}
			start, got := resume(t, h, rec, "room", tt.event, tt.from)
			if start != pos("e1", 10) || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("start %v, replay %q; want e1:10, %q", start, got, tt.want)
			}
			// Live ones follow, after the head.
			mustPublish(t, h, "other", "", "1") // not this channel: nothing
			if got := rec.take(); len(got) != 0 {
				t.Fatalf("live after the replay: %q, want nothing yet", got)
			}
		})
	}
	t.Run("past the head", func(t *testing.T) {
		start, got := resume(t, h, &anyRecorder{}, "room", "", pos("e1", 11))
		if start != pos("e1", 10) || got != nil {
			t.Fatalf("start %v, replay %q; want the head e1:10 before from, and nothing: the caller refuses it", start, got)
		}
	})
	t.Run("a pattern ignores from", func(t *testing.T) {
		start, got := resume(t, h, &anyRecorder{}, "*", "", pos("e1", 3))
		if !start.IsZero() || got != nil {
			t.Fatalf("start %v, replay %q; want zero and nothing", start, got)
		}
	})
}

func TestHistoryOffGivesTheGap(t *testing.T) {
	h, _ := historyHub(t, HistoryConfig{Size: -1})
	rec := &anyRecorder{}
	subscribe(t, h, rec, "keeper", "room", "")
	for range 4 {
		mustPublish(t, h, "room", "", "1")
	}
	for _, tt := range []struct {
		from stream.Position
		want string
	}{
		{pos("e1", 1), "[gap e1:2..e1:4 lost 3 history_expired]"},
		{pos("e0", 1), "[gap ..e1:4 lost 0 stream_reset]"},
		{pos("e1", 4), "[]"},
	} {
		if _, got := resume(t, h, rec, "room", "", tt.from); fmt.Sprint(got) != tt.want {
			t.Errorf("from %v: replay %q, want %s", tt.from, got, tt.want)
		}
	}
}

func TestHistoryBounds(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		h, b := historyHub(t, HistoryConfig{Size: 3})
		for range 10 {
			mustPublish(t, h, "c", "", "1")
		}
		_, items, _ := b.Since("c", pos("e1", 0))
		if got := describe(items); fmt.Sprint(got) != "[e1:8 e1:9 e1:10]" {
			t.Errorf("history %q, want the last three", got)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		// Room for two publications of 100 bytes and their overhead, not three.
		h, b := historyHub(t, HistoryConfig{Bytes: 2*(100+HistoryOverhead) + 50})
		subscribe(t, h, &anyRecorder{}, "keeper", "c", "") // keeps the epoch while the history is empty
		data := `"` + strings.Repeat("x", 98) + `"`
		for range 5 {
			mustPublish(t, h, "c", "", data)
		}
		_, items, _ := b.Since("c", pos("e1", 0))
		if got := describe(items); fmt.Sprint(got) != "[e1:4 e1:5]" {
			t.Errorf("history %q, want the last two", got)
		}
		// One larger than the whole bound is not kept, and takes the rest with it.
		mustPublish(t, h, "c", "", `"`+strings.Repeat("y", 1000)+`"`)
		if _, items, _ := b.Since("c", pos("e1", 0)); len(items) != 0 {
			t.Errorf("history %q, want none", describe(items))
		}
		mustPublish(t, h, "c", "", "1")
		if _, items, _ := b.Since("c", pos("e1", 0)); fmt.Sprint(describe(items)) != "[e1:7]" {
			t.Errorf("history %q, want e1:7", describe(items))
		}
	})
	t.Run("age", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h, b := historyHub(t, HistoryConfig{TTL: time.Minute})
			rec := &anyRecorder{}
			subscribe(t, h, rec, "keeper", "c", "")
			mustPublish(t, h, "c", "", "1")
			time.Sleep(40 * time.Second)
			mustPublish(t, h, "c", "", "2")
			time.Sleep(30 * time.Second) // the first is 70 s old, the second 30 s
			if _, got := resume(t, h, rec, "c", "", pos("e1", 1)); fmt.Sprint(got) != "[e1:2]" {
				t.Errorf("replay from e1:1 %q, want the second, 30 s old", got)
			}
			if _, got := resume(t, h, rec, "c", "", pos("e1", 0)); fmt.Sprint(got) != "[gap e1:1..e1:2 lost 2 history_expired]" {
				t.Errorf("replay from e1:0 %q, want a gap: the first expired", got)
			}
			time.Sleep(31 * time.Second)
			if _, items, _ := b.Since("c", pos("e1", 0)); len(items) != 0 {
				t.Errorf("history %q after the TTL, want none", describe(items))
			}
			// The subscriber still holds the channel: its epoch stays.
			if p := mustPublish(t, h, "c", "", "3"); p != pos("e1", 3) {
				t.Errorf("publish at %v, want e1:3", p)
			}
		})
	})
}

// TestHistoryKeepsTheEpoch: a channel nobody holds any more keeps its stream, epoch and
// history, until its history expires by age; then its memory is given back.
func TestHistoryKeepsTheEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, b := historyHub(t, HistoryConfig{TTL: time.Minute})
		rec := &anyRecorder{}
		_, unsub, _ := h.Subscribe(rec, "s", mustPattern(t, "room", ""))
		mustPublish(t, h, "room", "", "1")
		mustPublish(t, h, "room", "", "2")
		unsub()
		rec.take()
		if s := h.Stats(); s.Channels != 0 || s.Forgotten != 1 {
			t.Fatalf("stats %+v: want the hub's state of the channel forgotten", s)
		}
		// Nobody holds it: a publication nobody receives keeps the epoch too.
		time.Sleep(50 * time.Second)
		if p := mustPublish(t, h, "room", "", "3"); p != pos("e1", 3) {
			t.Fatalf("publish to the unheld channel at %v, want e1:3: its history keeps the epoch", p)
		}
		time.Sleep(50 * time.Second) // 100 s after the first two, 50 s after the third
		if _, got := resume(t, h, &anyRecorder{}, "room", "", pos("e1", 1)); fmt.Sprint(got) != "[gap e1:2..e1:3 lost 2 history_expired]" {
			t.Fatalf("resume from e1:1: replay %q; want a gap, the second having expired", got)
		}
		start, got := resume(t, h, rec, "room", "", pos("e1", 2))
		if start != pos("e1", 3) || fmt.Sprint(got) != "[e1:3]" {
			t.Fatalf("resume from e1:2: start %v, replay %q; want e1:3, the third replayed", start, got)
		}
		mustPublish(t, h, "room", "", "4")
		if got := rec.take(); fmt.Sprint(got) != "[e1:4]" {
			t.Fatalf("live after the replay: %q, want e1:4", got)
		}
		// The resumed subscription goes when the test's cleanup runs; end it now instead.
		h2, b2 := historyHub(t, HistoryConfig{TTL: time.Minute})
		_, unsub2, _ := h2.Subscribe(rec, "s", mustPattern(t, "x", ""))
		mustPublish(t, h2, "x", "", "1")
		unsub2()
		time.Sleep(61 * time.Second)
		start, got = resume(t, h2, rec, "x", "", pos("e1", 1))
		if start != pos("e2", 0) || fmt.Sprint(got) != "[gap ..e2:0 lost 0 stream_reset]" {
			t.Fatalf("resume after the history expired: start %v, replay %q; want a new epoch e2:0 and a stream_reset", start, got)
		}
		_ = b

		// A stream left idle is dropped by a later Forget or Append once its history expired.
		b3 := NewMemoryBroker(MemoryBrokerConfig{History: HistoryConfig{TTL: time.Minute}})
		for i := range 100 {
			name := fmt.Sprint("idle/", i)
			if _, err := b3.Append(name, "", []byte("1")); err != nil {
				t.Fatal(err)
			}
			b3.Forget(name)
		}
		if n := streams(b3); n != 100 {
			t.Fatalf("%d streams, want the 100 idle ones kept", n)
		}
		time.Sleep(61 * time.Second)
		if _, err := b3.Append("busy", "", []byte("1")); err != nil {
			t.Fatal(err)
		}
		if n := streams(b3); n != 1 {
			t.Fatalf("%d streams a TTL later, want only the busy one", n)
		}

		// A channel published to again and again with nobody holding it is queued once, and
		// is kept while it is published to within the TTL.
		for range 1000 {
			if _, err := b3.Append("busy", "", []byte("1")); err != nil {
				t.Fatal(err)
			}
			b3.Forget("busy")
		}
		if n := idleQueued(b3); n != 1 {
			t.Fatalf("%d idle entries for one channel, want 1", n)
		}
		time.Sleep(50 * time.Second)
		mustAppendForget(t, b3, "busy")
		time.Sleep(20 * time.Second) // its entry is due: the channel is still live, and queued again
		mustAppendForget(t, b3, "other")
		if n := streams(b3); n != 2 {
			t.Fatalf("%d streams, want busy, published to 20 s ago, and other", n)
		}
		time.Sleep(2 * time.Minute)
		mustAppendForget(t, b3, "last")
		if n := streams(b3); n != 1 {
			t.Fatalf("%d streams two TTLs after the others' last publications, want only the last", n)
		}
		_, _ = b, b2
	})
}

func mustAppendForget(t *testing.T, b *MemoryBroker, name string) {
	t.Helper()
	if _, err := b.Append(name, "", []byte("1")); err != nil {
		t.Fatal(err)
	}
	b.Forget(name)
}

func streams(b *MemoryBroker) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.streams)
}

func idleQueued(b *MemoryBroker) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.idle) - b.idleFirst
}

// TestResumeHandOffUnderConcurrentPublishes: while publishers publish to a channel without
// pause, subscribers resume from positions they pick among those published so far. Each must
// receive, replay then live, every offset after its from exactly once, in order, with no gap:
// the history is large enough to hold everything.
func TestResumeHandOffUnderConcurrentPublishes(t *testing.T) {
	h, _ := historyHub(t, HistoryConfig{Size: 100_000, Bytes: 1 << 30})
	const publishers, each, resumers = 4, 300, 24
	var last sync.Map // the last position published, by publisher
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				pos, err := h.Publish("room", "", []byte("1"))
				if err != nil {
					t.Error(err)
					return
				}
				last.Store(p, pos)
			}
		}()
	}
	type resumed struct {
		from  stream.Position
		rec   *anyRecorder
		start Start
	}
	rs := make([]resumed, resumers)
	var rwg sync.WaitGroup
	for i := range rs {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			from := pos("e1", 0)
			last.Range(func(_, v any) bool {
				if p := v.(stream.Position); p.Offset > 0 && rand.IntN(2) == 0 {
					from = pos("e1", p.Offset-uint64(rand.IntN(int(p.Offset))))
				}
				return true
			})
			rec := &anyRecorder{}
			start, unsub, err := h.SubscribeFrom(rec, "r", mustPattern(t, "room", ""), from)
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(unsub)
			rs[i] = resumed{from: from, rec: rec, start: start}
		}()
	}
	wg.Wait()
	rwg.Wait()
	flush(t, h)
	total := uint64(publishers * each)
	for i, r := range rs {
		got := append(describe(r.start.Replay), r.rec.take()...)
		var want []string
		for off := r.from.Offset + 1; off <= total; off++ {
			want = append(want, pos("e1", off).String())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("subscriber %d resumed from %v (started at %v): got %d items %q, want %d, every offset after from once",
				i, r.from, r.start.Pos, len(got), abbreviate(got), len(want))
		}
	}
}

func abbreviate(s []string) []string {
	if len(s) <= 12 {
		return s
	}
	return append(append(append([]string{}, s[:6]...), "..."), s[len(s)-6:]...)
}

// TestResumeAcrossNodes: two hubs share a history broker, as nodes sharing Redis do. A client
// that received publications on node A resumes on node B, which may trail A by what is on its
// way: it gets what it missed exactly once, from the shared history up to where B starts, and
// live after, and nothing it had already.
func TestResumeAcrossNodes(t *testing.T) {
	t.Run("from behind what B handed on", func(t *testing.T) {
		a, b, ra, _ := twoNodes(t, time.Minute)
		bRec := &anyRecorder{}
		subscribe(t, b, bRec, "keeper", "room", "") // B holds the channel
		for range 5 {
			mustPublish(t, a, "room", "", "1")
		}
		msgs := ra.take()
		deliver(t, b, msgs[:3]...) // B has handed on 1..3; 4 and 5 are on their way
		flush(t, b)
		rec := &anyRecorder{}
		start, got := resume(t, b, rec, "room", "", pos("e1", 1))
		if start != pos("e1", 3) || fmt.Sprint(got) != "[e1:2 e1:3]" {
			t.Fatalf("start %v, replay %q; want B's e1:3 and the history's 2 and 3", start, got)
		}
		deliver(t, b, msgs[3:]...)
		waitFor(t, b, rec, []string{"e1:4", "e1:5"})
	})
	t.Run("from ahead of what B handed on", func(t *testing.T) {
		a, b, ra, _ := twoNodes(t, time.Minute)
		subscribe(t, b, &anyRecorder{}, "keeper", "room", "")
		for range 5 {
			mustPublish(t, a, "room", "", "1")
		}
		msgs := ra.take()
		deliver(t, b, msgs[:2]...)
		flush(t, b)
		rec := &anyRecorder{}
		start, got := resume(t, b, rec, "room", "", pos("e1", 4)) // the client had 1..4 from A
		if start != pos("e1", 4) || got != nil {
			t.Fatalf("start %v, replay %q; want it to start at its from, e1:4, with nothing to replay", start, got)
		}
		deliver(t, b, msgs[2:]...)
		mustPublish(t, a, "room", "", "1")
		deliver(t, b, ra.take()...)
		waitFor(t, b, rec, []string{"e1:5", "e1:6"})
	})
	t.Run("B does not hold the channel", func(t *testing.T) {
		a, b, ra, _ := twoNodes(t, time.Minute)
		subscribe(t, a, &anyRecorder{}, "keeper", "room", "")
		for range 4 {
			mustPublish(t, a, "room", "", "1")
		}
		ra.take() // B had no interest: nothing went to it
		rec := &anyRecorder{}
		start, got := resume(t, b, rec, "room", "", pos("e1", 1))
		if start != pos("e1", 4) || fmt.Sprint(got) != "[e1:2 e1:3 e1:4]" {
			t.Fatalf("start %v, replay %q; want the broker's head e1:4 and 2..4 from the history", start, got)
		}
		mustPublish(t, a, "room", "", "1")
		deliver(t, b, ra.take()...)
		waitFor(t, b, rec, []string{"e1:5"})
	})
}

// TestResumeAfterAnEpochChange: a from of an old epoch gets a stream_reset up to the head.
func TestResumeAfterAnEpochChange(t *testing.T) {
	h := func() *Hub {
		h, err := New(Config{Bus: bus.NewMemory(), Broker: NewMemoryBroker(MemoryBrokerConfig{NewEpoch: counterEpochs(), MaxOffset: 3})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}()
	for range 5 {
		mustPublish(t, h, "c", "", "1") // e1:1..3, e2:1..2
	}
	start, got := resume(t, h, &anyRecorder{}, "c", "", pos("e1", 2))
	if start != pos("e2", 2) || fmt.Sprint(got) != "[gap ..e2:2 lost 0 stream_reset]" {
		t.Fatalf("start %v, replay %q; want e2:2 and a reset up to it", start, got)
	}
}
