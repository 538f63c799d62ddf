package memory

import (
	"context"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/interest"
)

// TestOwnersAreForgotten: an owner whose sockets are gone and whose generation expired leaves
// the map, so the index does not grow with every owner ever used.
func TestOwnersAreForgotten(t *testing.T) {
	m, err := NewInterest(interest.Config{TTL: time.Second, GenerationTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	for _, o := range []string{"a", "b", "c"} {
		if _, err := m.Add(ctx, o, interest.Row{Token: "t", Socket: "s", Sub: "1", Identity: "i", Node: "n"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Reap(ctx, "a", "s"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Second) // b's and c's sockets are dead; every generation lives
	if _, err := m.Add(ctx, "d", interest.Row{Token: "t", Socket: "s", Sub: "1", Identity: "i", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	if g, _ := m.Generation(ctx, "a"); g != 2 {
		t.Fatalf("a's generation within its TTL = %d, want 2", g)
	}
	now = now.Add(2 * time.Minute) // every generation expired; d's socket is dead too
	if _, err := m.Add(ctx, "e", interest.Row{Token: "t", Socket: "s", Sub: "1", Identity: "i", Node: "n"}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	n := len(m.owners)
	m.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d owners kept, want 1 (e): the others have no socket and no generation", n)
	}
}
