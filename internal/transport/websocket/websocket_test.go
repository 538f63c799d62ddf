package websocket

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAwaitPongs: the pinger closes only after maxMissedPongs pings in a row went unanswered,
// never on one missed pong, and never for a connection that failed some other way.
func TestAwaitPongs(t *testing.T) {
	const (
		ok     = "ok"     // answered
		miss   = "miss"   // unanswered until the ping's time runs out
		closed = "closed" // the connection is gone
	)
	tests := []struct {
		name  string
		pings []string // what each ping meets; past the end, the session ends (done closes)
		want  bool
		calls int // pings of the list sent before awaitPongs returned
	}{
		{"every ping answered", []string{ok, ok, ok}, false, 3},
		{"one missed at a time", []string{miss, ok, miss, ok, miss, ok}, false, 6},
		{"two missed in a row", []string{ok, miss, miss, ok}, true, 3},
		{"two missed from the start", []string{miss, miss}, true, 2},
		{"connection gone", []string{ok, closed, miss, miss}, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			var end sync.Once
			calls := 0
			ping := func(ctx context.Context) error {
				if calls == len(tt.pings) {
					// The ticker may win the select over done once more: answer it.
					end.Do(func() { close(done) })
					return nil
				}
				calls++
				switch tt.pings[calls-1] {
				case miss:
					<-ctx.Done()
					return ctx.Err()
				case closed:
					return net.ErrClosed
				}
				return nil
			}
			got := awaitPongs(context.Background(), done, time.Millisecond, maxMissedPongs, ping)
			if got != tt.want || calls != tt.calls {
				t.Errorf("awaitPongs = %v after %d pings, want %v after %d", got, calls, tt.want, tt.calls)
			}
		})
	}
}
