package delivery

import (
	"context"
	"testing"
)

// TestRangeFrameWidensTheMarkerByItsWholeRange: a frame standing for many items (a resync the
// producer sends) that cannot be queued leaves a marker covering all of them, from its first
// position, and counts them all.
func TestRangeFrameWidensTheMarkerByItsWholeRange(t *testing.T) {
	l := newLanes(t, Config{MaxDataFrames: 1})
	if !l.PushData(Frame{Key: "k", Pos: "p1", Body: []byte("x")}) {
		t.Fatal("first frame not admitted")
	}
	l.PushData(Frame{Key: "k", Pos: "t.9", First: "t.1", Count: 9, Body: []byte("resync")})
	l.PushData(Frame{Key: "k", Pos: "u.1", Body: []byte("y")})
	var b Batch
	var got *Marker
	for got == nil {
		if err := l.Next(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		for _, it := range b.Items {
			if it.Kind == KindMarker {
				m := *it.Marker
				got = &m
			}
		}
	}
	if got.First != "t.1" || got.Last != "u.1" || got.Lost != 10 {
		t.Errorf("marker %+v, want first t.1, last u.1, lost 10", *got)
	}
}

// TestRangeOfUnknownLengthLeavesTheCountUnknown: a marker says how many items were lost only
// when it knows exactly. A range whose length the producer does not know (Count 0), lost
// anywhere in the gap, leaves the marker's Lost 0 for good, whatever else joins it.
func TestRangeOfUnknownLengthLeavesTheCountUnknown(t *testing.T) {
	unknown := Frame{Key: "k", Pos: "t.9", First: "t.1", Body: []byte("resync")}
	known := Frame{Key: "k", Pos: "s.4", First: "s.1", Count: 4, Body: []byte("resync")}
	one := func(pos string) Frame { return Frame{Key: "k", Pos: pos, Body: []byte("x")} }
	tests := []struct {
		name     string
		lost     []Frame // pushed after the one frame the lane holds
		wantLost uint64
	}{
		{"ordinary frames", []Frame{one("a"), one("b")}, 2},
		{"a counted range", []Frame{one("a"), known}, 5},
		{"an unknown range first", []Frame{unknown, one("u.1"), known}, 0},
		{"an unknown range last", []Frame{one("a"), known, unknown}, 0},
		{"an unknown range between", []Frame{one("a"), unknown, one("u.1")}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLanes(t, Config{MaxDataFrames: 1})
			if !l.PushData(one("p0")) {
				t.Fatal("first frame not admitted")
			}
			for _, f := range tt.lost {
				if l.PushData(f) {
					t.Fatalf("frame %s admitted, want it lost into the marker", f.Pos)
				}
			}
			var b Batch
			var got *Marker
			for got == nil {
				if err := l.Next(context.Background(), &b); err != nil {
					t.Fatal(err)
				}
				for _, it := range b.Items {
					if it.Kind == KindMarker {
						m := *it.Marker
						got = &m
					}
				}
			}
			first, _ := tt.lost[0].span()
			if got.First != first || got.Last != tt.lost[len(tt.lost)-1].Pos || got.Lost != tt.wantLost {
				t.Errorf("marker %+v, want first %s, last %s, lost %d", *got, first, tt.lost[len(tt.lost)-1].Pos, tt.wantLost)
			}
		})
	}
}
