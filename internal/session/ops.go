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
	// Presence asks for the channel's presence too: a roster after the reply, then joins and
	// leaves. One channel only, which the protocol checked.
	Presence bool

	// From resumes after this position, the last the client received; zero starts at the
	// stream's head. Its kind matches the subscription's: the protocol checked it.
	From stream.Position
	// Snapshot asks for a table's current rows first (see SnapshotFunc): a table only, without
	// From, which the protocol checked.
	Snapshot bool

	// Durable binds the connection to the identity's durable subscription named Sub (one
	// channel, no From, no Presence: the protocol checked it), through Deps.Durable. Single
	// asks for acknowledged delivery: exactly one bound connection gets each message.
	Durable bool
	Single  bool

	// Identity is who asks: the session sets it, for the producer's policy.
	Identity auth.Identity
}

// subscribeTimeout bounds what a subscribe waits for from its producer (a table's catalog
// lookup): a client's request must not hold its reader for longer.
const subscribeTimeout = 10 * time.Second

// Subscribe attaches a subscription. Once it is live, the reply that says so (Codec.Subscribed,
// quoting r.Ref), then what a resumed subscription is owed first (a channel's replay, or a
// gap), then what was delivered meanwhile are queued in that order; nothing of it reaches the
// client before the reply. It returns the refusal otherwise, and nil too when the session
// closed meanwhile (there is no one to answer). ctx bounds the wait for the producer, as does
// the session's closing.
func (s *Session) Subscribe(ctx context.Context, r SubscribeRequest) error {
	if r.Durable {
		switch {
		case r.Table != "":
			return &fault.Error{Code: fault.CodeNotImplemented, Field: "mode",
				Message: "durable subscriptions (mode single, or durable) are served for channels only; subscribe to the table without them"}
		case s.deps.Durable == nil:
			return &fault.Error{Code: fault.CodeUnavailable, Field: "mode", Message: "this server does not serve durable subscriptions"}
		}
	}
	if r.Table != "" {
		if s.deps.Tables == nil {
			return &fault.Error{Code: fault.CodeUnknownTable, Field: "table",
				Message: fmt.Sprintf("table %q is not streamed by this server: table subscriptions need the changefeed (changefeed.database_url) and the table in changefeed.tables", r.Table)}
		}
	} else if s.deps.Channels == nil {
		return &fault.Error{Code: fault.CodeUnavailable, Message: "this server does not serve channels"}
	} else if r.Presence && s.deps.Presence == nil {
		return &fault.Error{Code: fault.CodeUnavailable, Field: "presence", Message: "this server does not serve presence; subscribe without it"}
	}
	r.Identity = s.Identity()
	if r.Table == "" && s.deps.Policy != nil {
		if err := s.deps.Policy.Channel("subscribe", r.Channel, r.Event, r.Identity); err != nil {
			return err
		}
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
		head: s.cfg.Codec.Head(r.Sub, r.Table != ""), table: r.Table != "", unsubscribe: func() {}, pending: true,
		durable: r.Durable}
	s.subs[r.Sub] = su
	s.mu.Unlock()

	var (
		head        stream.Position
		key         []string
		unsubscribe func()
		recheck     func(auth.Identity) error
		replay      []*stream.Item // a resumed channel subscription's
		ack         func(context.Context, stream.Position) error
		snap        SnapshotFunc // a table snapshot's
		err         error
	)
	if r.Durable {
		ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		var ds DurableSubscription
		ds, err = s.deps.Durable.Bind(ctx, s, s.id, r, func(fe *fault.Error) { s.endDurable(su, fe) })
		cancel()
		head, unsubscribe, ack = ds.Head, ds.Unsubscribe, ds.Ack
		if p := s.deps.Policy; p != nil {
			recheck = channelRecheck(p, r.Channel, r.Event)
		}
	} else if r.Table != "" {
		// The request's context, cut short by the session's close: what is asked on the
		// client's behalf is not worth finishing once either has ended.
		ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		cut := make(chan struct{})
		stop := context.AfterFunc(s.life, func() { cancel(); close(cut) })
		var ts TableSubscription
		ts, err = s.deps.Tables.Subscribe(ctx, s, r)
		head, key, unsubscribe, recheck, snap = ts.Head, ts.Key, ts.Unsubscribe, ts.Recheck, ts.Snapshot
		if err == nil && r.Snapshot && snap == nil {
			unsubscribe()
			err = &fault.Error{Code: fault.CodeUnavailable, Field: "snapshot", Message: "this server does not read snapshots; subscribe without snapshot"}
		}
		if !stop() {
			<-cut // the close's cut is running: it is this call's, so wait for it
		}
		cancel()
	} else {
		var cs ChannelSubscription
		cs, err = s.deps.Channels.Subscribe(s, r.Sub, r.Channel, r.Event, r.From)
		head, unsubscribe, replay = cs.Head, cs.Unsubscribe, cs.Replay
		if p := s.deps.Policy; p != nil {
			recheck = channelRecheck(p, r.Channel, r.Event)
		}
	}
	if err == nil {
		if fe := checkFrom(r, head); fe != nil {
			unsubscribe()
			err = fe
		}
	}
	if err == nil && r.Durable {
		s.mu.Lock()
		if fe := su.ended; fe != nil {
			// Deleted by another of the holder's connections while this bind was answered.
			err = fe
		}
		s.mu.Unlock()
		if err != nil {
			unsubscribe()
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
	su.unsubscribe, su.recheck = unsubscribe, recheck
	su.ack = ack
	pos := head
	if !r.From.IsZero() {
		pos = r.From
	}
	var snapCtx context.Context // the snapshot's, which unsubscribing cancels
	if r.Snapshot {
		// Its position comes with its live; the reply names none, and a transport marks it
		// live with no position (an SSE event id's "-"), from which a reconnect before the
		// rows are whole takes it up with a snapshot again.
		pos = stream.Position{}
		var cancel context.CancelFunc
		snapCtx, cancel = context.WithCancel(s.life)
		prev := su.unsubscribe
		su.unsubscribe = func() { cancel(); prev() }
		// Counted under mu, before the session can be found closed: its end waits for it.
		s.snapshots.Add(1)
	}
	// Under mu, so nothing of this subscription is queued before these: the reply, the resume
	// gap or replay if any, then what arrived while they were being prepared. The producer
	// delivers after what it replays, so the two meet exactly.
	posText := pos.String()
	if posText == "" {
		posText = stream.NoPositionText // a pattern, or a snapshot before its live: it has none, but is live from here
	}
	s.sendAt(su.key, posText, s.cfg.Codec.Subscribed(nil, r.Ref, r.Sub, pos, key, r.Snapshot))
	var first *stream.Item
	if gap := resumeGap(r, head); gap != nil {
		first = stream.NewGap(gap)
		s.push(su.key, su.head, first, false, nil)
	}
	if first == nil && len(replay) > 0 {
		first = replay[0]
	}
	if !r.From.IsZero() {
		s.cfg.Counts.resumed(su.table, first)
	}
	for _, it := range replay {
		s.push(su.key, su.head, it, false, nil)
	}
	for _, it := range su.buffered {
		s.push(su.key, su.head, it, su.durable, nil)
	}
	if g := su.overflow; g != nil {
		s.lanes.Gap(su.key, g.first, g.last, g.count, stream.ReasonLaneFull)
	}
	su.buffered, su.bufferedBytes, su.overflow, su.pending = nil, 0, nil, false
	s.cfg.Counts.started(su.table)
	s.mu.Unlock()
	if snapCtx != nil {
		go s.runSnapshot(snapCtx, su, snap)
	}
	if r.Presence {
		s.watchPresence(ctx, su, r.Channel)
	}
	return nil
}

// watchPresence makes su, whose subscribed reply is queued, a presence subscriber of channel:
// the roster follows the reply on the control lane, then the joins and leaves. Outside mu: the
// presence lock is taken before a session's. A watch that fails ends the subscription with an
// unprompted unsubscribed saying why, as a refresh that no longer allows it would.
func (s *Session) watchPresence(ctx context.Context, su *subscription, channel string) {
	unwatch, err := s.deps.Presence.Watch(ctx, channel, s, su.sub)
	s.mu.Lock()
	if err == nil && s.subs[su.sub] == su {
		prev := su.unsubscribe
		su.unsubscribe = func() { prev(); unwatch() }
		s.mu.Unlock()
		return
	}
	if err == nil {
		s.mu.Unlock()
		unwatch() // ended meanwhile
		return
	}
	if s.subs[su.sub] != su {
		s.mu.Unlock()
		return
	}
	fe, ok := err.(*fault.Error)
	if !ok {
		fe = &fault.Error{Code: fault.CodeUnavailable, Message: "the channel's presence could not be read; subscribe again later"}
	}
	release := s.endLocked(su, fe)
	s.mu.Unlock()
	release()
}

// endLocked takes su, still this session's, out of its subscriptions and queues the unprompted
// unsubscribed saying fe, under mu, so nothing of su is queued after it. The caller calls
// release once it has let go of mu (a producer delivering holds its own lock while it takes
// mu): it detaches su from its producer and drops what the lanes still hold of it.
func (s *Session) endLocked(su *subscription, fe *fault.Error) (release func()) {
	delete(s.subs, su.sub)
	s.endedLocked(su)
	s.sendEnd(su.key, s.cfg.Codec.Ended(nil, su.sub, fe))
	return func() {
		su.unsubscribe()
		s.lanes.Forget(su.key)
	}
}

// Track makes this connection a member of channel's presence with meta (compact JSON, or nil),
// or replaces its meta there, and returns its member id: the identity's subject and the
// session's id. The channel's presence rule decides first; a connection tracks at most
// MaxSubscriptions channels.
func (s *Session) Track(ctx context.Context, channel string, meta json.RawMessage) (member string, err error) {
	if s.deps.Presence == nil {
		return "", &fault.Error{Code: fault.CodeUnavailable, Message: "this server does not serve presence"}
	}
	id := s.Identity()
	if s.deps.Policy != nil {
		if err := s.deps.Policy.Channel("presence", channel, "", id); err != nil {
			return "", err
		}
	}
	member = id.Subject + "/" + s.id
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return "", &fault.Error{Code: fault.CodeUnavailable, Message: "the connection is closing"}
	case s.tracked[channel] == "" && len(s.tracked) >= s.cfg.MaxSubscriptions:
		s.mu.Unlock()
		return "", &fault.Error{Code: fault.CodeTooManySubscriptions, Field: "channel",
			Message: fmt.Sprintf("this connection tracks %d channels, the most it may (limits.max_subscriptions); untrack one first", s.cfg.MaxSubscriptions)}
	}
	if s.tracked == nil {
		s.tracked = make(map[string]string)
	}
	// Recorded before the store is asked, so a close meanwhile untracks it; forgotten again
	// if the store refuses a new member.
	_, had := s.tracked[channel]
	s.tracked[channel] = member
	s.mu.Unlock()
	if err := s.deps.Presence.Track(ctx, channel, stream.Member{ID: member, Subject: id.Subject, Meta: meta}); err != nil {
		if !had {
			s.mu.Lock()
			if s.tracked != nil {
				delete(s.tracked, channel)
			}
			s.mu.Unlock()
		}
		return "", err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		// The session ended while the store was asked: its untrack may have run first.
		_, _ = s.deps.Presence.Untrack(context.WithoutCancel(ctx), channel, member)
	}
	return member, nil
}

// Untrack ends this connection's membership of channel's presence; not_found when it has none.
func (s *Session) Untrack(ctx context.Context, channel string) error {
	s.mu.Lock()
	member, ok := s.tracked[channel]
	delete(s.tracked, channel)
	s.mu.Unlock()
	if !ok || s.deps.Presence == nil {
		return &fault.Error{Code: fault.CodeNotFound, Field: "channel",
			Message: fmt.Sprintf("this connection is not a member of channel %q's presence", channel)}
	}
	_, err := s.deps.Presence.Untrack(ctx, channel, member)
	return err
}

// untrackTimeout bounds how long a closing session spends untracking its members; past it, a
// member the store did not hear about expires by its TTL.
const untrackTimeout = 5 * time.Second

// untrackAll untracks every member of a session that has ended, so its leaves go out now.
func (s *Session) untrackAll(tracked map[string]string) {
	if len(tracked) == 0 || s.deps.Presence == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), untrackTimeout)
	defer cancel()
	for channel, member := range tracked {
		if _, err := s.deps.Presence.Untrack(ctx, channel, member); err != nil {
			// Debug: the presence, or the server over it, logs a failure's cause.
			s.log.Debug("presence: untrack at close failed; the member expires by its TTL", "channel", channel, "err", err)
		}
	}
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

