package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// HandleFrame decodes and answers one client frame. Replies, including the error frame of a
// refused request, go onto the control lane; a frame the connection cannot survive closes it.
// It is the reader's: called from one goroutine per WebSocket, or from SSE command handlers.
func (s *Session) HandleFrame(b []byte) {
	f, err := wire.Decode(b, s.cfg.MaxFrameBytes)
	if err != nil {
		we, ok := wire.AsError(err)
		if !ok {
			we = &wire.Error{Code: wire.CodeBadFrame, Message: err.Error()}
		}
		s.Send(we)
		return
	}
	s.Handle(f)
}

// Handle answers one decoded client frame. Frames are handled one at a time, in the order
// they arrive: a WebSocket has one reader, but SSE commands come over concurrent requests, and
// a subscribe must not race the unsubscribe that follows it.
func (s *Session) Handle(f wire.Frame) {
	s.handleMu.Lock()
	defer s.handleMu.Unlock()
	s.handle(f)
}

// TryHandle answers f as Handle does if the control lane has room for its replies, and refuses
// it otherwise, returning the rate_limited error to send instead. It is for SSE commands: each
// arrives on a request of its own, so holding one back would only pile up waiting requests.
func (s *Session) TryHandle(f wire.Frame) *wire.Error {
	s.handleMu.Lock()
	defer s.handleMu.Unlock()
	// Under handleMu, so no other request's replies can take the room between the check and
	// the handling.
	if ok, _ := s.lanes.ControlRoom(s.replyFrames(), s.replyBytes()); !ok {
		return &wire.Error{ID: idOf(f), Code: wire.CodeRateLimited,
			Message: fmt.Sprintf("the replies to earlier commands wait unread on the stream, more than limits.max_unread_replies (%d) or more bytes than it queues; read them, then retry after a backoff of at least 1 s", s.cfg.Lanes.MaxControlFrames-s.replyFrames())}
	}
	s.handle(f)
	return nil
}

func (s *Session) handle(f wire.Frame) {
	switch f := f.(type) {
	case *wire.Connect:
		s.Send(&wire.Error{ID: f.ID, Code: wire.CodeBadFrame, Field: "type",
			Message: "this connection is already connected; send connect only as the first frame"})
	case *wire.Refresh:
		s.refresh(f)
	case *wire.Subscribe:
		if err := s.Subscribe(f); err != nil {
			s.Send(err)
		}
	case *wire.Unsubscribe:
		if err := s.Unsubscribe(f.ID, f.Sub); err != nil {
			s.Send(err)
			return
		}
		s.Send(&wire.Unsubscribed{ID: f.ID, Sub: f.Sub})
	case *wire.Publish:
		s.publish(f)
	case *wire.Ping:
		s.Send(&wire.Pong{ID: f.ID})
	case *wire.Ack:
		s.Send(&wire.Error{ID: f.ID, Code: wire.CodeNotImplemented,
			Message: "acknowledged delivery is reserved in protocol v1 and this server does not serve it yet; use mode broadcast"})
	default:
		s.Send(&wire.Error{Code: wire.CodeUnknownType, Message: fmt.Sprintf("frame type %q is not one a client sends", f.Type())})
	}
}

