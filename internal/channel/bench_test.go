package channel

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// The benchmarks measure; they never fail on a timing. Run them with
//
//	go test -run '^$' -bench . -benchmem ./internal/channel/
//
// They run the hub as a node does by default: its MemoryBroker keeping each channel's history
// (HistoryConfig's defaults), unless a sub-benchmark says otherwise.

// benchHub returns a hub on a memory bus whose MemoryBroker keeps hist, closed when the
// benchmark ends.
func benchHub(b *testing.B, hist HistoryConfig) *Hub {
	b.Helper()
	h, err := New(Config{Bus: bus.NewMemory(), History: hist})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	return h
}

// laneSub is a subscriber as the session is one: its own delivery.Lanes, and a data head built
// once at subscribe, so each Deliver is one PushData.
type laneSub struct {
	lanes *delivery.Lanes
	head  []byte
}

func (s *laneSub) Push(sub string, it *stream.Item) {
	s.lanes.PushData(delivery.Frame{Head: s.head, Body: it.Encoded(wire.Codec{}), Key: sub, Pos: it.PosText()})
}

// benchData is a small chat message, about the size of a typical publication.
var benchData = []byte(`{"user":"alice","text":"the quick brown fox jumps over the lazy dog","ts":1700000000000}`)

// BenchmarkFanout publishes one message to a channel with n subscribers, each on its own
// connection's lanes. ns/op is per publish; ns/delivery divides it by n. The lanes are drained
// with the timer stopped every drainEvery publishes, as a writer would, so no frame is lost
// and the rings stay small: what is measured is admission, not overflow.
func BenchmarkFanout(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 50_000} {
		b.Run("subs="+strconv.Itoa(n), func(b *testing.B) { benchFanout(b, n) })
	}
}

func benchFanout(b *testing.B, n int) {
	const drainEvery = 16
	h := benchHub(b, HistoryConfig{})
	p := mustPattern(b, "rooms/1", "")
	subs := make([]*laneSub, n)
	for i := range subs {
		l, err := delivery.New(delivery.Config{EncodeMarker: func(dst []byte, _ delivery.Marker) []byte { return dst }})
		if err != nil {
			b.Fatal(err)
		}
		subs[i] = &laneSub{lanes: l, head: wire.AppendDataHead(nil, wire.FrameMessage, "room")}
		_, unsub, _ := h.Subscribe(subs[i], "room", p)
		defer unsub()
	}
	var batch delivery.Batch
	drain := func() {
		for _, s := range subs {
			for s.lanes.TryNext(&batch) {
			}
		}
	}
	publish := func() {
		if _, err := h.Publish("rooms/1", "chat", benchData); err != nil {
			b.Fatal(err)
		}
	}
	// Grow every ring and warm the pool before measuring.
	for range drainEvery {
		publish()
	}
	flush(b, h)
	drain()

	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%drainEvery == 0 {
			flush(b, h) // the fan-out runs on the hub's queue: it is part of what is measured
			b.StopTimer()
			drain()
			b.StartTimer()
		}
		publish()
	}
	flush(b, h)
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/delivery")
	for i, s := range subs {
		if st := s.lanes.Stats(); st.LostLaneFull+st.LostTooLarge != 0 {
			b.Fatalf("subscriber %d lost %d frames: the benchmark must not overflow", i, st.LostLaneFull+st.LostTooLarge)
		}
	}
}

