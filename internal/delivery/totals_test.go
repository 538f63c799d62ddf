package delivery

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/stream"
)

// monotonic is what a Totals sums of s: its monotonic counters but the admissions.
func monotonic(s Stats) Stats {
	return Stats{
		DataWritten: s.DataWritten, ControlWritten: s.ControlWritten, ControlRefused: s.ControlRefused,
		LostLaneFull: s.LostLaneFull, LostTooLarge: s.LostTooLarge, MarkersEmitted: s.MarkersEmitted,
		MarkersForgotten: s.MarkersForgotten, Gaps: s.Gaps, Discarded: s.Discarded,
	}
}

func add(a, b Stats) Stats {
	return Stats{
		DataWritten: a.DataWritten + b.DataWritten, ControlWritten: a.ControlWritten + b.ControlWritten,
		ControlRefused: a.ControlRefused + b.ControlRefused, LostLaneFull: a.LostLaneFull + b.LostLaneFull,
		LostTooLarge: a.LostTooLarge + b.LostTooLarge, MarkersEmitted: a.MarkersEmitted + b.MarkersEmitted,
		MarkersForgotten: a.MarkersForgotten + b.MarkersForgotten, Gaps: a.Gaps + b.Gaps, Discarded: a.Discarded + b.Discarded,
	}
}

// TestTotalsSumEveryLanes: a Totals holds the sum of the monotonic counters of every Lanes made
// with it, and the markers written by reason, and keeps them once the lanes are closed.
func TestTotalsSumEveryLanes(t *testing.T) {
	var tot Totals
	var want Stats
	wantMarkers := map[DropReason]uint64{}
	for _, r := range stream.Reasons() {
		wantMarkers[r] = 0
	}
	var b Batch
	for i := range 3 * totalStripes / 2 { // more lanes than stripes: some share one
		l := newLanes(t, Config{MaxDataFrames: 2, MaxDataBytes: 10, MaxControlFrames: 1, Totals: &tot})
		l.PushData(frame("a", "1", 4))
		l.PushData(frame("b", "1", 5))
		l.PushData(frame("a", "2", 1))  // lane_full
		l.PushData(frame("c", "1", 11)) // too_large
		l.Gap("d", "1", "4", 4, stream.ReasonUpstreamGap)
		l.PushControl([]byte("x"))
		l.PushControl([]byte("y")) // refused
		if i%2 == 0 {
			for l.TryNext(&b) {
			}
			wantMarkers[stream.ReasonLaneFull]++
			wantMarkers[stream.ReasonTooLarge]++
			wantMarkers[stream.ReasonUpstreamGap]++
		}
		l.Close()
		want = add(want, monotonic(l.Stats()))
	}
	got := tot.Stats()
	if diff := cmp.Diff(want, got.Stats); diff != "" {
		t.Errorf("Totals.Stats (-sum of the lanes' +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantMarkers, got.MarkersByReason); diff != "" {
		t.Errorf("markers by reason (-want +got):\n%s", diff)
	}
	if want.MarkersEmitted == 0 || want.Discarded == 0 || want.ControlRefused == 0 {
		t.Fatalf("the script exercised too little: %+v", want)
	}
}

// TestTotalsUnknownReason: a marker for a reason stream.Reasons does not list still counts,
// under "".
func TestTotalsUnknownReason(t *testing.T) {
	var tot Totals
	l := newLanes(t, Config{Totals: &tot})
	l.Gap("a", "", "9", 0, "no_such_reason")
	var b Batch
	for l.TryNext(&b) {
	}
	if got := tot.Stats().MarkersByReason[""]; got != 1 {
		t.Errorf("markers of an unknown reason = %d, want 1", got)
	}
}

// TestTotalsConcurrent: lanes counting from many goroutines while the totals are read; run
// with -race. Every read is at least the one before it, and the last is exact.
func TestTotalsConcurrent(t *testing.T) {
	var tot Totals
	const lanes, frames = 16, 500
	var wg sync.WaitGroup
	stop := make(chan struct{})
	readDone := make(chan string, 1)
	go func() {
		var prev uint64
		for {
			select {
			case <-stop:
				readDone <- ""
				return
			default:
			}
			if got := tot.Stats().DataWritten; got < prev {
				readDone <- "data written went down"
				return
			} else {
				prev = got
			}
		}
	}()
	for range lanes {
		wg.Go(func() {
			l := newLanes(t, Config{Totals: &tot})
			var b Batch
			for i := range frames {
				l.PushData(frame("k", "1", 8))
				if i%10 == 9 {
					for l.TryNext(&b) {
					}
				}
			}
			for l.TryNext(&b) {
			}
			l.Close()
		})
	}
	wg.Wait()
	close(stop)
	if msg := <-readDone; msg != "" {
		t.Fatal(msg)
	}
	if got := tot.Stats().DataWritten; got != lanes*frames {
		t.Errorf("data written %d, want %d", got, lanes*frames)
	}
}
