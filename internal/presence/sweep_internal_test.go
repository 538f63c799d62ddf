package presence

import (
	"regexp"
	"testing"
	"time"
)

// Node ids are UUIDv7: they sort as their nodes started, so the longest-lived node leads.
func TestNodeIDsAreTimeOrdered(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := ""
	for i, at := range []time.Time{t0, t0.Add(time.Millisecond), t0.Add(time.Second), t0.Add(1000 * time.Hour)} {
		id := NewNodeID(at)
		if !shape.MatchString(id) {
			t.Fatalf("node id %q is not a UUIDv7", id)
		}
		if id <= prev {
			t.Fatalf("node id %d, %q, sorts at or before the one made earlier, %q", i, id, prev)
		}
		prev = id
	}
	if a, b := NewNodeID(t0), NewNodeID(t0); a == b {
		t.Fatalf("two ids in one millisecond are both %q; want them distinct", a)
	}
}
