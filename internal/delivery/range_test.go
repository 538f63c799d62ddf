package delivery

import (
	"context"
	"testing"

	"github.com/heraldrt/herald/internal/stream"
)

// TestGapWidensTheMarkerByItsWholeRange: a producer's gap of many items leaves a marker
// covering all of them, from its first position, written after the frames admitted before it,
// and frames pushed after it join it.
func TestGapWidensTheMarkerByItsWholeRange(t *testing.T) {
	l := newLanes(t, Config{MaxDataFrames: 4})
	if !l.PushData(Frame{Key: "k", Pos: "p1", Body: []byte("x")}) {
		t.Fatal("first frame not admitted")
	}
	l.Gap("k", "t.1", "t.9", 9, ReasonTooLarge)
	l.PushData(Frame{Key: "k", Pos: "u.1", Body: []byte("y")})
	var first Batch
	if err := l.Next(context.Background(), &first); err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 1 || first.Items[0].Kind != KindData || first.Items[0].Pos != "p1" {
		t.Fatalf("first batch %+v, want p1 alone: the gap follows what was admitted before it", first.Items)
	}
	if st := l.Stats(); st.Gaps != 1 {
		t.Errorf("gaps %d, want 1", st.Gaps)
	}
	got := nextMarker(t, l)
	if got.First != "t.1" || got.Last != "u.1" || got.Lost != 10 || got.Reason != ReasonTooLarge {
		t.Errorf("marker %+v, want first t.1, last u.1, lost 10, too_large", *got)
	}
}

// TestRangeOfUnknownLengthLeavesTheCountUnknown: a marker says how many items were lost only
// when it knows exactly. A gap whose length the producer does not know (count 0), anywhere in
// the marker's life, leaves its Lost 0 for good, whatever else joins it.
func TestRangeOfUnknownLengthLeavesTheCountUnknown(t *testing.T) {
	// loss is a frame lost (count 1), or a producer's gap from first to pos of count items.
	type loss struct {
		first, pos string
		count      uint64
		gap        bool
	}
	unknown := loss{"t.1", "t.9", 0, true}
	known := loss{"s.1", "s.4", 4, true}
	one := func(pos string) loss { return loss{pos, pos, 1, false} }
	tests := []struct {
		name     string
		lost     []loss // after the one frame the lane holds
		wantLost uint64
	}{
		{"ordinary frames", []loss{one("a"), one("b")}, 2},
		{"a counted range", []loss{one("a"), known}, 5},
		{"an unknown range first", []loss{unknown, one("u.1"), known}, 0},
		{"an unknown range last", []loss{one("a"), known, unknown}, 0},
		{"an unknown range between", []loss{one("a"), unknown, one("u.1")}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLanes(t, Config{MaxDataFrames: 1})
			if !l.PushData(Frame{Key: "k", Pos: "p0", Body: []byte("x")}) {
				t.Fatal("first frame not admitted")
			}
			for _, f := range tt.lost {
				if f.gap {
					l.Gap("k", f.first, f.pos, f.count, ReasonTransactionTooLarge)
				} else if l.PushData(Frame{Key: "k", Pos: f.pos, Body: []byte("x")}) {
					t.Fatalf("frame %s admitted, want it lost into the marker", f.pos)
				}
			}
			got := nextMarker(t, l)
			first, last := tt.lost[0].first, tt.lost[len(tt.lost)-1].pos
			if got.First != first || got.Last != last || got.Lost != tt.wantLost {
				t.Errorf("marker %+v, want first %s, last %s, lost %d", *got, first, last, tt.wantLost)
			}
		})
	}
}

// ReasonTransactionTooLarge is a producer's reason, for the tests.
const ReasonTransactionTooLarge = stream.ReasonTransactionTooLarge

// nextMarker drains l until the writer is handed a marker, and returns it.
func nextMarker(t *testing.T, l *Lanes) *Marker {
	t.Helper()
	var b Batch
	for {
		if err := l.Next(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		for _, it := range b.Items {
			if it.Kind == KindMarker {
				m := *it.Marker
				return &m
			}
		}
	}
}

// TestRangeFrameInLine: a frame that stands for a range (First set: a resync a producer queues
// in line with its data) goes out in order with the key's data, which is not held back behind
// it; lost itself, it puts its whole range into its key's marker.
func TestRangeFrameInLine(t *testing.T) {
	l := newLanes(t, Config{MaxDataFrames: 2})
	l.PushData(Frame{Key: "k", Pos: "e:1", Body: []byte("a")})
	l.PushData(Frame{Key: "k", Pos: "e:4", First: "e:2", Lost: 3, Body: []byte("resync")})
	// The lane is full: the next range frame is lost with its range, and so is what follows
	// while its marker waits.
	l.PushData(Frame{Key: "k", Pos: "e:8", First: "e:5", Lost: 4, Body: []byte("resync")})
	l.PushData(Frame{Key: "k", Pos: "e:9", Body: []byte("b")})
	var b Batch
	if err := l.Next(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range b.Items {
		got = append(got, render(it))
	}
	if len(got) != 2 || got[0] != "d:k@e:1" || got[1] != "d:k@e:4" {
		t.Fatalf("first batch %v, want the frame and the range frame, in order", got)
	}
	m := nextMarker(t, l)
	if m.First != "e:5" || m.Last != "e:9" || m.Lost != 5 || m.Reason != ReasonLaneFull {
		t.Errorf("marker %+v, want e:5..e:9, 5 lost, lane_full", *m)
	}
}
