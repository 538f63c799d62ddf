package delivery

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// pos spells a stream position the way a channel does, "epoch:offset", so the test reads like
// the real thing. Lanes never parse it.
func pos(offset int) string { return fmt.Sprintf("7:%d", offset) }

// TestStalledConsumerScenario: a consumer stops reading while 10,000 frames across a few keys
// are pushed, then reads again. For every key it must get the frames up to the overflow, exactly
// one marker naming the exact lost range, and the frames after the gap, with nothing missing
// and nothing twice.
func TestStalledConsumerScenario(t *testing.T) {
	const (
		laneFrames = 1024
		pushed     = 10_000
		after      = 1_000
	)
	keys := []string{"s1", "s2", "s3", "s4"}
	l := newLanes(t, Config{MaxDataFrames: laneFrames})
	body := make([]byte, 200) // shared by every frame, as the hub's encode-once body is

	next := map[string]int{} // next offset per key
	admitted := map[string][]int{}
	lost := map[string][]int{}
	pushRound := func(n int) {
		for i := range n {
			k := keys[i%len(keys)]
			p := next[k]
			next[k]++
			if l.PushData(Frame{Head: []byte(`{"sub":"` + k + `",`), Body: body, Key: k, Pos: pos(p)}) {
				admitted[k] = append(admitted[k], p)
			} else {
				lost[k] = append(lost[k], p)
			}
		}
	}
	var got []Item
	var b Batch
	readAll := func() {
		for l.TryNext(&b) {
			for _, it := range b.Items {
				it.Body = nil // the batch's storage is reused; keep only what the test compares
				if it.Marker != nil {
					m := *it.Marker
					it.Marker = &m
				}
				got = append(got, it)
			}
		}
	}

	// A quiet key that sends one frame before the storm and is never affected.
	if !l.PushData(Frame{Body: body, Key: "quiet", Pos: pos(0)}) {
		t.Fatal("the quiet key's frame was refused on an empty lane")
	}
	pushRound(pushed) // the consumer is not reading
	readAll()         // it reads again
	pushRound(after)  // and keeps up
	readAll()

	// Per key: offsets 0..k-1 as data, then one marker for k..m, then m+1.. as data.
	perKey := map[string][]string{}
	items := map[string][]Item{}
	for _, it := range got {
		items[it.Key] = append(items[it.Key], it)
		switch it.Kind {
		case KindData:
			perKey[it.Key] = append(perKey[it.Key], "data "+it.Pos)
		case KindMarker:
			m := it.Marker
			perKey[it.Key] = append(perKey[it.Key], fmt.Sprintf("marker %s %s..%s %d", m.Reason, m.First, m.Last, m.Lost))
		default:
			t.Fatalf("unexpected %s item", it.Kind)
		}
	}
	if diff := cmp.Diff([]string{"data 7:0"}, perKey["quiet"]); diff != "" {
		t.Errorf("quiet key (-want +got):\n%s", diff)
	}
	// The lane fills round-robin: 1023 more frames after the quiet one, then every key loses
	// everything until the consumer reads. That puts key i's gap at a fixed, computable place.
	perKeyPushed := pushed / len(keys)
	for i, k := range keys {
		inLane := (laneFrames - 1) / len(keys)
		if i < (laneFrames-1)%len(keys) {
			inLane++
		}
		var want []string
		for p := range inLane {
			want = append(want, "data "+pos(p))
		}
		want = append(want, fmt.Sprintf("marker lane_full %s..%s %d", pos(inLane), pos(perKeyPushed-1), perKeyPushed-inLane))
		for p := perKeyPushed; p < perKeyPushed+after/len(keys); p++ {
			want = append(want, "data "+pos(p))
		}
		if diff := cmp.Diff(want, perKey[k]); diff != "" {
			t.Errorf("key %s (-want +got):\n%s", k, diff)
		}

		// The same, said as the promise: the marker's range is exactly the missing positions.
		if len(lost[k]) != perKeyPushed-inLane || lost[k][0] != inLane || lost[k][len(lost[k])-1] != perKeyPushed-1 {
			t.Errorf("key %s: PushData refused %d frames from %d, want the marker's range", k, len(lost[k]), lost[k][0])
		}
		checkContiguous(t, k, items[k], next[k], offset)
	}

	st := l.Stats()
	if st.DataFrames != 0 || st.DataBytes != 0 || st.Markers != 0 {
		t.Errorf("after the final read: %d frames, %d bytes, %d markers queued; want none", st.DataFrames, st.DataBytes, st.Markers)
	}
	if want := uint64(len(keys)); st.MarkersEmitted != want {
		t.Errorf("MarkersEmitted = %d, want %d", st.MarkersEmitted, want)
	}
}

// checkContiguous checks that one key's written items cover its positions 0..n-1 exactly once
// and in order: each data frame is the next position, each marker starts at the next position
// and counts exactly the positions it spans. offset turns a Pos back into its number.
func checkContiguous(t *testing.T, key string, items []Item, n int, offset func(string) int) {
	t.Helper()
	cursor := 0
	for _, it := range items {
		switch it.Kind {
		case KindData:
			if p := offset(it.Pos); p != cursor {
				t.Fatalf("key %s: data at %d, want %d", key, p, cursor)
			}
			cursor++
		case KindMarker:
			first, last := offset(it.Marker.First), offset(it.Marker.Last)
			if first != cursor || uint64(last-first+1) != it.Marker.Lost {
				t.Fatalf("key %s: marker %d..%d (%d lost) at position %d, want a range starting there", key, first, last, it.Marker.Lost, cursor)
			}
			cursor = last + 1
		}
	}
	if cursor != n {
		t.Fatalf("key %s: stream ends at position %d, want %d", key, cursor, n)
	}
}

// offset reads back a position written by pos.
func offset(p string) int {
	_, off, _ := strings.Cut(p, ":")
	n, err := strconv.Atoi(off)
	if err != nil {
		panic("bad test position " + p)
	}
	return n
}
