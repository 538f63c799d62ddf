package delivery

import (
	"context"
	"strconv"
	"sync"
	"testing"
)

// The benchmarks measure; they never fail on a timing. They avoid b.StopTimer in their loops:
// it reads memory statistics, which costs far more than a push, so they reset the lane through
// the helpers below instead.

// benchFrames builds n frames over keys keys sharing one body, so the benchmarks measure
// the lanes, not frame construction.
func benchFrames(n, keys int) []Frame {
	body := make([]byte, 256)
	fs := make([]Frame, n)
	for i := range fs {
		k := "sub" + strconv.Itoa(i%keys)
		fs[i] = Frame{Head: []byte(`{"type":"change","sub":"` + k + `",`), Body: body, Key: k, Pos: "16/" + strconv.Itoa(i)}
	}
	return fs
}

// emptyData forgets the data lane's frames as if the writer had taken them, without building a
// batch. Slots are left for the next pushes to overwrite.
func emptyData(l *Lanes) {
	l.mu.Lock()
	l.data.head, l.data.n = 0, 0
	l.datBytes = 0
	l.taken = l.admitted
	l.mu.Unlock()
}

// refillData puts fs back in the data lane, whose ring must already have grown to hold them, as
// if they had been pushed. It costs one copy of the slots.
func refillData(l *Lanes, fs []Frame) {
	l.mu.Lock()
	l.data.head, l.data.n = 0, copy(l.data.buf, fs)
	for i := range fs {
		l.datBytes += fs[i].Size()
	}
	l.admitted += uint64(len(fs))
	l.mu.Unlock()
}

// BenchmarkPushData measures one producer's PushData. "admitted" pushes into a lane with room;
// "open_markers" does so while other keys hold markers, which puts a map lookup on the admission
// path. "lost" pushes into a full lane, so every frame joins its key's open marker.
func BenchmarkPushData(b *testing.B) {
	const lane = 1024
	for _, keys := range []int{1, 64} {
		b.Run("admitted/keys="+strconv.Itoa(keys), func(b *testing.B) { benchAdmitted(b, keys, 0) })
	}
	b.Run("admitted/keys=8/open_markers=16", func(b *testing.B) { benchAdmitted(b, 8, 16) })
	for _, keys := range []int{1, 64} {
		b.Run("lost/keys="+strconv.Itoa(keys), func(b *testing.B) { benchLost(b, keys, nil) })
	}
	// The same with the lanes adding to a node's Totals, as a server's do.
	b.Run("lost/keys=1/totals", func(b *testing.B) { benchLost(b, 1, new(Totals)) })
}

func benchLost(b *testing.B, keys int, tot *Totals) {
	const lane = 1024
	l := newLanes(b, Config{MaxDataFrames: lane, Totals: tot})
	for _, f := range benchFrames(lane, 1) {
		l.PushData(f)
	}
	fs := benchFrames(lane, keys)
	for _, f := range fs {
		l.PushData(f) // opens every key's marker before timing
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if l.PushData(fs[i%len(fs)]) {
			b.Fatal("admitted into a full lane")
		}
	}
}

func benchAdmitted(b *testing.B, keys, openMarkers int) {
	const lane = 1024
	l := newLanes(b, Config{MaxDataFrames: lane})
	// Frames larger than the lane open markers that stay open: nothing here takes batches.
	huge := make([]byte, DefaultMaxDataBytes+1)
	for i := range openMarkers {
		l.PushData(Frame{Body: huge, Key: "open" + strconv.Itoa(i), Pos: "0"})
	}
	fs := benchFrames(lane, keys)
	for _, f := range fs { // grow the ring before timing
		l.PushData(f)
	}
	emptyData(l)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%lane == 0 {
			emptyData(l)
		}
		if !l.PushData(fs[i%lane]) {
			b.Fatal("lost a frame with room in the lane")
		}
	}
}

// BenchmarkDrain measures the writer taking a lane of 1024 data frames out in batches of the
// given size: ns/op is per batch, ns/frame per frame. Refilling the lane is timed too; it is
// one copy of the slots per 1024 frames.
func BenchmarkDrain(b *testing.B) {
	const lane = 1024
	for _, size := range []int{16, 64, 256} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			l := newLanes(b, Config{MaxDataFrames: lane, MaxBatchFrames: size, MaxBatchBytes: 1 << 30})
			fs := benchFrames(lane, 8)
			for _, f := range fs { // grow the ring
				l.PushData(f)
			}
			var batch Batch
			b.ReportAllocs()
			b.ResetTimer()
			frames := 0
			for b.Loop() {
				if !l.TryNext(&batch) {
					refillData(l, fs)
					l.TryNext(&batch)
				}
				frames += len(batch.Items)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
		})
	}
}

// BenchmarkDrainWithMarkers measures a round in which 64 keys each lose a frame to a full lane,
// then the writer takes the lane and the 64 markers (encoded by the test encoder).
func BenchmarkDrainWithMarkers(b *testing.B) {
	b.Run("alone", func(b *testing.B) { benchDrainWithMarkers(b, nil) })
	// The same with the lanes adding to a node's Totals, as a server's do.
	b.Run("totals", func(b *testing.B) { benchDrainWithMarkers(b, new(Totals)) })
}

func benchDrainWithMarkers(b *testing.B, tot *Totals) {
	const keys = 64
	l := newLanes(b, Config{MaxDataFrames: keys, MaxBatchFrames: 2 * keys, Totals: tot})
	fs := benchFrames(2*keys, keys)
	var batch Batch
	b.ReportAllocs()
	for b.Loop() {
		for _, f := range fs {
			l.PushData(f) // the first 64 fill the lane, the next 64 open one marker each
		}
		for l.TryNext(&batch) {
		}
	}
	if st := l.Stats(); st.Markers != 0 || st.MarkersEmitted == 0 {
		b.Fatalf("markers not written: %+v", st)
	}
}

// BenchmarkContended runs producers in parallel against one writer goroutine, as a hub fanning
// out to one connection would. lost/frame says how often the writer fell behind.
func BenchmarkContended(b *testing.B) {
	l := newLanes(b, Config{})
	fs := benchFrames(1024, 64)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		var batch Batch
		for l.Next(ctx, &batch) == nil {
		}
	})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			l.PushData(fs[i%len(fs)])
		}
	})
	b.StopTimer()
	cancel()
	wg.Wait()
	st := l.Stats()
	b.ReportMetric(float64(st.LostLaneFull)/float64(st.DataAdmitted+st.LostLaneFull), "lost/frame")
}

// BenchmarkTotalsStats is one read of a Totals, what a metrics scrape costs whatever the
// number of connections.
func BenchmarkTotalsStats(b *testing.B) {
	var tot Totals
	b.ReportAllocs()
	for b.Loop() {
		_ = tot.Stats()
	}
}
