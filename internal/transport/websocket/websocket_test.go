package websocket

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPinger: the pinger closes only after maxMissedPongs pings in a row went unanswered, never
// on one missed pong, and never for a connection that failed some other way. Its beats are
// driven here one at a time, each once the ping before it has been written.
func TestPinger(t *testing.T) {
	const (
		ok     = "ok"     // answered
		miss   = "miss"   // unanswered: its pong never comes
		closed = "closed" // the connection is gone
	)
	tests := []struct {
		name  string
		pings []string // what each ping meets
		want  bool     // dead was called
		calls int      // pings sent before the pinger stopped pinging
	}{
		{"every ping answered", []string{ok, ok, ok}, false, 3},
		{"one missed at a time", []string{miss, ok, miss, ok, miss, ok}, false, 6},
		{"two missed in a row", []string{ok, miss, miss, ok}, true, 3},
		{"two missed from the start", []string{miss, miss}, true, 2},
		{"connection gone", []string{ok, closed, miss, miss}, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakePings{list: tt.pings}
			dead := false
			p := newPinger(context.Background(), maxMissedPongs, f.ping, f.answered.Load, func() { dead = true })
			// One beat per ping of the list, and one more to judge the last.
			for range len(tt.pings) + 1 {
				p.beat()
				p.inFlight.Wait()
			}
			p.stop()
			if calls := f.sent(); dead != tt.want || calls != tt.calls {
				t.Errorf("dead = %v after %d pings, want %v after %d", dead, calls, tt.want, tt.calls)
			}
		})
	}
}

// fakePings answers pings as a list says, past its end with a pong. Its pongs come at once.
type fakePings struct {
	list     []string
	mu       sync.Mutex
	calls    int           // guarded by mu
	answered atomic.Uint64 // the latest ping answered
	block    chan struct{} // when set, each write waits for it
}

func (f *fakePings) ping(ctx context.Context, n uint64) error {
	f.mu.Lock()
	f.calls++
	what := "ok"
	if f.calls <= len(f.list) {
		what = f.list[f.calls-1]
	}
	f.mu.Unlock()
	if f.block != nil {
		<-f.block
	}
	switch what {
	case "ok":
		f.answered.Store(n)
	case "closed":
		return net.ErrClosed
	}
	return nil
}

// count is how many pings were written, or begun.
func (f *fakePings) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakePings) sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return min(f.calls, len(f.list))
}

// TestLatePongIsNotTheNextPings: a pong that arrives after the beat that judged its ping does not
// count as the answer to the ping sent at that beat.
func TestLatePongIsNotTheNextPings(t *testing.T) {
	f := &fakePings{list: []string{"miss", "miss"}}
	dead := false
	p := newPinger(context.Background(), maxMissedPongs, f.ping, f.answered.Load, func() { dead = true })
	p.beat() // ping 1, whose pong does not come in time
	p.inFlight.Wait()
	p.beat() // ping 1 missed; ping 2
	p.inFlight.Wait()
	f.answered.Store(1) // ping 1's pong, late; ping 2's never comes
	p.beat()            // ping 2 unanswered: two in a row
	p.stop()
	if !dead {
		t.Error("a late pong to one ping was taken for the answer to the next")
	}
}

// TestBlockedPingIsNotRepeated: while one ping's write is blocked (a client that stopped
// reading), a beat sends no other, and the blocked one counts as unanswered: two such beats
// close the connection.
func TestBlockedPingIsNotRepeated(t *testing.T) {
	f := &fakePings{block: make(chan struct{})}
	dead := false
	p := newPinger(context.Background(), maxMissedPongs, f.ping, f.answered.Load, func() { dead = true })
	p.beat() // ping 1, blocked
	for deadline := time.Now().Add(10 * time.Second); f.count() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ping was never written")
		}
	}
	p.beat() // ping 1 missed; still blocked, so no ping 2
	p.beat() // missed again: dead
	close(f.block)
	p.stop()
	if calls := f.count(); calls != 1 || !dead {
		t.Errorf("%d pings written and dead = %v, want 1 and true", calls, dead)
	}
}
