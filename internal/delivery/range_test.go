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
