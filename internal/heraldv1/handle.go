package heraldv1

import (
	"context"
	"fmt"
	"sync"

	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
)

// wire.Codec is herald.v1's encoding of what the session core queues itself.
var _ session.Codec = wire.Codec{}

// Conn is herald.v1 spoken on one session: it decodes the client's frames, acts on the
// session, and queues the replies.
type Conn struct {
	s *session.Session
	// mu serialises the handling of frames, in the order they arrive: a WebSocket has one
	// reader, but SSE commands come over concurrent requests, and a subscribe must not race
	// the unsubscribe that follows it. Taken before any lock of the session's, and held while
	// the session calls its producers.
	mu sync.Mutex
	// defs are the subscribe frames of the subscriptions this connection took, by sub, kept
	// only when Keep asked for them (an SSE stream, which a reconnect may resume whole).
	// Guarded by mu.
	defs map[string]*wire.Subscribe
}

// New returns herald.v1 on s.
func New(s *session.Session) *Conn { return &Conn{s: s} }

// Keep makes c keep the subscribe frame of each subscription it takes, until it is
// unsubscribed, for Definitions.
func (c *Conn) Keep() {
	c.mu.Lock()
	if c.defs == nil {
		c.defs = map[string]*wire.Subscribe{}
	}
	c.mu.Unlock()
}

// Definitions returns the subscribe frames of the subscriptions c took and the client did not
// unsubscribe, with their ids cleared, in no order; nil unless Keep was called. One the server
// ended (a refresh that no longer allows it) is among them: subscribing it again judges it
// again.
func (c *Conn) Definitions() []*wire.Subscribe {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*wire.Subscribe
	for _, f := range c.defs {
		out = append(out, f)
	}
	return out
}

// Session is the session c acts on.
func (c *Conn) Session() *session.Session { return c.s }

// Send encodes f and queues it on the session's control lane.
func (c *Conn) Send(f wire.Frame) {
	b, err := wire.AppendFrame(nil, f)
	if err != nil {
		// Only a raw JSON field that is not JSON fails, and the server's frames carry none
		// that it did not check: nothing to send.
		return
	}
	c.s.Send(b)
}

// Fail sends e as an error frame and closes the session with code: the error says why.
func (c *Conn) Fail(e *wire.Error, code wire.CloseCode) {
	c.Send(e)
	c.s.Close(reasonOf(code), e.Message)
}

// Welcome is the welcome frame that opens the session, answering the connect with id ("" on
// SSE, which has no connect).
func (c *Conn) Welcome(id string) *wire.Welcome {
	l, exp := c.s.Limits(), c.s.Expiry()
	return &wire.Welcome{ID: id, Version: wire.Version, Session: c.s.ID(), ExpiresAt: exp.At, ExpiresIn: exp.In,
		Limits: wire.Limits{
			MaxFrameBytes:    l.MaxFrameBytes,
			MaxSubscriptions: l.MaxSubscriptions,
			PingInterval:     l.PingInterval,
			MaxUnreadReplies: l.MaxUnreadReplies,
		}}
}

// HandleFrame decodes and answers one client frame. Replies, including the error frame of a
// refused request, go onto the control lane. It is the reader's: called from one goroutine per
// WebSocket. ctx is the reader's: a request still waiting on a producer ends with it.
func (c *Conn) HandleFrame(ctx context.Context, b []byte) {
	f, err := wire.Decode(b, c.s.Limits().MaxFrameBytes)
	if err != nil {
		we, ok := wire.AsError(err)
		if !ok {
			we = &wire.Error{Code: wire.CodeBadFrame, Message: err.Error()}
		}
		c.Send(we)
		return
	}
	c.Handle(ctx, f)
}

// Handle answers one decoded client frame, after the frames handed over before it.
func (c *Conn) Handle(ctx context.Context, f wire.Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handle(ctx, f)
}

// TryHandle answers f as Handle does if the control lane has room for its replies, and refuses
// it otherwise, returning the rate_limited error to send instead. It is for SSE commands: each
// arrives on a request of its own, so holding one back would only pile up waiting requests.
func (c *Conn) TryHandle(ctx context.Context, f wire.Frame) *wire.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Under mu, so no other request's replies can take the room between the check and the
	// handling.
	if !c.s.ReplyRoom() {
		return &wire.Error{ID: idOf(f), Code: wire.CodeRateLimited,
			Message: fmt.Sprintf("the replies to earlier commands wait unread on the stream, more than limits.max_unread_replies (%d) or more bytes than it queues; read them, then retry after a backoff of at least 1 s", c.s.Limits().MaxUnreadReplies)}
	}
	c.handle(ctx, f)
	return nil
}

