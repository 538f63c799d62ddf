package session

import (
	"context"
	"encoding/json"
	"fmt"
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

func (g *gatedTransport) Close(wire.CloseCode, string) { g.once.Do(func() { close(g.closed) }) }

// fakeChannels attaches every subscription and publishes nothing by itself.
type fakeChannels struct{}

func (fakeChannels) Subscribe(stream.Receiver, string, string, string) (wire.Position, func(), error) {
	return wire.Position{}, func() {}, nil
}
func (fakeChannels) Publish(string, string, json.RawMessage) (wire.Position, error) {
	return wire.Position{}, nil
}

// TestNothingOfAnEndedSubscriptionFollowsItsUnsubscribed: data queued for a subscription when
// it is unsubscribed, and then replaced by a new one with the same sub, is never written after
// the unsubscribed reply.
func TestNothingOfAnEndedSubscriptionFollowsItsUnsubscribed(t *testing.T) {
	g := newGated()
	s, err := New(Config{}, Deps{Channels: fakeChannels{}}, g, auth.Identity{Subject: "u"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	s.Handle(&wire.Subscribe{ID: "1", Sub: "x", Channel: "rooms/a"})
	<-g.started // the writer holds its first batch: subscribed
	for i := 0; i < 3; i++ {
		s.Push("x", stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition("e", 1), Channel: "rooms/a", Data: []byte(`"old"`)}))
	}
	s.Handle(&wire.Unsubscribe{ID: "2", Sub: "x"})
	s.Handle(&wire.Subscribe{ID: "3", Sub: "x", Channel: "rooms/b"})
	s.Push("x", stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition("f", 1), Channel: "rooms/b", Data: []byte(`"new"`)}))
	close(g.gate)

	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		frames := append([]string(nil), g.frames...)
		g.mu.Unlock()
		if len(frames) > 0 && strings.Contains(frames[len(frames)-1], `"new"`) {
			unsubscribedAt := -1
			for i, f := range frames {
				if strings.Contains(f, `"type":"unsubscribed"`) {
					unsubscribedAt = i
				}
				if unsubscribedAt >= 0 && strings.Contains(f, `"old"`) {
					t.Fatalf("frame %d of the ended subscription came after its unsubscribed: %q", i, frames)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new subscription's frame never came: %q", frames)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestResumeGap: the resync a resumed subscription starts with. lost is given only when it is
// exact, and absent otherwise: a client must never read "0 lost" into a gap of thousands.
func TestResumeGap(t *testing.T) {
	tbl := func(lsn uint64, idx uint32) wire.Position { return wire.TablePosition(change.LSN(lsn), idx) }
	ch := wire.ChannelPosition
	tests := []struct {
		name string
		f    wire.Subscribe
		head wire.Position
		want *stream.Gap
	}{
		{"no from", wire.Subscribe{Sub: "s", Channel: "c"}, ch("e", 9), nil},
		{"channel at its head", wire.Subscribe{Sub: "s", Channel: "c", From: ch("e", 9)}, ch("e", 9), nil},
		{"channel behind its head", wire.Subscribe{Sub: "s", Channel: "c", From: ch("e", 4)}, ch("e", 9),
			&stream.Gap{First: ch("e", 5), Last: ch("e", 9), Lost: 5, Reason: stream.ReasonHistoryExpired}},
		// Offsets count every publication; the event filter would have passed an unknown few.
		{"channel with an event filter", wire.Subscribe{Sub: "s", Channel: "c", Event: "chat", From: ch("e", 4)}, ch("e", 9),
			&stream.Gap{First: ch("e", 5), Last: ch("e", 9), Reason: stream.ReasonHistoryExpired}},
		{"channel of another epoch", wire.Subscribe{Sub: "s", Channel: "c", From: ch("old", 4)}, ch("e", 9),
			&stream.Gap{Last: ch("e", 9), Reason: stream.ReasonStreamReset}},
		{"table behind its head", wire.Subscribe{Sub: "s", Table: "public.t", From: tbl(0x10, 0)}, tbl(0x90, 0),
			&stream.Gap{Last: tbl(0x90, 0), Reason: stream.ReasonHistoryExpired}},
		{"table inside the head's transaction", wire.Subscribe{Sub: "s", Table: "public.t", From: tbl(0x90, 2)}, tbl(0x90, 0),
			&stream.Gap{First: tbl(0x90, 3), Last: tbl(0x90, 0), Reason: stream.ReasonHistoryExpired}},
		{"table at its head", wire.Subscribe{Sub: "s", Table: "public.t", From: tbl(0x90, 0)}, tbl(0x90, 0), nil},
		{"table ahead of its head", wire.Subscribe{Sub: "s", Table: "public.t", From: tbl(0x99, 1)}, tbl(0x90, 0), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resumeGap(&tt.f, tt.head)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("resumeGap (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRepliesWaitingUnread: past limits.max_unread_replies replies waiting, an SSE command is
// refused rate_limited and a WebSocket reader waits, until the writer takes replies, or closes
// the session as too slow once SlowTimeout passes.
func TestRepliesWaitingUnread(t *testing.T) {
	newSession := func(t *testing.T, slow time.Duration) *Session {
		t.Helper()
		cfg := Config{SlowTimeout: slow, CloseGrace: time.Millisecond, Lanes: delivery.Config{MaxControlFrames: 8}}
		s, err := New(cfg, Deps{}, newGated(), auth.Identity{Subject: "u"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Abort)
		return s
	}
	// A lane of 8 less room for one request's replies (4).
	const unread = 4
	ping := func(id string) *wire.Ping { return &wire.Ping{ID: id} }

	t.Run("welcome advertises the limit", func(t *testing.T) {
		s := newSession(t, time.Hour)
		if got := s.Welcome("").Limits.MaxUnreadReplies; got != unread {
			t.Errorf("max_unread_replies = %d, want %d", got, unread)
		}
	})
	t.Run("a command past the limit is rate limited", func(t *testing.T) {
		s := newSession(t, time.Hour)
		for i := range unread + 1 {
			if we := s.TryHandle(ping(fmt.Sprint(i))); we != nil {
				t.Fatalf("command %d with %d replies unread: %v, want it taken", i, i, we)
			}
		}
		we := s.TryHandle(ping("over"))
		if we == nil || we.Code != wire.CodeRateLimited || we.ID != "over" || we.StatusCode() != 429 {
			t.Fatalf("command with %d replies unread: %v, want 429 rate_limited with its id", unread+1, we)
		}
		if got := s.Stats().ControlAdmitted; got != unread+1 {
			t.Errorf("%d replies queued, want %d: a refused command has no reply on the stream", got, unread+1)
		}
	})
	t.Run("a reader waits until the writer takes replies", func(t *testing.T) {
		s := newSession(t, time.Hour)
		for i := range unread + 1 {
			s.Handle(ping(fmt.Sprint(i)))
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
		for i := range unread + 1 {
			s.Handle(ping(fmt.Sprint(i)))
		}
		if s.AwaitReplyRoom(context.Background()) {
			t.Fatal("AwaitReplyRoom = true with the replies never taken")
		}
		if got := s.CloseCode(); got != wire.CloseTooSlow {
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

func (st *stuckTransport) Close(wire.CloseCode, string) { st.once.Do(func() { close(st.closed) }) }

// TestStalledDataLaneClosesTooSlow: a data lane that keeps losing frames for SlowTimeout closes
// the session with too_slow; one whose stall ended in time does not.
func TestStalledDataLaneClosesTooSlow(t *testing.T) {
	tests := []struct {
		name    string
		catchUp bool // the writer catches up before SlowTimeout has passed
		want    wire.CloseCode
	}{
		{"stalled past the timeout", false, wire.CloseTooSlow},
		{"caught up in time", true, wire.CloseNormal},
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
			cfg := Config{SlowTimeout: slow, CloseGrace: time.Millisecond, Lanes: delivery.Config{MaxDataFrames: 1}}
			s, err := New(cfg, Deps{Channels: fakeChannels{}}, tr, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			s.Handle(&wire.Subscribe{ID: "1", Sub: "x", Channel: "rooms/a"})
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
					t.Fatalf("a session whose stall ended in time closed with %s", s.CloseCode())
				case <-time.After(4 * slow):
				}
				s.Close(wire.CloseNormal, "")
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the session never ended")
			}
			if got := s.CloseCode(); got != tt.want {
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
		s, err := New(Config{}, Deps{Channels: fakeChannels{}}, &recordingTransport{}, auth.Identity{Subject: "u"})
		if err != nil {
			t.Fatal(err)
		}
		s.Send(s.Welcome("1")) // something to write, so each writer has work before it ends
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