// BenchmarkDispatch publishes to a depth-3 channel with one matching subscription and n that
// do not match, anchored at tokens the publication does not look up. The cost per publish
// should not depend on n: compare nonmatching=1000 with nonmatching=100000.
func BenchmarkDispatch(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run("nonmatching="+strconv.Itoa(n), func(b *testing.B) {
			h := benchHub(b, HistoryConfig{})
			var delivered atomic.Int64
			s := subscriberFunc(func(string, *stream.Item) { delivered.Add(1) })
			_, unsub, _ := h.Subscribe(s, "mine", mustPattern(b, "docs/alice/**", ""))
			defer unsub()
			for i := range n {
				var glob string
				switch i % 4 {
				case 0:
					glob = "rooms/" + strconv.Itoa(i) // exact, elsewhere
				case 1:
					glob = "docs/u" + strconv.Itoa(i) + "/**" // a sibling of the publication's ancestors
				case 2:
					glob = "docs/u" + strconv.Itoa(i) + "/*/inbox"
				default:
					glob = "chat/" + strconv.Itoa(i) + "/*"
				}
				_, u, _ := h.Subscribe(s, "other", mustPattern(b, glob, ""))
				defer u()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := h.Publish("docs/alice/inbox", "chat", benchData); err != nil {
					b.Fatal(err)
				}
			}
			flush(b, h)
			b.StopTimer()
			if delivered.Load() != int64(b.N) {
				b.Fatalf("delivered %d for %d publishes", delivered.Load(), b.N)
			}
		})
	}
}

// BenchmarkPublishHistory is the cost of keeping a history on the publish path, the two side
// by side in one run: a publish to a channel nobody on the node receives (subs=0) and to one
// with one exact subscriber (subs=1), with no history, and with one (whose bound by count is
// reached after the first 100 publications, so from then on each append also trims one).
func BenchmarkPublishHistory(b *testing.B) {
	for _, subs := range []int{0, 1} {
		for _, hist := range []struct {
			name string
			cfg  HistoryConfig
		}{{"off", HistoryConfig{Size: -1}}, {"on", HistoryConfig{}}} {
			b.Run(fmt.Sprintf("subs=%d/history=%s", subs, hist.name), func(b *testing.B) {
				h := benchHub(b, hist.cfg)
				var delivered atomic.Int64
				if subs > 0 {
					s := subscriberFunc(func(string, *stream.Item) { delivered.Add(1) })
					_, unsub, _ := h.Subscribe(s, "s", mustPattern(b, "rooms/1", ""))
					defer unsub()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := h.Publish("rooms/1", "chat", benchData); err != nil {
						b.Fatal(err)
					}
				}
				flush(b, h)
				b.StopTimer()
				if delivered.Load() != int64(subs*b.N) {
					b.Fatalf("delivered %d for %d publishes", delivered.Load(), b.N)
				}
			})
		}
	}
}

// BenchmarkHistoryMemory reports what a node's memory holds for 100k publications kept in
// channel histories: 1,000 channels with 100 each (the default bound by count), of benchData,
// as bytes per 100k publications (B/100k) and per publication (B/pub). It also measures the
// appends, nobody subscribed.
func BenchmarkHistoryMemory(b *testing.B) {
	const channels, each = 1000, 100
	names := make([]string, channels)
	for i := range names {
		names[i] = "rooms/" + strconv.Itoa(i)
	}
	var perPub float64
	for range b.N {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		broker := NewMemoryBroker(MemoryBrokerConfig{})
		b.StartTimer()
		for range each {
			for _, name := range names {
				if _, err := broker.Append(name, "chat", benchData); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPub = float64(after.HeapAlloc-before.HeapAlloc) / (channels * each)
		runtime.KeepAlive(broker)
		b.StartTimer()
	}
	b.ReportMetric(perPub*100_000, "B/100k")
	b.ReportMetric(perPub, "B/pub")
	b.ReportMetric(float64(len(benchData)), "data-B/pub")
}

// BenchmarkPatternMatch measures evaluating one candidate pattern.
func BenchmarkPatternMatch(b *testing.B) {
	for _, tt := range []struct{ glob, name string }{
		{"chat/room1", "chat/room1"},
		{"docs/*/inbox", "docs/alice/inbox"},
		{"docs/alice/**", "docs/alice/a/b/c"},
	} {
		p := mustPattern(b, tt.glob, "")
		b.Run(tt.glob, func(b *testing.B) {
			for b.Loop() {
				if !p.Match(tt.name, "") {
					b.Fatal("no match")
				}
			}
		})
	}
}

// BenchmarkCheckName measures validating a publication's channel name.
func BenchmarkCheckName(b *testing.B) {
	for b.Loop() {
		if CheckName("docs/alice/inbox/2024-06-01") != nil {
			b.Fatal("refused")
		}
	}
}