func (c *Conn) handle(ctx context.Context, f wire.Frame) {
	switch f := f.(type) {
	case *wire.Connect:
		c.Send(&wire.Error{ID: f.ID, Code: wire.CodeBadFrame, Field: "type",
			Message: "this connection is already connected; send connect only as the first frame"})
	case *wire.Refresh:
		c.refresh(f)
	case *wire.Subscribe:
		if we := c.subscribe(ctx, f); we != nil {
			c.Send(we)
		}
	case *wire.Unsubscribe:
		unsubscribe := func() error { return c.s.Unsubscribe(f.Sub) }
		if f.Forget {
			unsubscribe = func() error { return c.s.Forget(ctx, f.Sub) }
		}
		if err := unsubscribe(); err != nil {
			c.Send(errorFrame(f.ID, err, ""))
			return
		}
		if c.defs != nil {
			delete(c.defs, f.Sub)
		}
		if b, err := wire.AppendFrame(nil, &wire.Unsubscribed{ID: f.ID, Sub: f.Sub}); err == nil {
			c.s.SendEnd(f.Sub, b)
		}
	case *wire.Publish:
		pos, err := c.s.Publish(f.Channel, f.Event, f.Data)
		if err != nil {
			c.Send(errorFrame(f.ID, err, "channel"))
			return
		}
		c.Send(&wire.Published{ID: f.ID, Pos: pos})
	case *wire.Track:
		member, err := c.s.Track(ctx, f.Channel, f.Meta)
		if err != nil {
			c.Send(errorFrame(f.ID, err, "channel"))
			return
		}
		c.Send(&wire.Tracked{ID: f.ID, Channel: f.Channel, Member: member})
	case *wire.Untrack:
		if err := c.s.Untrack(ctx, f.Channel); err != nil {
			c.Send(errorFrame(f.ID, err, "channel"))
			return
		}
		c.Send(&wire.Untracked{ID: f.ID, Channel: f.Channel})
	case *wire.Ping:
		c.Send(&wire.Pong{ID: f.ID})
	case *wire.Ack:
		// Answered by nothing on success: a client acking every message need not read a reply
		// for each.
		if err := c.s.Ack(ctx, f.Sub, f.Pos); err != nil {
			c.Send(errorFrame(f.ID, err, "pos"))
		}
	default:
		c.Send(&wire.Error{Code: wire.CodeUnknownType, Message: fmt.Sprintf("frame type %q is not one a client sends", f.Type())})
	}
}

// Subscribe attaches the subscription f asks for; the session queues subscribed once it is
// live. A refused subscription is returned as the error frame to send. It is for SSE's URL
// subscription, before the stream runs; a client's subscribe frame goes through Handle.
func (c *Conn) Subscribe(ctx context.Context, f *wire.Subscribe) *wire.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subscribe(ctx, f)
}

func (c *Conn) subscribe(ctx context.Context, f *wire.Subscribe) *wire.Error {
	err := c.s.Subscribe(ctx, session.SubscribeRequest{Ref: f.ID, Sub: f.Sub, Table: f.Table, Filter: f.Filter,
		Columns: f.Columns, Channel: f.Channel, Event: f.Event, From: f.From, Presence: f.Presence, Snapshot: f.Snapshot,
		Durable: f.Durable || f.Mode == wire.ModeSingle, Single: f.Mode == wire.ModeSingle})
	if err != nil {
		return errorFrame(f.ID, err, "channel")
	}
	if c.defs != nil {
		d := *f
		d.ID, d.From = "", wire.Position{}
		c.defs[f.Sub] = &d
	}
	return nil
}

// refresh replaces the session's token, keeping every subscription.
func (c *Conn) refresh(f *wire.Refresh) {
	exp, err := c.s.Refresh(f.Token)
	if err != nil {
		if _, ok := wire.AsError(err); ok {
			c.Send(errorFrame(f.ID, err, ""))
		} else {
			c.Send(AuthError(f.ID, err))
		}
		return
	}
	c.Send(&wire.Refreshed{ID: f.ID, ExpiresAt: exp.At, ExpiresIn: exp.In})
}

// idOf is the request id of a client frame, for an error that answers it.
func idOf(f wire.Frame) string {
	switch f := f.(type) {
	case *wire.Connect:
		return f.ID
	case *wire.Refresh:
		return f.ID
	case *wire.Subscribe:
		return f.ID
	case *wire.Unsubscribe:
		return f.ID
	case *wire.Publish:
		return f.ID
	case *wire.Ping:
		return f.ID
	case *wire.Ack:
		return f.ID
	case *wire.Track:
		return f.ID
	case *wire.Untrack:
		return f.ID
	}
	return ""
}