// Subscribe attaches a subscription and answers subscribed once it is live. A refused
// subscription is returned as the error frame to send.
func (s *Session) Subscribe(f *wire.Subscribe) *wire.Error {
	if f.Mode == wire.ModeSingle {
		return &wire.Error{ID: f.ID, Code: wire.CodeNotImplemented, Field: "mode",
			Message: `mode "single" (acknowledged delivery) is reserved in protocol v1 and not served yet; use "broadcast"`}
	}
	if f.Table != "" {
		if s.deps.Tables == nil {
			return &wire.Error{ID: f.ID, Code: wire.CodeUnknownTable, Field: "table",
				Message: fmt.Sprintf("table %q is not streamed by this server: table subscriptions need the changefeed (changefeed.database_url) and the table in changefeed.tables", f.Table)}
		}
	} else if s.deps.Channels == nil {
		return &wire.Error{ID: f.ID, Code: wire.CodeUnavailable, Message: "this server does not serve channels"}
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil
	case s.subs[f.Sub] != nil:
		s.mu.Unlock()
		return &wire.Error{ID: f.ID, Code: wire.CodeDuplicateSubscription, Field: "sub",
			Message: fmt.Sprintf("this connection already has a subscription %q; choose another sub, or unsubscribe it first", f.Sub)}
	case len(s.subs) >= s.cfg.MaxSubscriptions:
		s.mu.Unlock()
		return &wire.Error{ID: f.ID, Code: wire.CodeTooManySubscriptions,
			Message: fmt.Sprintf("this connection holds %d subscriptions, the most it may; unsubscribe from one first, or open another connection", s.cfg.MaxSubscriptions)}
	}
	// The slot is taken before the hub is asked, so a concurrent subscribe with the same sub
	// cannot slip in; it is live for Push from the moment the producer attaches it.
	s.gen++
	su := &subscription{sub: f.Sub, key: f.Sub + "\x00" + strconv.FormatUint(s.gen, 36),
		head: s.cfg.Codec.Head(f.Sub, f.Table != ""), unsubscribe: func() {}, pending: true}
	s.subs[f.Sub] = su
	s.mu.Unlock()

	var (
		head        wire.Position
		key         []string
		unsubscribe func()
		err         error
	)
	if f.Table != "" {
		ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
		var ts TableSubscription
		ts, err = s.deps.Tables.Subscribe(ctx, s, f)
		head, key, unsubscribe = ts.Head, ts.Key, ts.Unsubscribe
		cancel()
	} else {
		head, unsubscribe, err = s.deps.Channels.Subscribe(s, f.Sub, f.Channel, f.Event)
	}
	if err != nil {
		s.mu.Lock()
		if s.subs[f.Sub] == su {
			delete(s.subs, f.Sub)
		}
		s.mu.Unlock()
		if we, ok := wire.AsError(err); ok {
			we.ID = f.ID
			return we
		}
		return &wire.Error{ID: f.ID, Code: wire.CodeBadFrame, Field: "channel", Message: err.Error(), Err: err}
	}
	if we := checkFrom(f, head); we != nil {
		s.mu.Lock()
		if s.subs[f.Sub] == su {
			delete(s.subs, f.Sub)
		}
		s.mu.Unlock()
		unsubscribe()
		return we
	}
	s.mu.Lock()
	if s.closed || s.subs[f.Sub] != su {
		s.mu.Unlock()
		// Outside mu: a producer delivering holds its own lock while it takes mu.
		unsubscribe()
		return nil
	}
	defer s.mu.Unlock()
	su.unsubscribe = unsubscribe
	pos := head
	if !f.From.IsZero() {
		pos = f.From
	}
	// Under mu, so nothing of this subscription is queued before these: subscribed, the
	// resume gap if any, then what arrived while they were being prepared.
	s.sendAt(su.key, pos.String(), &wire.Subscribed{ID: f.ID, Sub: f.Sub, Pos: pos, Key: key})
	if gap := resumeGap(f, head); gap != nil {
		s.push(su.key, su.head, stream.NewGap(gap), nil)
	}
	for _, it := range su.buffered {
		s.push(su.key, su.head, it, nil)
	}
	if g := su.overflow; g != nil {
		s.lanes.Gap(su.key, g.first, g.last, g.count, stream.ReasonLaneFull)
	}
	su.buffered, su.overflow, su.pending = nil, nil, false
	return nil
}

// checkFrom refuses a from that cannot be honoured: a channel position on a pattern that spans
// channels (it names one channel's stream), or one past the channel's head in its epoch (from
// another deployment, or a client bug). Resuming from either would lose items silently.
func checkFrom(f *wire.Subscribe, head wire.Position) *wire.Error {
	if f.From.IsZero() || !f.From.IsChannel() {
		return nil
	}
	switch {
	case head.IsZero():
		return &wire.Error{ID: f.ID, Code: wire.CodeBadPosition, Field: "from",
			Message: fmt.Sprintf("channel %q is a pattern spanning channels, so a position in one channel's stream cannot resume it; subscribe without from", f.Channel)}
	case f.From.Epoch == head.Epoch && f.From.Offset > head.Offset:
		return &wire.Error{ID: f.ID, Code: wire.CodeBadPosition, Field: "from",
			Message: fmt.Sprintf("from %s is past the channel's head %s; subscribe without from and re-read the view", f.From, head)}
	}
	return nil
}

// resumeGap is the gap a resumed subscription starts with: this server keeps no history yet, so
// every item between from and the stream's head is reported lost, and a from of another epoch
// means the stream was reset. The resync says how many were lost only when that is exact: for
// a channel without an event filter, every offset between from and the head was one
// publication this subscription would have had.
func resumeGap(f *wire.Subscribe, head wire.Position) *stream.Gap {
	from := f.From
	switch {
	case from.IsZero() || head.IsZero():
		return nil
	case from.IsTable():
		// No table history is kept yet: every change after from up to the head is lost. A from
		// past the head is a change this node has not routed yet (it restarted, and re-reads
		// what its slot had not confirmed): Tables holds back everything up to it.
		if from.LSN < head.LSN || from.LSN == head.LSN && from.Idx > 0 {
			first := wire.Position{}
			if from.Idx > 0 {
				first = wire.TablePosition(from.LSN, from.Idx+1)
			}
			return &stream.Gap{First: first, Last: head, Reason: stream.ReasonHistoryExpired}
		}
		return nil
	case from.Epoch != head.Epoch:
		return &stream.Gap{Last: head, Reason: stream.ReasonStreamReset}
	case from.Offset < head.Offset:
		r := &stream.Gap{First: wire.ChannelPosition(head.Epoch, from.Offset+1), Last: head,
			Reason: stream.ReasonHistoryExpired}
		if f.Event == "" {
			r.Lost = head.Offset - from.Offset
		}
		return r
	}
	return nil
}