// resumeGap is the gap a resumed table subscription starts with when its producer could not
// replay what came after from (the producer then reports its head, not from): every change
// between from and the stream's head is reported lost. A channel subscription's is its
// producer's, in its replay (ChannelSubscription.Replay).
func resumeGap(r SubscribeRequest, head stream.Position) *stream.Gap {
	from := r.From
	if !from.IsTable() || head.IsZero() || from == head {
		// Not a table resume, or the producer starts the subscription right after from: it
		// replayed what came between from its history.
		return nil
	}
	// The history did not reach from: every change after it up to the head is lost. A from
	// past the head is a change this node has not routed yet (it restarted, and re-reads what
	// its slot had not confirmed): Tables holds back everything up to it.
	if from.LSN < head.LSN || from.LSN == head.LSN && from.Idx > 0 {
		first := stream.Position{}
		if from.Idx > 0 {
			first = stream.TablePosition(from.LSN, from.Idx+1)
		}
		return &stream.Gap{First: first, Last: head, Reason: stream.ReasonHistoryExpired}
	}
	return nil
}

// Unsubscribe ends a subscription of this session. Another connection's subscription, or one
// that never existed, is not_found alike: the answer says nothing about anyone else. Nothing of
// the subscription is written after what the caller queues next (its reply).
func (s *Session) Unsubscribe(sub string) error {
	s.mu.Lock()
	su := s.subs[sub]
	if su != nil {
		delete(s.subs, sub)
		s.endedLocked(su)
	}
	s.mu.Unlock()
	if su == nil {
		return &fault.Error{Code: fault.CodeNotFound, Field: "sub",
			Message: fmt.Sprintf("this connection has no subscription %q", sub)}
	}
	su.unsubscribe()
	s.lanes.Forget(su.key)
	return nil
}

