package delivery

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestConcurrentProducersOneWriter runs one producer per key, as the hub does (a subscription's
// frames come from one place, in order), beside control producers, against one writer that
// reads in bursts with pauses so the data lane overflows again and again. Each key's written
// stream must still be contiguous, every refused frame named by exactly one marker, and no
// goroutine may outlive Close.
func TestConcurrentProducersOneWriter(t *testing.T) {
	defer goleak.VerifyNone(t)

	const (
		keys     = 8
		perKey   = 3000
		controls = 4
	)
	l := newLanes(t, Config{MaxDataFrames: 64, MaxControlFrames: 1024, MaxBatchFrames: 16})
	body := make([]byte, 64)

	var (
		mu    sync.Mutex
		byKey = map[string][]Item{}
		ctlN  int
		wrote atomic.Int64
	)
	writerDone := make(chan error, 1)
	go func() {
		var b Batch
		for i := 0; ; i++ {
			if !l.TryNext(&b) {
				if err := l.Next(context.Background(), &b); err != nil {
					writerDone <- err
					return
				}
			}
			mu.Lock()
			for _, it := range b.Items {
				if it.Kind == KindControl {
					ctlN++
					continue
				}
				it.Body = nil // the batch's storage is reused; keep only what the test checks
				if it.Marker != nil {
					m := *it.Marker
					it.Marker = &m
				}
				byKey[it.Key] = append(byKey[it.Key], it)
			}
			mu.Unlock()
			wrote.Add(int64(len(b.Items)))
			if i%50 == 0 {
				time.Sleep(100 * time.Microsecond) // a slow client, now and then
			}
		}
	}()

	var producers sync.WaitGroup
	refused := make([][]int, keys)
	for k := range keys {
		producers.Go(func() {
			key := "k" + strconv.Itoa(k)
			for p := range perKey {
				if !l.PushData(Frame{Head: []byte(key), Body: body, Key: key, Pos: "0:" + strconv.Itoa(p)}) {
					refused[k] = append(refused[k], p)
				}
				if p%32 == 0 {
					runtime.Gosched() // let the writer in now and then, so gaps open and close
				}
			}
		})
	}
	var ctlAdmitted atomic.Int64
	for range controls {
		producers.Go(func() {
			for range 200 {
				if l.PushControl([]byte("pong")) == nil {
					ctlAdmitted.Add(1)
				}
				_ = l.Stats()
				_, _ = l.Stalled()
			}
		})
	}
	producers.Wait()

	// Every marker is ready once the data lane drains, so the writer empties the lanes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := l.Stats()
		if st.DataFrames == 0 && st.ControlFrames == 0 && st.Markers == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lanes did not drain: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	l.Close()
	if err := <-writerDone; !errors.Is(err, ErrClosed) {
		t.Fatalf("writer ended with %v, want ErrClosed", err)
	}

	mu.Lock()
	defer mu.Unlock()
	var lost uint64
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		checkContiguous(t, key, byKey[key], perKey, offset)
		// The refused positions are exactly those the markers name.
		var named []int
		for _, it := range byKey[key] {
			if it.Kind == KindMarker {
				for p := offset(it.Marker.First); p <= offset(it.Marker.Last); p++ {
					named = append(named, p)
				}
			}
		}
		if len(named) != len(refused[k]) {
			t.Fatalf("key %s: %d refused, markers name %d", key, len(refused[k]), len(named))
		}
		for i := range named {
			if named[i] != refused[k][i] {
				t.Fatalf("key %s: marker names %d where %d was refused", key, named[i], refused[k][i])
			}
		}
		lost += uint64(len(refused[k]))
	}
	st := l.Stats()
	if st.LostLaneFull != lost || st.DataAdmitted+lost != keys*perKey || st.DataWritten != st.DataAdmitted {
		t.Fatalf("Stats %+v disagree with %d refused of %d pushed", st, lost, keys*perKey)
	}
	if int64(ctlN) != ctlAdmitted.Load() || st.ControlWritten != uint64(ctlN) {
		t.Fatalf("wrote %d control frames, %d admitted, Stats says %d written", ctlN, ctlAdmitted.Load(), st.ControlWritten)
	}
	if lost == 0 {
		t.Log("no frame was refused: the writer kept up, so the overflow path went untested this run")
	}
	t.Logf("%d of %d frames refused, %d markers", lost, keys*perKey, st.MarkersEmitted)
}

// TestCloseUnderLoad closes while producers push and the writer is mid-flight: everybody must
// return promptly, the gauges must read zero, and no goroutine may be left behind.
func TestCloseUnderLoad(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := newLanes(t, Config{MaxDataFrames: 32})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k := range 4 {
		wg.Go(func() {
			key := strconv.Itoa(k)
			for p := 0; ; p++ {
				select {
				case <-stop:
					return
				default:
				}
				l.PushData(Frame{Body: []byte("x"), Key: key, Pos: strconv.Itoa(p)})
				if p%16 == 0 {
					l.PushControl([]byte("c"))
				}
				if p%64 == 0 {
					l.Forget(key) // as an unsubscribe racing the writer would
				}
			}
		})
	}
	wg.Go(func() {
		var b Batch
		for l.Next(context.Background(), &b) == nil {
		}
	})
	time.Sleep(20 * time.Millisecond)
	l.Close()
	close(stop)
	wg.Wait()
	st := l.Stats()
	if st.DataFrames != 0 || st.DataBytes != 0 || st.ControlFrames != 0 || st.ControlBytes != 0 || st.Markers != 0 {
		t.Fatalf("gauges after Close: %+v, want zero", st)
	}
	if st.DataWritten > st.DataAdmitted || st.ControlWritten > st.ControlAdmitted {
		t.Fatalf("more written than admitted: %+v", st)
	}
}
