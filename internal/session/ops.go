package session

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
)

// What a client asks of its session, whatever protocol it asks in: a protocol package decodes
// a request, calls one of these, and encodes the answer. A refusal is a *fault.Error, or the
// error a producer or the verifier returned (a *fault.Error or an error the protocol maps
// itself, such as an auth error), for the protocol to put in its own frame.

// SubscribeRequest is a subscription a client asks for: a table one (Table set) or a channel
// one (Channel set).
type SubscribeRequest struct {
	// Ref is the protocol's reference to the request, which the reply that the subscription
	// is live quotes (Codec.Subscribed): herald.v1's request id.
	Ref string
	// Sub is the client's name for the subscription, unique on the connection.
	Sub string

	Table   string          // schema-qualified, "public.items"
	Filter  json.RawMessage // the filter package's grammar; nil: every row
	Columns []string        // nil: every column

	Channel string // a channel name, or a pattern
	Event   string // an event-name filter; empty: every event

	// From resumes after this position, the last the client received; zero starts at the
	// stream's head. Its kind matches the subscription's: the protocol checked it.
	From stream.Position
}

// subscribeTimeout bounds what a subscribe waits for from its producer (a table's catalog
// lookup): a client's request must not hold its reader for longer.
const subscribeTimeout = 10 * time.Second

