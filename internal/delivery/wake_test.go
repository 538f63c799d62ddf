package delivery

import (
	"strings"
	"testing"
)

// TestWakeStartsOneWriterPerPark: with Config.Wake, the lanes start with the writer's place
// taken; a writer that finds nothing gives it up; exactly the first push after that calls Wake,
// whatever kind of frame it is; Claim takes the place only when nobody holds it; Close calls no
// Wake and leaves no place to claim.
func TestWakeStartsOneWriterPerPark(t *testing.T) {
	wakes := 0
	l := newLanes(t, Config{Wake: func() { wakes++ }, MaxDataFrames: 1})
	var b Batch

	if err := l.PushControl([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if wakes != 0 {
		t.Fatalf("a push before the first writer ended called Wake %d times", wakes)
	}
	if l.Claim() {
		t.Fatal("Claim took the place of a writer that has not ended")
	}
	if !l.TryNextOrPark(&b) || len(b.Items) != 1 {
		t.Fatalf("TryNextOrPark: %d items, want the control frame", len(b.Items))
	}
	if l.TryNextOrPark(&b) {
		t.Fatal("TryNextOrPark found a batch in empty lanes")
	}
	// The writer has ended: one push wakes, the others find the place taken.
	l.PushData(frame("k", "1", 1))
	l.PushData(frame("k", "2", 1)) // lost into a marker: the lane holds one
	if err := l.PushControl([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if wakes != 1 {
		t.Fatalf("three pushes after the writer ended called Wake %d times, want 1", wakes)
	}
	for l.TryNextOrPark(&b) {
	}
	// A gap alone wakes too.
	l.Gap("g", "1", "3", 3, ReasonLaneFull)
	if wakes != 2 {
		t.Fatalf("a gap after the writer ended called Wake %d times in all, want 2", wakes)
	}
	for l.TryNextOrPark(&b) {
	}
	if !l.Claim() {
		t.Fatal("Claim did not take the place of a writer that ended")
	}
	if l.Claim() {
		t.Fatal("Claim took a place already claimed")
	}
	if l.TryNextOrPark(&b) {
		t.Fatal("TryNextOrPark found a batch in empty lanes")
	}
	l.Close()
	if wakes != 2 {
		t.Fatalf("Close called Wake")
	}
	if l.Claim() || l.TryNextOrPark(&b) {
		t.Fatal("closed lanes gave a writer its place or a batch")
	}
}

// A fan-out's deferred pushes to lanes whose writer runs on demand start no writer until the
// fan-out calls Wake, and then exactly one, which finds everything the fan-out queued.
func TestDeferredPushesStartOneWriterAtWake(t *testing.T) {
	wakes := 0
	l := newLanes(t, Config{Wake: func() { wakes++ }})
	var b Batch
	if l.TryNextOrPark(&b) {
		t.Fatal("TryNextOrPark found a batch in empty lanes")
	}
	ok, wake := l.PushDataDeferred(frame("k", "1", 1))
	if !ok || !wake {
		t.Fatalf("first deferred push after the writer ended = %v, %v; want queued and the wake-up reported", ok, wake)
	}
	if _, wake := l.PushDataDeferred(frame("k", "2", 1)); wake {
		t.Fatal("a second deferred push reported a wake-up the first already holds")
	}
	if err := l.PushControl([]byte("c")); err != nil {
		t.Fatal(err)
	}
	if wakes != 0 {
		t.Fatalf("pushes before the fan-out's Wake started %d writers, want 0", wakes)
	}
	l.Wake()
	if wakes != 1 {
		t.Fatalf("Wake started %d writers, want 1", wakes)
	}
	var got []string
	for l.TryNextOrPark(&b) {
		for _, it := range b.Items {
			got = append(got, render(it))
		}
	}
	if want := "c:c d:k@1 d:k@2"; strings.Join(got, " ") != want {
		t.Fatalf("the writer found %q, want %q", strings.Join(got, " "), want)
	}
	if _, wake := l.PushDataDeferred(frame("k", "3", 1)); !wake {
		t.Fatal("a deferred push after the writer ended again did not report the wake-up")
	}
}
