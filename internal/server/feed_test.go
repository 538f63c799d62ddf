package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestPermanentChangefeedErrorStopsTheNode: a changefeed that stops on an error retrying cannot
// fix (here a table without a replica identity) will never stream again until a person acts.
// The node stops with that error, so the process exits non-zero with the fix, rather than
// serving on with its tables dead.
func TestPermanentChangefeedErrorStopsTheNode(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, `CREATE TABLE items (id int, v text)`)
	cfg := baseConfig()
	cfg.Changefeed = &changefeed.Config{
		DatabaseURL: url,
		Slot:        testenv.SlotName(t, url),
		Tables:      []string{"public.items"},
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case err := <-done:
		var fe *changefeed.Error
		if !errors.As(err, &fe) || !fe.Permanent || !strings.Contains(fe.Detail, "no replica identity") {
			t.Fatalf("Run = %v, want the changefeed's permanent error", err)
		}
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatal("Run went on serving after the changefeed stopped for good")
	}
}