// Unsubscribe ends a subscription of this session. Another connection's subscription, or one
// that never existed, is not_found alike: the answer says nothing about anyone else.
func (s *Session) Unsubscribe(id, sub string) *wire.Error {
	s.mu.Lock()
	su := s.subs[sub]
	delete(s.subs, sub)
	s.mu.Unlock()
	if su == nil {
		return &wire.Error{ID: id, Code: wire.CodeNotFound, Field: "sub",
			Message: fmt.Sprintf("this connection has no subscription %q", sub)}
	}
	su.unsubscribe()
	s.lanes.Forget(su.key)
	return nil
}

func (s *Session) publish(f *wire.Publish) {
	if !s.cfg.ClientPublish {
		s.Send(&wire.Error{ID: f.ID, Code: wire.CodePublishNotAllowed,
			Message: "clients may not publish on this server (channels.client_publish is off); publish through the HTTP API"})
		return
	}
	if s.deps.Channels == nil {
		s.Send(&wire.Error{ID: f.ID, Code: wire.CodeUnavailable, Message: "this server does not serve channels"})
		return
	}
	pos, err := s.deps.Channels.Publish(f.Channel, f.Event, f.Data)
	if err != nil {
		we, ok := wire.AsError(err)
		if !ok {
			we = &wire.Error{Code: wire.CodeBadFrame, Field: "channel", Message: err.Error(), Err: err}
		}
		we.ID = f.ID
		s.Send(we)
		return
	}
	s.Send(&wire.Published{ID: f.ID, Pos: pos})
}

// refresh replaces the session's token, keeping every subscription. A token for another
// identity is refused and the old one stays in force.
func (s *Session) refresh(f *wire.Refresh) {
	if s.deps.Verifier == nil {
		s.Send(&wire.Error{ID: f.ID, Code: wire.CodeUnauthorized, Message: "this server verifies no tokens"})
		return
	}
	ident, err := s.deps.Verifier.Verify(f.Token)
	if err != nil {
		s.Send(AuthError(f.ID, err))
		return
	}
	s.mu.Lock()
	if ident.Subject != s.identity.Subject || s.identity.Anonymous {
		s.mu.Unlock()
		s.Send(&wire.Error{ID: f.ID, Code: wire.CodeForbidden, Field: "token",
			Message: "the new token is for another identity; a refresh keeps the identity, so reconnect to change it"})
		return
	}
	s.identity = ident
	s.armExpiry()
	s.mu.Unlock()
	r := &wire.Refreshed{ID: f.ID}
	if !ident.ExpiresAt.IsZero() {
		r.ExpiresAt, r.ExpiresIn = ident.ExpiresAt, ident.ExpiresAt.Sub(s.cfg.Now()).Truncate(time.Second)
	}
	s.Send(r)
}

// AuthError is the error frame for a token that did not verify: token_expired for one that has
// expired or is not valid yet (a fresh token cures both), unauthorized otherwise. At connect it
// is followed by the close code AuthCloseCode gives.
func AuthError(id string, err error) *wire.Error {
	var ae *auth.Error
	msg := "the token did not verify"
	if errors.As(err, &ae) {
		msg = ae.Detail
		if ae.Fix != "" {
			msg += "; " + ae.Fix
		}
	}
	code := wire.CodeUnauthorized
	if errors.Is(err, auth.ErrExpired) || errors.Is(err, auth.ErrNotYetValid) {
		code = wire.CodeTokenExpired
	}
	return &wire.Error{ID: id, Code: code, Field: "token", Message: msg}
}

// AuthCloseCode is the close code that follows AuthError's frame e at connect: 4100 with
// token_expired, 4101 otherwise, so the frame and the close always say the same.
func AuthCloseCode(e *wire.Error) wire.CloseCode {
	if e.Code == wire.CodeTokenExpired {
		return wire.CloseTokenExpired
	}
	return wire.CloseAuthFailed
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
	}
	return ""
}