// Subscribe attaches a subscription. Once it is live, the reply that says so (Codec.Subscribed,
// quoting r.Ref), then a resumed subscription's gap, then what was delivered meanwhile are
// queued in that order; nothing of it reaches the client before the reply. It returns the
// refusal otherwise, and nil too when the session closed meanwhile (there is no one to answer).
// ctx bounds the wait for the producer, as does the session's closing.
func (s *Session) Subscribe(ctx context.Context, r SubscribeRequest) error {
	if r.Table != "" {
		if s.deps.Tables == nil {
			return &fault.Error{Code: fault.CodeUnknownTable, Field: "table",
				Message: fmt.Sprintf("table %q is not streamed by this server: table subscriptions need the changefeed (changefeed.database_url) and the table in changefeed.tables", r.Table)}
		}
	} else if s.deps.Channels == nil {
		return &fault.Error{Code: fault.CodeUnavailable, Message: "this server does not serve channels"}
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil
	case s.subs[r.Sub] != nil:
		s.mu.Unlock()
		return &fault.Error{Code: fault.CodeDuplicateSubscription, Field: "sub",
			Message: fmt.Sprintf("this connection already has a subscription %q; choose another sub, or unsubscribe it first", r.Sub)}
	case len(s.subs) >= s.cfg.MaxSubscriptions:
		s.mu.Unlock()
		return &fault.Error{Code: fault.CodeTooManySubscriptions,
			Message: fmt.Sprintf("this connection holds %d subscriptions, the most it may; unsubscribe from one first, or open another connection", s.cfg.MaxSubscriptions)}
	}
	// The slot is taken before the producer is asked, so a concurrent subscribe with the same
	// sub cannot slip in; it is live for Push from the moment the producer attaches it.
	s.gen++
	su := &subscription{sub: r.Sub, key: r.Sub + "\x00" + strconv.FormatUint(s.gen, 36),
		head: s.cfg.Codec.Head(r.Sub, r.Table != ""), unsubscribe: func() {}, pending: true}
	s.subs[r.Sub] = su
	s.mu.Unlock()

	var (
		head        stream.Position
		key         []string
		unsubscribe func()
		err         error
	)
	if r.Table != "" {
		// The request's context, cut short by the session's close: what is asked on the
		// client's behalf is not worth finishing once either has ended.
		ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		cut := make(chan struct{})
		stop := context.AfterFunc(s.life, func() { cancel(); close(cut) })
		var ts TableSubscription
		ts, err = s.deps.Tables.Subscribe(ctx, s, r)
		head, key, unsubscribe = ts.Head, ts.Key, ts.Unsubscribe
		if !stop() {
			<-cut // the close's cut is running: it is this call's, so wait for it
		}
		cancel()
	} else {
		head, unsubscribe, err = s.deps.Channels.Subscribe(s, r.Sub, r.Channel, r.Event)
	}
	if err == nil {
		if fe := checkFrom(r, head); fe != nil {
			unsubscribe()
			err = fe
		}
	}
	if err != nil {
		s.mu.Lock()
		if s.subs[r.Sub] == su {
			delete(s.subs, r.Sub)
		}
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	if s.closed || s.subs[r.Sub] != su {
		s.mu.Unlock()
		// Outside mu: a producer delivering holds its own lock while it takes mu.
		unsubscribe()
		return nil
	}
	defer s.mu.Unlock()
	su.unsubscribe = unsubscribe
	pos := head
	if !r.From.IsZero() {
		pos = r.From
	}
	// Under mu, so nothing of this subscription is queued before these: the reply, the resume
	// gap if any, then what arrived while they were being prepared.
	s.sendAt(su.key, pos.String(), s.cfg.Codec.Subscribed(nil, r.Ref, r.Sub, pos, key))
	if gap := resumeGap(r, head); gap != nil {
		s.push(su.key, su.head, stream.NewGap(gap))
	}
	for _, it := range su.buffered {
		s.push(su.key, su.head, it)
	}
	if g := su.overflow; g != nil {
		s.lanes.Gap(su.key, g.first, g.last, g.count, stream.ReasonLaneFull)
	}
	su.buffered, su.bufferedBytes, su.overflow, su.pending = nil, 0, nil, false
	return nil
}

// checkFrom refuses a from that cannot be honoured: a channel position on a pattern that spans
// channels (it names one channel's stream), or one past the channel's head in its epoch (from
// another deployment, or a client bug). Resuming from either would lose items silently.
func checkFrom(r SubscribeRequest, head stream.Position) *fault.Error {
	if r.From.IsZero() || !r.From.IsChannel() {
		return nil
	}
	switch {
	case head.IsZero():
		return &fault.Error{Code: fault.CodeBadPosition, Field: "from",
			Message: fmt.Sprintf("channel %q is a pattern spanning channels, so a position in one channel's stream cannot resume it; subscribe without from", r.Channel)}
	case r.From.Epoch == head.Epoch && r.From.Offset > head.Offset:
		return &fault.Error{Code: fault.CodeBadPosition, Field: "from",
			Message: fmt.Sprintf("from %s is past the channel's head %s; subscribe without from and re-read the view", r.From, head)}
	}
	return nil
}

// resumeGap is the gap a resumed subscription starts with: this server keeps no history yet, so
// every item between from and the stream's head is reported lost, and a from of another epoch
// means the stream was reset. The gap says how many were lost only when that is exact: for
// a channel without an event filter, every offset between from and the head was one
// publication this subscription would have had.
func resumeGap(r SubscribeRequest, head stream.Position) *stream.Gap {
	from := r.From
	switch {
	case from.IsZero() || head.IsZero():
		return nil
	case from.IsTable():
		// No table history is kept yet: every change after from up to the head is lost. A from
		// past the head is a change this node has not routed yet (it restarted, and re-reads
		// what its slot had not confirmed): Tables holds back everything up to it.
		if from.LSN < head.LSN || from.LSN == head.LSN && from.Idx > 0 {
			first := stream.Position{}
			if from.Idx > 0 {
				first = stream.TablePosition(from.LSN, from.Idx+1)
			}
			return &stream.Gap{First: first, Last: head, Reason: stream.ReasonHistoryExpired}
		}
		return nil
	case from.Epoch != head.Epoch:
		return &stream.Gap{Last: head, Reason: stream.ReasonStreamReset}
	case from.Offset < head.Offset:
		g := &stream.Gap{First: stream.ChannelPosition(head.Epoch, from.Offset+1), Last: head,
			Reason: stream.ReasonHistoryExpired}
		if r.Event == "" {
			g.Lost = head.Offset - from.Offset
		}
		return g
	}
	return nil
}

// Unsubscribe ends a subscription of this session. Another connection's subscription, or one
// that never existed, is not_found alike: the answer says nothing about anyone else. Nothing of
// the subscription is written after what the caller queues next (its reply).
func (s *Session) Unsubscribe(sub string) error {
	s.mu.Lock()
	su := s.subs[sub]
	delete(s.subs, sub)
	s.mu.Unlock()
	if su == nil {
		return &fault.Error{Code: fault.CodeNotFound, Field: "sub",
			Message: fmt.Sprintf("this connection has no subscription %q", sub)}
	}
	su.unsubscribe()
	s.lanes.Forget(su.key)
	return nil
}

// Publish sends data to one channel on the client's behalf and returns its position there.
func (s *Session) Publish(channel, event string, data json.RawMessage) (stream.Position, error) {
	if !s.cfg.ClientPublish {
		return stream.Position{}, &fault.Error{Code: fault.CodePublishNotAllowed,
			Message: "clients may not publish on this server (channels.client_publish is off); publish through the HTTP API"}
	}
	if s.deps.Channels == nil {
		return stream.Position{}, &fault.Error{Code: fault.CodeUnavailable, Message: "this server does not serve channels"}
	}
	return s.deps.Channels.Publish(channel, event, data)
}

// Expiry is when the session's token expires: At, and In, what is left of it by the server's
// clock, in whole seconds, so a client with a skewed clock can still schedule its refresh.
// Zero when the token does not expire.
type Expiry struct {
	At time.Time
	In time.Duration
}

// Expiry is the current token's expiry.
func (s *Session) Expiry() Expiry {
	return s.expiryOf(s.Identity())
}

func (s *Session) expiryOf(id auth.Identity) Expiry {
	if id.ExpiresAt.IsZero() {
		return Expiry{}
	}
	return Expiry{At: id.ExpiresAt, In: id.ExpiresAt.Sub(s.cfg.Now()).Truncate(time.Second)}
}

// Refresh replaces the session's token, keeping every subscription, and returns the new
// token's expiry. A token for another identity is refused and the old one stays in force. A
// token that does not verify is refused with the verifier's error (an *auth.Error).
func (s *Session) Refresh(token string) (Expiry, error) {
	if s.deps.Verifier == nil {
		return Expiry{}, &fault.Error{Code: fault.CodeUnauthorized, Message: "this server verifies no tokens"}
	}
	ident, err := s.deps.Verifier.Verify(token)
	if err != nil {
		return Expiry{}, err
	}
	s.mu.Lock()
	if ident.Subject != s.identity.Subject || s.identity.Anonymous {
		s.mu.Unlock()
		return Expiry{}, &fault.Error{Code: fault.CodeForbidden, Field: "token",
			Message: "the new token is for another identity; a refresh keeps the identity, so reconnect to change it"}
	}
	s.identity = ident
	s.armExpiry()
	s.mu.Unlock()
	return s.expiryOf(ident), nil
}

// Limits are what the session bounds, for a protocol to announce (herald.v1's welcome).
type Limits struct {
	MaxFrameBytes    int
	MaxSubscriptions int
	PingInterval     time.Duration
	// MaxUnreadReplies is how many replies may wait unread before the session stops taking
	// requests: the control lane's frames less the room one more request's replies need.
	MaxUnreadReplies int
}

// Limits is the session's limits.
func (s *Session) Limits() Limits {
	return Limits{
		MaxFrameBytes:    s.cfg.MaxFrameBytes,
		MaxSubscriptions: s.cfg.MaxSubscriptions,
		PingInterval:     s.cfg.PingInterval,
		MaxUnreadReplies: s.cfg.Lanes.MaxControlFrames - s.replyFrames(),
	}
}
