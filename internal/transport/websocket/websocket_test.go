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

// TestPinger: the pinger closes only after maxMissedPongs pings in a row went unanswered, never
// on one missed pong, and never for a connection that failed some other way. Its beats are
// driven here one at a time, each once the ping before it has had its answer or is waiting.
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
			f := newFakePings(tt.pings)
			dead := false
			p := newPinger(context.Background(), maxMissedPongs, f.ping, func() { dead = true })
			// One beat per ping of the list, and one more to judge the last.
			for range len(tt.pings) + 1 {
				p.beat()
				f.settle(t, p)
			}
			f.closeConn()
			p.stop()
			if calls := f.sent(); dead != tt.want || calls != tt.calls {
				t.Errorf("dead = %v after %d pings, want %v after %d", dead, calls, tt.want, tt.calls)
			}
		})
	}
}

// fakePings answers pings as a list says, past its end with a pong.
type fakePings struct {
	list    []string
	mu      sync.Mutex
	calls   int                   // guarded by mu
	waiting int                   // guarded by mu: pings whose pong never comes, blocked
	late    map[int]chan struct{} // guarded by mu: by call, closed for a waiting ping's late pong
	closed  chan struct{}         // closed when the connection is
}

func newFakePings(list []string) *fakePings {
	return &fakePings{list: list, closed: make(chan struct{}), late: map[int]chan struct{}{}}
}

func (f *fakePings) ping(ctx context.Context) error {
	f.mu.Lock()
	f.calls++
	what := "ok"
	if f.calls <= len(f.list) {
		what = f.list[f.calls-1]
	}
	late := make(chan struct{})
	if what == "miss" {
		f.waiting++
		f.late[f.calls] = late
	}
	f.mu.Unlock()
	switch what {
	case "miss":
		select {
		case <-f.closed:
			return net.ErrClosed
		case <-late:
			return nil
		}
	case "closed":
		return net.ErrClosed
	}
	return nil
}

func (f *fakePings) sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return min(f.calls, len(f.list))
}

// settle waits until the ping the last beat sent, if any, was answered, failed, or is waiting
// for a pong that does not come.
func (f *fakePings) settle(t *testing.T, p *pinger) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		n := f.calls
		waiting := f.waiting
		what := "ok"
		if n >= 1 && n <= len(f.list) {
			what = f.list[n-1]
		}
		f.mu.Unlock()
		switch {
		case uint64(n) != p.sent: // the ping's goroutine has not called yet
		case n == 0 || p.done:
			return
		case what == "ok" && p.answered.Load() == uint64(n):
			return
		case what == "closed" && p.failed.Load():
			return
		case what == "miss" && waiting > 0:
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping %d (%s) never settled", n, what)
		}
	}
}

func (f *fakePings) closeConn() { close(f.closed) }

// answerLate sends the pong of waiting ping n (from 1).
func (f *fakePings) answerLate(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.late[n])
}

// TestLatePongIsNotTheNextPings: a pong that arrives after the beat that judged its ping does not
// count as the answer to the ping sent at that beat.
func TestLatePongIsNotTheNextPings(t *testing.T) {
	f := newFakePings([]string{"miss", "miss"})
	dead := false
	p := newPinger(context.Background(), maxMissedPongs, f.ping, func() { dead = true })
	p.beat() // ping 1, whose pong does not come in time
	f.settle(t, p)
	p.beat() // ping 1 missed; ping 2
	f.settle(t, p)
	f.answerLate(1) // ping 1's pong, late; ping 2's never comes
	for deadline := time.Now().Add(10 * time.Second); p.answered.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the late pong was not taken")
		}
	}
	p.beat() // ping 2 unanswered: two in a row
	f.closeConn()
	p.stop()
	if !dead {
		t.Error("a late pong to one ping was taken for the answer to the next")
	}
}
