package channel

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// The benchmarks measure; they never fail on a timing. Run them with
//
//	go test -run '^$' -bench . -benchmem ./internal/channel/

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
	h := testHub(b, nil, 0)
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
			h := testHub(b, nil, 0)
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
