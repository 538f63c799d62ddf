package heraldv1

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/session"
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

func (g *gatedTransport) Close(session.CloseReason, string) { g.once.Do(func() { close(g.closed) }) }

// fakeChannels attaches every subscription and publishes nothing by itself.
type fakeChannels struct{}

func (fakeChannels) Subscribe(stream.Receiver, string, string, string, stream.Position) (session.ChannelSubscription, error) {
	return session.ChannelSubscription{Unsubscribe: func() {}}, nil
}
func (fakeChannels) Publish(string, string, json.RawMessage) (stream.Position, error) {
	return stream.Position{}, nil
}

// TestNothingOfAnEndedSubscriptionFollowsItsUnsubscribed: data queued for a subscription when
// it is unsubscribed, and then replaced by a new one with the same sub, is never written after
// the unsubscribed reply.
func TestNothingOfAnEndedSubscriptionFollowsItsUnsubscribed(t *testing.T) {
	g := newGated()
	s, err := session.New(session.Config{Codec: wire.Codec{}}, session.Deps{Channels: fakeChannels{}}, g, auth.Identity{Subject: "u"})
	if err != nil {
		t.Fatal(err)
	}
	c := New(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	c.Handle(ctx, &wire.Subscribe{ID: "1", Sub: "x", Channel: "rooms/a"})
	<-g.started // the writer holds its first batch: subscribed
	for i := 0; i < 3; i++ {
		s.Push("x", stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition("e", 1), Channel: "rooms/a", Data: []byte(`"old"`)}))
	}
	c.Handle(ctx, &wire.Unsubscribe{ID: "2", Sub: "x"})
	c.Handle(ctx, &wire.Subscribe{ID: "3", Sub: "x", Channel: "rooms/b"})
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

// TestRepliesWaitingUnread: past limits.max_unread_replies replies waiting, an SSE command is
// refused rate_limited with its id, and nothing of it is queued; welcome announces the limit.
// (How a WebSocket reader waits instead is the session's AwaitReplyRoom, tested there.)
func TestRepliesWaitingUnread(t *testing.T) {
	newConn := func(t *testing.T) (*Conn, *session.Session) {
		t.Helper()
		cfg := session.Config{SlowTimeout: time.Hour, CloseGrace: time.Millisecond, Lanes: delivery.Config{MaxControlFrames: 8}, Codec: wire.Codec{}}
		s, err := session.New(cfg, session.Deps{}, newGated(), auth.Identity{Subject: "u"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Abort)
		return New(s), s
	}
	// A lane of 8 less room for one request's replies (4).
	const unread = 4
	ping := func(id string) *wire.Ping { return &wire.Ping{ID: id} }
	ctx := context.Background()

	t.Run("welcome advertises the limit", func(t *testing.T) {
		c, _ := newConn(t)
		if got := c.Welcome("").Limits.MaxUnreadReplies; got != unread {
			t.Errorf("max_unread_replies = %d, want %d", got, unread)
		}
	})
	t.Run("a command past the limit is rate limited", func(t *testing.T) {
		c, s := newConn(t)
		for i := range unread + 1 {
			if we := c.TryHandle(ctx, ping(fmt.Sprint(i))); we != nil {
				t.Fatalf("command %d with %d replies unread: %v, want it taken", i, i, we)
			}
		}
		we := c.TryHandle(ctx, ping("over"))
		if we == nil || we.Code != wire.CodeRateLimited || we.ID != "over" || we.StatusCode() != 429 {
			t.Fatalf("command with %d replies unread: %v, want 429 rate_limited with its id", unread+1, we)
		}
		if got := s.Stats().ControlAdmitted; got != unread+1 {
			t.Errorf("%d replies queued, want %d: a refused command has no reply on the stream", got, unread+1)
		}
	})
}