// endDurable ends su, bound to a durable subscription that was deleted under it, with an
// unprompted unsubscribed saying why; one still pending is refused with it instead.
func (s *Session) endDurable(su *subscription, fe *fault.Error) {
	s.mu.Lock()
	if s.subs[su.sub] != su {
		s.mu.Unlock()
		return
	}
	if su.pending {
		su.ended = fe
		s.mu.Unlock()
		return
	}
	release := s.endLocked(su, fe)
	s.mu.Unlock()
	release()
}

// Ack settles the message at pos of subscription sub, bound to a durable subscription with
// acknowledged delivery: nil when settled now or before by this connection; not_found when sub
// is no such subscription of this connection, or the message is not its to settle.
func (s *Session) Ack(ctx context.Context, sub string, pos stream.Position) error {
	s.mu.Lock()
	su := s.subs[sub]
	var ack func(context.Context, stream.Position) error
	if su != nil && !su.pending {
		ack = su.ack
	}
	s.mu.Unlock()
	if ack == nil {
		return &fault.Error{Code: fault.CodeNotFound, Field: "sub",
			Message: fmt.Sprintf("this connection has no subscription %q with acknowledged delivery (mode single)", sub)}
	}
	return ack(ctx, pos)
}

// Forget deletes the identity's durable subscription sub, and its queue: it unbinds this
// connection first when it is bound to it. A subscription of this connection that is not
// durable is bad_frame; not_found when the identity has no durable subscription of that name.
func (s *Session) Forget(ctx context.Context, sub string) error {
	if s.deps.Durable == nil {
		return &fault.Error{Code: fault.CodeNotFound, Field: "sub", Message: "this server keeps no durable subscriptions"}
	}
	s.mu.Lock()
	su := s.subs[sub]
	durable := su != nil && su.durable
	s.mu.Unlock()
	if su != nil {
		if !durable {
			return &fault.Error{Code: fault.CodeBadFrame, Field: "forget",
				Message: fmt.Sprintf("subscription %q is not durable, so there is nothing to forget; unsubscribe without forget", sub)}
		}
		if err := s.Unsubscribe(sub); err != nil {
			return err
		}
	}
	return s.deps.Durable.Forget(ctx, s.Identity(), sub)
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
	if s.deps.Policy != nil {
		if err := s.deps.Policy.Channel("publish", channel, event, s.Identity()); err != nil {
			return stream.Position{}, err
		}
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
	s.recheck(ident)
	return s.expiryOf(ident), nil
}

// recheck judges every subscription again for a refreshed identity's claims, and ends each one
// they no longer allow with an unprompted unsubscribed saying why; the connection stays up.
// The subscriptions are judged outside mu: a table's recheck takes the router's lock, which
// is taken before a session's (a producer delivering).
func (s *Session) recheck(id auth.Identity) {
	s.mu.Lock()
	subs := make([]*subscription, 0, len(s.subs))
	for _, su := range s.subs {
		if su.recheck != nil && !su.pending {
			subs = append(subs, su)
		}
	}
	s.mu.Unlock()
	for _, su := range subs {
		err := su.recheck(id)
		if err == nil {
			continue
		}
		fe, ok := err.(*fault.Error)
		if !ok {
			fe = &fault.Error{Code: fault.CodeInternal, Message: "the subscription could not be judged again for the new token", Err: err}
		}
		s.mu.Lock()
		if s.subs[su.sub] != su {
			s.mu.Unlock()
			continue // ended meanwhile
		}
		release := s.endLocked(su, fe)
		s.mu.Unlock()
		release()
	}
	s.recheckPresence(id)
}

// recheckPresence judges every channel the connection tracks again by its presence rule, for a
// refreshed identity's claims, and untracks each one they no longer allow (its leave goes to
// the channel), telling the client with an unprompted error naming the channel.
func (s *Session) recheckPresence(id auth.Identity) {
	if s.deps.Policy == nil || s.deps.Presence == nil {
		return
	}
	s.mu.Lock()
	tracked := make(map[string]string, len(s.tracked))
	for ch, m := range s.tracked {
		tracked[ch] = m
	}
	s.mu.Unlock()
	for ch, member := range tracked {
		err := s.deps.Policy.Channel("presence", ch, "", id)
		if err == nil {
			continue
		}
		s.mu.Lock()
		if s.tracked[ch] != member {
			s.mu.Unlock()
			continue // untracked meanwhile
		}
		delete(s.tracked, ch)
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), untrackTimeout)
		_, _ = s.deps.Presence.Untrack(ctx, ch, member)
		cancel()
		code := fault.CodeForbidden
		if fe, ok := err.(*fault.Error); ok {
			code = fe.Code
		}
		s.Send(s.cfg.Codec.Fault(nil, "", &fault.Error{Code: code, Field: "channel",
			Message: fmt.Sprintf("this connection is no longer a member of channel %q's presence: the refreshed token's claims do not pass its presence rule", ch)}))
	}
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

// channelRecheck judges a channel subscription again for a refreshed token's claims. Made by a
// function of its own, so that the closure holds the two strings it needs rather than the whole
// request, which it would otherwise move to the heap for the life of the subscription.
func channelRecheck(p Policy, channel, event string) func(auth.Identity) error {
	return func(id auth.Identity) error { return p.Channel("subscribe", channel, event, id) }
}
