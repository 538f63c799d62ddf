package session

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gatedTransport records what is written, and holds each Write until the gate opens.
type gatedTransport struct {
	mu      sync.Mutex
	frames  []string
	started chan struct{} // one token per Write begun
	gate    chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func newGated() *gatedTransport {
	return &gatedTransport{started: make(chan struct{}, 64), gate: make(chan struct{}), closed: make(chan struct{})}
}

func (g *gatedTransport) Write(deadline time.Time, items []delivery.Item) error {
	g.started <- struct{}{}
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	select {
	case <-g.gate:
	case <-timeout.C:
		return os.ErrDeadlineExceeded
	case <-g.closed:
		return context.Canceled
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, it := range items {
		g.frames = append(g.frames, string(it.Head)+string(it.Body))
	}
	return nil
}

func (g *gatedTransport) Close(CloseReason, string) { g.once.Do(func() { close(g.closed) }) }

// fakeChannels attaches every subscription and publishes nothing by itself.
type fakeChannels struct{}

func (fakeChannels) Subscribe(stream.Receiver, string, string, string, wire.Position) (ChannelSubscription, error) {
	return ChannelSubscription{Unsubscribe: func() {}}, nil
}
func (fakeChannels) Publish(string, string, json.RawMessage) (wire.Position, error) {
	return wire.Position{}, nil
}

// TestResumeGap: the resync a resumed subscription starts with. lost is given only when it is
// exact, and absent otherwise: a client must never read "0 lost" into a gap of thousands.
func TestResumeGap(t *testing.T) {
	tbl := func(lsn uint64, idx uint32) wire.Position { return wire.TablePosition(change.LSN(lsn), idx) }
	ch := wire.ChannelPosition
	tests := []struct {
		name string
		r    SubscribeRequest
		head wire.Position
		want *stream.Gap
	}{
		{"no from", SubscribeRequest{Sub: "s", Channel: "c"}, ch("e", 9), nil},
		// A channel's resume is its producer's (ChannelSubscription.Replay).
		{"channel behind its head", SubscribeRequest{Sub: "s", Channel: "c", From: ch("e", 4)}, ch("e", 9), nil},
		{"table behind its head", SubscribeRequest{Sub: "s", Table: "public.t", From: tbl(0x10, 0)}, tbl(0x90, 0),
			&stream.Gap{Last: tbl(0x90, 0), Reason: stream.ReasonHistoryExpired}},
		{"table inside the head's transaction", SubscribeRequest{Sub: "s", Table: "public.t", From: tbl(0x90, 2)}, tbl(0x90, 0),
			&stream.Gap{First: tbl(0x90, 3), Last: tbl(0x90, 0), Reason: stream.ReasonHistoryExpired}},
		{"table at its head", SubscribeRequest{Sub: "s", Table: "public.t", From: tbl(0x90, 0)}, tbl(0x90, 0), nil},
		{"table ahead of its head", SubscribeRequest{Sub: "s", Table: "public.t", From: tbl(0x99, 1)}, tbl(0x90, 0), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resumeGap(tt.r, tt.head)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("resumeGap (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRepliesWaitingUnread: past limits.max_unread_replies replies waiting, a reader waits
// (AwaitReplyRoom) until the writer takes replies, or closes the session as too slow once
// SlowTimeout passes; ReplyRoom, which refuses rather than waits, says no meanwhile.
func TestRepliesWaitingUnread(t *testing.T) {
	newSession := func(t *testing.T, slow time.Duration) *Session {
		t.Helper()
		cfg := Config{SlowTimeout: slow, CloseGrace: time.Millisecond, Lanes: delivery.Config{MaxControlFrames: 8}, Codec: wire.Codec{}}
		s, err := New(cfg, Deps{}, newGated(), auth.Identity{Subject: "u"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Abort)
		return s
	}
	// A lane of 8 less room for one request's replies (4).
	const unread = 4
	reply := []byte(`{"type":"pong","id":"1"}`)

	t.Run("limits announce it", func(t *testing.T) {
		s := newSession(t, time.Hour)
		if got := s.Limits().MaxUnreadReplies; got != unread {
			t.Errorf("MaxUnreadReplies = %d, want %d", got, unread)
		}
	})
	t.Run("a reader waits until the writer takes replies", func(t *testing.T) {
		s := newSession(t, time.Hour)
		for range unread + 1 {
			if !s.ReplyRoom() {
				t.Fatal("ReplyRoom = false with room left")
			}
			s.Send(reply)
		}
		if s.ReplyRoom() {
			t.Fatalf("ReplyRoom = true with %d replies unread", unread+1)
		}
		got := make(chan bool)
		go func() { got <- s.AwaitReplyRoom(context.Background()) }()
		select {
		case ok := <-got:
			t.Fatalf("AwaitReplyRoom = %v with %d replies unread, want it to wait", ok, unread+1)
		case <-time.After(20 * time.Millisecond):
		}
		var b delivery.Batch
		if !s.lanes.TryNext(&b) {
			t.Fatal("the writer found nothing")
		}
		if !<-got {
			t.Error("AwaitReplyRoom = false once the writer took the replies, want true")
		}
	})
	t.Run("replies unread past the slow timeout close the session", func(t *testing.T) {
		s := newSession(t, 10*time.Millisecond)
		for range unread + 1 {
			s.Send(reply)
		}
		if s.AwaitReplyRoom(context.Background()) {
			t.Fatal("AwaitReplyRoom = true with the replies never taken")
		}
		if got := s.CloseReason(); got != CloseTooSlow {
			t.Errorf("close code %s, want too_slow", got)
		}
	})
}

// stuckTransport takes the first Write and never finishes it, whatever its deadline says,
// until Close: a client that stopped reading, seen through a transport that cannot time out.
type stuckTransport struct {
	writes chan struct{} // one token per Write begun
	closed chan struct{}
	once   sync.Once
}

func (st *stuckTransport) Write(time.Time, []delivery.Item) error {
	st.writes <- struct{}{}
	<-st.closed
	return context.Canceled
}

func (st *stuckTransport) Close(CloseReason, string) { st.once.Do(func() { close(st.closed) }) }

// TestStalledDataLaneClosesTooSlow: a data lane that keeps losing frames for SlowTimeout closes
// the session with too_slow; one whose stall ended in time does not.
func TestStalledDataLaneClosesTooSlow(t *testing.T) {
	tests := []struct {
		name    string
		catchUp bool // the writer catches up before SlowTimeout has passed
		want    CloseReason
	}{
		{"stalled past the timeout", false, CloseTooSlow},
		{"caught up in time", true, CloseNormal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const slow = 50 * time.Millisecond
			var tr Transport
			st := &stuckTransport{writes: make(chan struct{}, 64), closed: make(chan struct{})}
			g := newGated()
			tr = st
			if tt.catchUp {
				tr = g
			}
			cfg := Config{SlowTimeout: slow, CloseGrace: time.Millisecond, Lanes: delivery.Config{MaxDataFrames: 1}, Codec: wire.Codec{}}
			s, err := New(cfg, Deps{Channels: fakeChannels{}}, tr, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			if err := s.Subscribe(ctx, SubscribeRequest{Ref: "1", Sub: "x", Channel: "rooms/a"}); err != nil {
				t.Fatal(err)
			}
			if tt.catchUp {
				<-g.started // the writer holds subscribed
			} else {
				<-st.writes
			}
			for i := range 3 { // one queued, then a stall
				s.Push("x", stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition("e", uint64(i+1)), Channel: "rooms/a", Data: []byte("1")}))
			}
			if _, ok := s.lanes.Stalled(); !ok {
				t.Fatal("the data lane is not stalled")
			}
			if tt.catchUp {
				close(g.gate) // the writer drains the lane: the stall ends
				deadline := time.Now().Add(5 * time.Second)
				for {
					if _, ok := s.lanes.Stalled(); !ok {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the stall never ended")
					}
					time.Sleep(time.Millisecond)
				}
				// Well past the timeout the stall would have had: nothing closed the session.
				select {
				case <-s.Closing():
					t.Fatalf("a session whose stall ended in time closed with %s", s.CloseReason())
				case <-time.After(4 * slow):
				}
				s.Close(CloseNormal, "")
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the session never ended")
			}
			if got := s.CloseReason(); got != tt.want {
				t.Errorf("close code %s, want %s", got, tt.want)
			}
		})
	}
}

// TestIdleSessionHoldsNoGoroutine: a started session with nothing to write holds no goroutine:
// its writer ended when the lanes drained, and no watcher or poller runs in its place.
func TestIdleSessionHoldsNoGoroutine(t *testing.T) {
	const n = 20
	ctx, cancel := context.WithCancel(context.Background())
	sessions := make([]*Session, n)
	for i := range sessions {
		s, err := New(Config{Codec: wire.Codec{}}, Deps{Channels: fakeChannels{}}, &recordingTransport{}, auth.Identity{Subject: "u"})
		if err != nil {
			t.Fatal(err)
		}
		s.Send([]byte(`{"type":"pong","id":"1"}`)) // something to write, so each writer has work before it ends
		s.Start(ctx)
		sessions[i] = s
	}
	defer func() {
		cancel()
		for _, s := range sessions {
			s.Wait()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := sessionGoroutines()
		if got == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle sessions hold %d goroutines, want none", n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, s := range sessions {
		if w := s.transport.(*recordingTransport).written(); len(w) != 1 {
			t.Errorf("session %d wrote %d frames, want its welcome", i, len(w))
		}
	}
}

// sessionGoroutines counts the goroutines running a Session's code.
func sessionGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/session.(*Session)") {
			count++
		}
	}
	return count
}

// TestTimersEndWithTheSession: the session's end waits for a timer callback that is running,
// and once it has ended no callback runs: no timer's goroutine outlives the session.
func TestTimersEndWithTheSession(t *testing.T) {
	s, err := New(Config{Codec: wire.Codec{}}, Deps{}, newGated(), auth.Identity{Subject: "u"})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	s.afterFunc(0, func() { close(started); <-release })
	<-started
	ended := make(chan struct{})
	go func() { s.Abort(); close(ended) }()
	select {
	case <-ended:
		t.Fatal("the session ended while a timer callback was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-ended

	ran := make(chan struct{})
	fired := s.afterFunc(0, func() { close(ran) })
	select {
	case <-ran:
		t.Fatal("a timer callback ran after the session ended")
	case <-time.After(20 * time.Millisecond):
	}
	fired.Stop()
}
