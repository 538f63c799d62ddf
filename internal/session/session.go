package session

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
)

// Transport is the connection's wire. The session's writer goroutine is the only caller of
// Write; Close may be called from any goroutine and more than once.
type Transport interface {
	// Write writes items in order, each as one frame, and flushes them, and reports a failed
	// flush. A Write still blocked at deadline fails (a transport may let it run on a little
	// past it, never stop it sooner), and one that fails once deadline has passed counts as the
	// client's being too slow. A deadline, not a context: a socket honours a deadline with no
	// timer or goroutine of its own, and a context with a timeout per batch cost the writer
	// more than a tenth of its time.
	Write(deadline time.Time, items []delivery.Item) error
	// Close ends the connection for reason r, with a short human message; the protocol
	// renders both (herald.v1: a close code and wire.CloseReason's text).
	Close(r CloseReason, msg string)
}

// Channels is the channel hub as a session uses it.
type Channels interface {
	// Subscribe attaches sub to the channels pattern and event select, resuming after from
	// when it is a channel position (one channel only: a pattern ignores it), and returns how
	// it starts. Nothing at or before from is pushed for sub.
	Subscribe(s stream.Receiver, sub, pattern, event string, from stream.Position) (ChannelSubscription, error)
	// Publish sends data to one channel and returns its position there.
	Publish(channel, event string, data json.RawMessage) (stream.Position, error)
}

// Presence is channel presence as a session uses it (presence.Presence).
type Presence interface {
	// Track makes m a member of channel, or replaces its meta. A refusal is a *fault.Error:
	// frame_too_large on meta, presence_full, unavailable.
	Track(ctx context.Context, channel string, m stream.Member) error
	// Untrack removes member id from channel; ok is false when it was not there.
	Untrack(ctx context.Context, channel, id string) (ok bool, err error)
	// Watch pushes channel's roster to r for sub at once, then its joins and leaves, until
	// unwatch.
	Watch(ctx context.Context, channel string, r stream.Receiver, sub string) (unwatch func(), err error)
}

// Durable is the node's durable subscriptions as a session binds to them (durable.Registry,
// through the server).
type Durable interface {
	// Bind binds the connection conn, receiving on s, to the durable subscription r asks for
	// (r.Durable; r.Single for acknowledged delivery), named r.Sub for r.Identity. end is called
	// when the subscription is deleted under the connection (another connection forgot it), with
	// the reason; never while Bind runs on this call's goroutine with the registry's locks held.
	// A refusal is a client-facing error (*fault.Error).
	Bind(ctx context.Context, s stream.Receiver, conn string, r SubscribeRequest, end func(*fault.Error)) (DurableSubscription, error)
	// Forget deletes id's durable subscription named name, bound here or not: not_found when
	// there is none.
	Forget(ctx context.Context, id auth.Identity, name string) error
}

// DurableSubscription is a connection bound to a durable subscription.
type DurableSubscription struct {
	// Head is where the durable subscription started.
	Head stream.Position
	// Unsubscribe unbinds the connection; the subscription stays.
	Unsubscribe func()
	// Ack settles the message at pos for the connection (acknowledged delivery); nil for a
	// broadcast. A refusal is a *fault.Error: not_found.
	Ack func(ctx context.Context, pos stream.Position) error
}

// ChannelSubscription is an attached channel subscription.
type ChannelSubscription struct {
	// Head is the position it starts after: zero for a pattern spanning channels. For one
	// that resumes, a Head of from's epoch before from says from is past the channel's end:
	// the session refuses it (bad_position).
	Head stream.Position
	// Replay is what a resumed subscription is owed before anything pushed for it, in order:
	// the publications after from, when the channel's history still holds them all, or else
	// one gap for them (history_expired, stream_reset). The session queues it right after the
	// reply that the subscription is live.
	Replay []*stream.Item
	// Unsubscribe detaches it.
	Unsubscribe func()
}

// Tables is the table router as a session uses it.
type Tables interface {
	// Subscribe validates and attaches a table subscription. A from past the end of the
	// database's stream is refused with bad_position; nothing at or before a from is
	// delivered. A refusal is a client-facing error (*fault.Error).
	Subscribe(ctx context.Context, s stream.Receiver, r SubscribeRequest) (TableSubscription, error)
}

// TableSubscription is an attached table subscription.
type TableSubscription struct {
	Head        stream.Position // the position it starts after
	Key         []string        // the table's key columns, for the reply that it is live
	Unsubscribe func()          // detaches it
	// Recheck judges it again for a refreshed identity's claims: nil when they still allow
	// it, a *fault.Error (forbidden, policy_error) when they do not. nil: nothing to judge.
	Recheck func(auth.Identity) error
	// Snapshot, for a subscription asked with SubscribeRequest.Snapshot, reads its rows into
	// pages and joins them to its stream; see SnapshotFunc. It must be set then, and nil
	// otherwise.
	Snapshot SnapshotFunc
}

// Codec is the protocol a connection speaks, as the session uses it: it encodes the stream's
// items, and the few frames the session queues itself because their place in the stream is
// the session's to keep (the reply that a subscription is live, ahead of its data) or nobody
// asked for them (the token's expiry). Everything else a protocol sends it encodes itself and
// queues with Send. wire.Codec is herald.v1.
type Codec interface {
	stream.Encoder // the shared body of a change or a message, encoded once per item
	// Head is the per-subscription prefix of sub's data frames, for a table subscription or a
	// channel one.
	Head(sub string, table bool) []byte
	// Gap appends the frame that tells subscription sub about gap g.
	Gap(dst []byte, sub string, g *stream.Gap) []byte
	// Subscribed appends the reply to request ref that subscription sub is live after pos
	// (zero for a pattern spanning channels, and for a snapshot), with a table's key columns;
	// snapshot says its rows come first.
	Subscribed(dst []byte, ref, sub string, pos stream.Position, key []string, snapshot bool) []byte
	// Rows appends the frame of one page of subscription sub's snapshot: its rows, the
	// progress so far, and whether it is the last page.
	Rows(dst []byte, sub string, rows []change.Row, p stream.Progress, last bool) []byte
	// Live appends the frame that ends subscription sub's snapshot: its view is the table's
	// state at pos.
	Live(dst []byte, sub string, pos stream.Position) []byte
	// Expiring appends the warning that the token expires at at, in in.
	Expiring(dst []byte, at time.Time, in time.Duration) []byte
	// Fault appends the error that answers request ref, or none (""): the one that explains a
	// close the session decides, say.
	Fault(dst []byte, ref string, e *fault.Error) []byte
	// Ended appends the unprompted reply that the server ended subscription sub, for e (a
	// refresh whose claims no longer allow it).
	Ended(dst []byte, sub string, e *fault.Error) []byte
	// PresenceHead is the per-subscription prefix of sub's presence frames of kind; the
	// item's shared body (stream.Encoder) follows it.
	PresenceHead(sub string, kind stream.PresenceKind) []byte
}

// Policy is the policy gate as a session asks it about channels; table subscriptions ask
// their producer (Tables), which knows the tables' columns.
type Policy interface {
	// Channel decides whether identity id may take action on a channel: "subscribe" (a
	// channel or a pattern), "publish" (a channel, with event) or "presence" (a channel). nil allows; a refusal is
	// a *fault.Error: forbidden, or policy_error for a rule that could not decide.
	Channel(action, channel, event string, id auth.Identity) error
}

var _ stream.DeferringReceiver = (*Session)(nil)

// Verifier checks tokens: auth.Verifier.
type Verifier interface {
	Verify(token string) (auth.Identity, error)
}

// Config configures sessions. The zero value of every field means its default.
type Config struct {
	// MaxSubscriptions a connection may hold at once. Default 100.
	MaxSubscriptions int
	// MaxFrameBytes is the largest client frame read. Default DefaultMaxFrameBytes.
	MaxFrameBytes int
	// SlowTimeout closes a connection as too slow when its data lane has been losing frames
	// for this long, one write has been blocked this long, or the replies to its requests have
	// been waiting unread this long (AwaitReplyRoom). Default 10s.
	SlowTimeout time.Duration
	// PingInterval is announced in welcome; the transport does the pinging. Default 50s.
	PingInterval time.Duration
	// ExpiryWarning is how long before its token expires a client is sent expiring. Default 60s.
	ExpiryWarning time.Duration
	// ClientPublish lets clients publish to channels.
	ClientPublish bool
	// Lanes bounds each connection's queues. Its EncodeMarker is always the codec's.
	Lanes delivery.Config
	// Codec is the protocol the connection speaks. Required: New refuses a Config without
	// one. A protocol's package or transport sets it (wire.Codec for herald.v1).
	Codec Codec
	// CloseGrace is how long the writer may spend writing the frames that explain a close.
	// Default 2s.
	CloseGrace time.Duration
	// Node, when set, is the id of the node the session runs on, and starts the session's id:
	// "<node>.<random>", so a node that is handed a request for the session can tell which
	// node holds it without asking anyone (NodeOf). It holds no "." (cluster.node_id's rule).
	// Empty: the id is the random part alone.
	Node string
	// Counts, when set, is where the session counts its subscriptions, with every other
	// session sharing it: a node's metrics read it. nil: not counted.
	Counts *Counts
	Logger *slog.Logger
	Now    func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = 100
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.SlowTimeout <= 0 {
		c.SlowTimeout = 10 * time.Second
	}
	if c.PingInterval <= 0 {
		c.PingInterval = 50 * time.Second
	}
	if c.ExpiryWarning <= 0 {
		c.ExpiryWarning = time.Minute
	}
	if c.CloseGrace <= 0 {
		c.CloseGrace = 2 * time.Second
	}
	// Explicit, so the room a request's replies need, and a pending subscription's buffer, can
	// be measured against them.
	if c.Lanes.MaxDataFrames == 0 {
		c.Lanes.MaxDataFrames = delivery.DefaultMaxDataFrames
	}
	if c.Lanes.MaxDataBytes == 0 {
		c.Lanes.MaxDataBytes = delivery.DefaultMaxDataBytes
	}
	if c.Lanes.MaxControlFrames == 0 {
		c.Lanes.MaxControlFrames = delivery.DefaultMaxControlFrames
	}
	if c.Lanes.MaxControlBytes == 0 {
		c.Lanes.MaxControlBytes = delivery.DefaultMaxControlBytes
	}
	codec := c.Codec
	c.Lanes.EncodeMarker = func(dst []byte, m delivery.Marker) []byte {
		// Markers hold the text forms the frames carried, which parse back: the positions
		// the session pushed.
		first, _ := stream.ParsePosition(m.First)
		last, _ := stream.ParsePosition(m.Last)
		// Lanes keys carry a generation; the client knows the sub.
		return codec.Gap(dst, subOfKey(m.Key), &stream.Gap{First: first, Last: last, Lost: m.Lost, Reason: m.Reason})
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// DefaultMaxFrameBytes is the largest client frame read by default: herald.v1's default
// (wire.DefaultMaxFrameBytes; a test in internal/heraldv1 keeps the two equal).
const DefaultMaxFrameBytes = 64 << 10

// errNoCodec is New's refusal of a Config without a Codec.
var errNoCodec = errors.New("session: Config.Codec is not set; the protocol's package or transport sets it")

// Validate reports bounds New would refuse. It does not ask for Codec, which the protocol that
// serves a connection sets, not the operator's configuration.
func (c Config) Validate() error {
	return c.withDefaults().Lanes.Validate()
}

// Deps are what sessions use, shared by all of them.
type Deps struct {
	Channels Channels // nil: channels are not served
	Tables   Tables   // nil: tables are not served
	Verifier Verifier // nil: refresh is refused
	// Policy judges channel subscriptions and publications. nil: every one is allowed (for
	// tests of the session alone; a server always sets it, and a channel without rules is
	// closed).
	Policy Policy
	// Presence serves track, untrack and presence subscriptions. nil: presence is not served.
	Presence Presence
	// Durable serves durable subscriptions and acknowledged delivery. nil: not served.
	Durable Durable
}

// Session is one client connection.
type Session struct {
	id        string
	cfg       Config
	deps      Deps
	transport Transport
	lanes     *delivery.Lanes
	log       *slog.Logger

	mu       sync.Mutex
	identity auth.Identity            // guarded by mu
	subs     map[string]*subscription // guarded by mu
	expiry   *time.Timer              // guarded by mu: sends expiring, then closes; stopped by finish and Abort
	closed   bool                     // guarded by mu: no subscription may be added

	gen uint64 // guarded by mu: subscriptions made, for lane keys
	// tracked is the channels this connection is a member of, channel -> member id: at most
	// MaxSubscriptions. Guarded by mu; untracked when the session ends.
	tracked map[string]string
	// life ends when the session starts to close: what the session asks of others on the
	// client's behalf (a subscribe's catalog lookup) is not worth finishing after that.
	life         context.Context
	endLife      context.CancelFunc
	closing      chan struct{} // closed by the first Close or Lost
	closeMu      sync.Mutex
	closeStarted bool          // guarded by closeMu
	closeWeak    bool          // guarded by closeMu: closed by Lost; a Close may still name the reason
	closeWhy     CloseReason   // guarded by closeMu
	closeMsg     string        // guarded by closeMu
	done         chan struct{} // closed when the writer has finished the session

	// The writer runs on demand (see doc.go, Writer): a goroutine started when the lanes get
	// work, ended when they drain. ctx and stopCtx are set by Start before the first writer
	// starts, and read only by writers.
	ctx     context.Context
	stopCtx func() bool    // ends the watch on ctx; called by finish
	writers sync.WaitGroup // the writer goroutines, at most one at a time doing the work

	stallMu  sync.Mutex  // taken after mu, if both (see doc.go)
	stall    *time.Timer // guarded by stallMu: armed while the data lane is stalled, else nil
	stallEnd bool        // guarded by stallMu: the session has ended; arm no more

	// The session's timers' callbacks (afterFunc) are its goroutines: timers counts those
	// running, and once timersEnded is set none starts, so the session's end can wait for them.
	timerMu     sync.Mutex     // taken alone
	timersEnded bool           // guarded by timerMu
	timers      sync.WaitGroup // callbacks running; Add only under timerMu, before timersEnded

	// snapshots counts the goroutines reading table snapshots (runSnapshot): Add only under
	// mu while the session is not closed, so the session's end, which sets closed under mu
	// first, can wait for every one.
	snapshots sync.WaitGroup
}

// subscription is one of the session's subscriptions.
type subscription struct {
	sub string
	// key is the subscription's lanes key: the sub and a generation, so data and markers still
	// queued for an earlier subscription with the same sub are told apart and dropped.
	key         string
	head        []byte // the data frames' per-subscription prefix, encoded once
	table       bool   // a table subscription, else a channel one
	unsubscribe func()
	// recheck judges the subscription again for the claims of a refreshed token: nil when it
	// may go on. nil recheck: nothing to judge.
	recheck func(auth.Identity) error
	// toldPolicy is set once the client has been sent the error that explains a policy_error
	// gap: one per subscription, so a rule failing on every change does not flood the
	// control lane; the gaps keep coming, merged by the lanes. Guarded by the session's mu.
	toldPolicy bool
	// pending is true from the moment the producer attaches the subscription until its
	// subscribed reply is queued: data delivered meanwhile waits in buffered, so the client
	// never sees data before subscribed, nor before the resync of a resumed subscription.
	// Both guarded by the session's mu.
	pending       bool
	buffered      []*stream.Item
	bufferedBytes int // the frames' bytes of buffered: len(head) + the body, per item
	// overflow is the gap of items delivered while pending past the bound on buffered (the
	// data lane's frame bound): they join it, and it is marked right after the buffered items.
	overflow *pendingGap
	// durable is set for a connection bound to a durable subscription; ack settles its
	// messages (nil for a durable broadcast). ended is why the durable subscription was deleted
	// while the subscribe was still pending: the subscribe answers it. Guarded by the
	// session's mu.
	durable bool
	ack     func(ctx context.Context, pos stream.Position) error
	ended   *fault.Error
}

// pendingGap is a range of items a pending subscription could not buffer.
type pendingGap struct {
	first, last string
	count       uint64 // 0 when unknown
}

// New returns a session for an identity the transport has verified.
func New(cfg Config, deps Deps, t Transport, id auth.Identity) (*Session, error) {
	if cfg.Codec == nil {
		return nil, errNoCodec
	}
	cfg = cfg.withDefaults()
	s := &Session{
		id:        newID(cfg.Node),
		cfg:       cfg,
		deps:      deps,
		transport: t,
		identity:  id,
		subs:      map[string]*subscription{},
		closing:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	lc := cfg.Lanes
	lc.OnStall = s.armStall
	lc.Wake = s.startWriter
	lanes, err := delivery.New(lc)
	if err != nil {
		return nil, err
	}
	s.lanes = lanes
	s.log = cfg.Logger.With("session", s.id)
	s.life, s.endLife = context.WithCancel(context.Background())
	return s, nil
}

// newID returns an unguessable session id, node's if node is set: SSE commands are addressed by
// it. The random part is 144 bits from crypto/rand whether or not a node names it; its alphabet
// (base64url) holds no ".", so the id's first "." ends the node's id.
func newID(node string) string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:])
	if node == "" {
		return id
	}
	return node + "." + id
}

// NodeOf returns the id of the node a session id names: the part before its first ".", or ""
// when there is none or it could not be a node's id (1 to 64 ASCII letters, digits, "-" or
// "_": cluster.node_id's rule). A client sends the id back, so what it names is a claim to
// check, not a fact.
func NodeOf(id string) string {
	node, _, ok := strings.Cut(id, ".")
	if !ok || node == "" || len(node) > 64 {
		return ""
	}
	for i := 0; i < len(node); i++ {
		switch b := node[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_':
		default:
			return ""
		}
	}
	return node
}

// ID is the session's id, as welcome sends it.
func (s *Session) ID() string { return s.id }

// Identity is the session's current identity.
func (s *Session) Identity() auth.Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identity
}

// Done is closed once Run has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Stats is the session's lanes' counters.
func (s *Session) Stats() delivery.Stats { return s.lanes.Stats() }

// replyFrames and replyBytes are the room on the control lane that one more request needs: a
// request queues at most two frames (subscribed, then a resumed subscription's resync), and a
// timer or a producer may queue an unprompted one meanwhile (expiring, an error). A reply quotes
// at most what its request carried, which MaxFrameBytes bounds, besides a short message. Each
// is capped at the lane's size, so a lane smaller than the room still takes requests, one at a
// time once it is empty.
func (s *Session) replyFrames() int { return min(4, s.cfg.Lanes.MaxControlFrames) }
func (s *Session) replyBytes() int  { return min(s.cfg.MaxFrameBytes+1024, s.cfg.Lanes.MaxControlBytes) }

// ReplyRoom reports whether the control lane has room now for the replies to one more
// request: a protocol that cannot make its caller wait (SSE's commands, each on a request of
// its own) refuses the request when it has not, rather than piling up waiting requests. The
// caller serialises its requests, so no other request's replies take the room before these.
func (s *Session) ReplyRoom() bool {
	ok, _ := s.lanes.ControlRoom(s.replyFrames(), s.replyBytes())
	return ok
}

// AwaitReplyRoom waits until the control lane has room for the replies to one more request: a
// reader calls it before it hands the session the next frame, so a client that sends requests
// faster than it reads their replies is read more slowly rather than overflowing the lane. It
// reports whether to go on; it does not when ctx ends or the session closes, or when the
// replies stayed unread for SlowTimeout, and then it closes the session as too slow.
func (s *Session) AwaitReplyRoom(ctx context.Context) bool {
	var timeout <-chan time.Time
	for {
		ok, room := s.lanes.ControlRoom(s.replyFrames(), s.replyBytes())
		if ok {
			return true
		}
		if timeout == nil {
			t := time.NewTimer(s.cfg.SlowTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-room:
		case <-s.closing:
			return false
		case <-ctx.Done():
			return false
		case <-timeout:
			s.Close(CloseTooSlow, fmt.Sprintf("the replies to its requests stayed unread for %s", s.cfg.SlowTimeout))
			return false
		}
	}
}

// Send queues an encoded control frame: a reply, or an unprompted frame the protocol decided
// on. The bytes are the lanes' from then on. A control lane that cannot take it means the
// client is not reading its own replies: the session closes as too slow.
func (s *Session) Send(frame []byte) { s.sendAt("", "", frame) }

// sendAt is Send for a frame about the subscription with lanes key key, at position pos: the
// writer's item carries both, for a transport that marks positions (SSE's event ids).
func (s *Session) sendAt(key, pos string, b []byte) {
	if len(b) == 0 {
		s.log.Error("a control frame did not encode")
		return
	}
	s.queued(s.lanes.PushControlAt(b, key, pos))
}

// SendEnd is Send for the frame that ends subscription sub (the unsubscribed reply): the
// writer's item says so, for a transport that keeps each live subscription's position (SSE's
// event ids).
func (s *Session) SendEnd(sub string, frame []byte) { s.sendEnd(sub, frame) }

// sendEnd is SendEnd for a lanes key, or a sub.
func (s *Session) sendEnd(key string, b []byte) {
	if len(b) == 0 {
		s.log.Error("a control frame did not encode")
		return
	}
	s.queued(s.lanes.PushControlEnd(b, key))
}

// queued closes the session as too slow when a control frame found no room.
func (s *Session) queued(err error) {
	if err != nil && errors.Is(err, delivery.ErrControlFull) {
		s.Close(CloseTooSlow, "replies are not being read")
	}
}

// fail sends e as an unprompted error and closes the session with code: the error says why.
func (s *Session) fail(e *fault.Error, r CloseReason) {
	s.Send(s.cfg.Codec.Fault(nil, "", e))
	s.Close(r, e.Message)
}

// Push queues one item of subscription sub: stream.Receiver, which producers deliver to. It
// never blocks. A change or a message is encoded by the connection's codec, once per item
// for every connection that speaks it, and queued on the data lane, or lost into sub's gap if
// it does not fit; a gap goes into sub's gap (delivery.Lanes.Gap, the one path every gap
// takes). An item for a subscription that has ended is dropped.
func (s *Session) Push(sub string, it *stream.Item) { s.pushDeferred(sub, it, nil) }

// PushDeferred is Push for a fan-out that wakes writers once it is done
// (stream.DeferringReceiver): when the item makes the writer runnable, the writer is added to
// w rather than woken.
func (s *Session) PushDeferred(sub string, it *stream.Item, w *stream.Wakeups) {
	s.pushDeferred(sub, it, w)
}

// pushDeferred is Push, deferring the writer's wake-up to w unless w is nil.
func (s *Session) pushDeferred(sub string, it *stream.Item, w *stream.Wakeups) {
	s.mu.Lock()
	su := s.subs[sub]
	if su == nil {
		s.mu.Unlock()
		return // unsubscribed while the producer was delivering
	}
	if p := it.Presence; p != nil {
		// Presence frames go with the replies (see doc.go, Presence): a watch starts only once
		// the subscribed reply is queued, so there is no pending state to keep them in.
		key := su.key
		s.mu.Unlock()
		b := append(s.cfg.Codec.PresenceHead(sub, p.Kind), it.Encoded(s.cfg.Codec)...)
		s.sendAt(key, "", b)
		return
	}
	if l := it.Live; l != nil {
		// The end of a snapshot: a data frame of its own, after the rows and the changes
		// before it. A subscription with a snapshot is not pending by the time anything of it
		// is delivered (its hand-off holds everything until its rows are sent).
		key := su.key
		s.mu.Unlock()
		f := delivery.Frame{Body: s.cfg.Codec.Live(nil, sub, l.Pos), Key: key, Pos: it.PosText()}
		if w == nil {
			s.lanes.PushData(f)
		} else if _, wake := s.lanes.PushDataDeferred(f); wake {
			w.Add(s.lanes)
		}
		return
	}
	if su.pending {
		su.buffer(it, s.cfg.Lanes.MaxDataFrames, s.cfg.Lanes.MaxDataBytes, s.cfg.Codec)
		s.mu.Unlock()
		return
	}
	if g := it.Gap; g != nil && g.Reason == stream.ReasonPolicyError && !su.toldPolicy {
		su.toldPolicy = true
		s.sendAt(su.key, "", s.cfg.Codec.Fault(nil, "", policyFault(sub, g.Rule)))
	}
	key, head, inline := su.key, su.head, su.durable
	s.mu.Unlock()
	s.push(key, head, it, inline, w)
}

// policyFault is the error that explains a policy_error gap: the rule that failed, never why
// (the reason may name a column the client may not see; the server's log has it).
func policyFault(sub, rule string) *fault.Error {
	if rule == "" {
		rule = "a policy rule"
	}
	return &fault.Error{Code: fault.CodePolicyError, Sub: sub,
		Message: rule + " could not decide whether this subscription may see a change, so the server withheld it (see the resync); a server configuration problem, not a denial"}
}

// endedLocked counts su's end, once it is out of the subscription table, if it went live. The
// caller holds mu.
func (s *Session) endedLocked(su *subscription) {
	if !su.pending {
		s.cfg.Counts.ended(su.table)
	}
}

// buffer keeps it until the subscription's reply is queued, at most maxItems items and
// maxBytes bytes of their frames (the data lane's bounds, which they are queued on next). The
// overflow rule is the lanes': replace with a marker. Past either bound, the item and every
// later one join one gap, marked lane_full right after the buffered items, so a producer that
// delivers faster than a subscribe completes cannot grow the session without bound. The
// caller holds the session's mu.
func (su *subscription) buffer(it *stream.Item, maxItems, maxBytes int, codec Codec) {
	if su.overflow == nil && len(su.buffered) < maxItems {
		size := 0
		if it.Gap == nil {
			// Encoded once per item and codec, and cached: the push that follows reuses it.
			size = len(su.head) + len(it.Encoded(codec))
		}
		if su.bufferedBytes+size <= maxBytes {
			su.buffered = append(su.buffered, it)
			su.bufferedBytes += size
			return
		}
	}
	first, count := it.PosText(), uint64(1)
	if g := it.Gap; g != nil {
		first, count = g.First.String(), g.Lost
		if g.First.IsZero() {
			first = ""
		}
	}
	if su.overflow == nil {
		su.overflow = &pendingGap{first: first, last: it.PosText(), count: count}
		return
	}
	su.overflow.last = it.PosText()
	if su.overflow.count != 0 && count != 0 {
		su.overflow.count += count
	} else {
		su.overflow.count = 0
	}
}

// push queues it on the lanes under key, deferring the writer's wake-up to w unless w is nil.
// A gap becomes key's marker, which the key's later items join while it waits (the lanes'
// rule 2: the client never sees an item from inside a range it was told was lost); inline, it
// is a durable subscription's, which its queue reported exactly and the items after it are not
// part of: it is queued as a resync frame in line with the data (delivery.Frame.First).
func (s *Session) push(key string, head []byte, it *stream.Item, inline bool, w *stream.Wakeups) {
	if g := it.Gap; g != nil && inline {
		f := delivery.Frame{Body: s.cfg.Codec.Gap(nil, subOfKey(key), g), Key: key, Pos: it.PosText(),
			First: g.First.String(), Lost: g.Lost}
		if f.First == "" {
			f.First = f.Pos
		}
		s.pushFrame(f, w)
		return
	}
	if g := it.Gap; g != nil {
		first := ""
		if !g.First.IsZero() {
			first = g.First.String()
		}
		s.lanes.Gap(key, first, it.PosText(), g.Lost, g.Reason)
		return
	}
	s.pushFrame(delivery.Frame{Head: head, Body: it.Encoded(s.cfg.Codec), Key: key, Pos: it.PosText()}, w)
}

// pushFrame queues f on the data lane, deferring the writer's wake-up to w unless w is nil.
func (s *Session) pushFrame(f delivery.Frame, w *stream.Wakeups) {
	if w == nil {
		s.lanes.PushData(f)
		return
	}
	if _, wake := s.lanes.PushDataDeferred(f); wake {
		w.Add(s.lanes)
	}
}

// Close ends the session for reason r, with a short human message. The first call wins,
// except over Lost: a connection that dropped may have dropped because of what r names (a
// write that timed out on a client too slow to read), and r is what gets counted.
func (s *Session) Close(r CloseReason, msg string) { s.close(r, msg, false) }

// Lost ends the session because its connection dropped.
func (s *Session) Lost(reason string) { s.close(CloseNormal, reason, true) }

func (s *Session) close(r CloseReason, msg string, weak bool) {
	s.closeMu.Lock()
	if s.closeStarted {
		if s.closeWeak && !weak {
			s.closeWhy, s.closeMsg, s.closeWeak = r, msg, false
		}
		s.closeMu.Unlock()
		return
	}
	s.closeStarted, s.closeWeak = true, weak
	s.closeWhy, s.closeMsg = r, msg
	close(s.closing)
	s.closeMu.Unlock()
	s.endLife()
	// With no writer running, start one to write what explains the close and finish. One that
	// is running meets closing at its next turn; one that parks as this claims claims itself.
	// Outside closeMu, which is taken alone.
	if s.lanes.Claim() {
		s.startWriter()
	}
	// A writer blocked on a client that stopped reading would hold the close forever.
	s.afterFunc(s.cfg.CloseGrace, func() {
		select {
		case <-s.done:
		default:
			r, m := s.closeState()
			s.transport.Close(r, m)
		}
	})
}

func (s *Session) closeState() (CloseReason, string) {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	return s.closeWhy, s.closeMsg
}

// CloseReason is why the session closed; meaningful once Done is closed.
func (s *Session) CloseReason() CloseReason {
	r, _ := s.closeState()
	return r
}

// Abort lets go of a session that never ran (its transport refused it before Run): it stops
// the expiry timer, detaches every subscription and closes the lanes.
func (s *Session) Abort() {
	s.close(CloseNormal, "", true)
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = map[string]*subscription{}
	for _, su := range subs {
		s.endedLocked(su)
	}
	tracked := s.tracked
	s.tracked = nil
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	for _, su := range subs {
		su.unsubscribe()
	}
	s.untrackAll(tracked)
	s.lanes.Close()
	// Every snapshot was told to stop (its subscription's unsubscribe cancels it, and the
	// closed lanes end a wait for room).
	s.snapshots.Wait()
	s.disarmStall()
	s.endTimers()
}

// Closing is closed once Close has been called.
func (s *Session) Closing() <-chan struct{} { return s.closing }

// Start starts the session: the token's expiry timer, and the writer, which drains the lanes
// onto the transport and ends when they are empty; a push starts the next. When ctx ends the
// session closes as shutting down. The session is finished (Done is closed) once it has closed
// and its writer has written the frames that explain the close, closed the transport and let
// go of every subscription. Call it once.
func (s *Session) Start(ctx context.Context) {
	// The token's clock starts with the writer, not in New: the transport queues welcome
	// before it starts the writer, and an expiring warning must not overtake it.
	s.mu.Lock()
	if !s.closed && s.expiry == nil {
		s.armExpiry()
	}
	s.mu.Unlock()
	s.ctx = ctx
	// No goroutine waits for ctx: the server's context is a cancel context, so this is an
	// entry in its list of children.
	s.stopCtx = context.AfterFunc(ctx, func() {
		s.owned(func() { s.Close(CloseShuttingDown, "server shutting down") })
	})
	// The lanes were made with the writer's place taken, so pushes before now (welcome) wait
	// for this one.
	s.startWriter()
}

// Run starts the session and waits until it has finished and its writers have ended.
func (s *Session) Run(ctx context.Context) {
	s.Start(ctx)
	s.Wait()
}

// Wait waits until the session has finished and every writer goroutine it started has ended.
// Call it after Start.
func (s *Session) Wait() {
	<-s.done
	// No writer starts once the session is finished: the lanes are closed, so neither a push
	// nor Claim takes the writer's place.
	s.writers.Wait()
}

// startWriter starts a writer: the lanes' Wake, called by the one push that found the writer
// gone, or by Start or close, which took its place.
func (s *Session) startWriter() {
	s.writers.Add(1)
	go s.writeLoop()
}

// batches are the writers' batches: a session holds one only while it writes.
var batches = sync.Pool{New: func() any { return new(delivery.Batch) }}

// writeLoop is the writer: it writes the lanes' batches until they are empty, then ends, giving
// its place up to the next push (delivery.Lanes.TryNextOrPark). At most one runs at a time:
// a writer is started only by whoever took its place, which one that ends gives up under the
// lanes' lock. Once the session is closing, the writer finishes it.
func (s *Session) writeLoop() {
	defer s.writers.Done()
	b := batches.Get().(*delivery.Batch)
	defer batches.Put(b)
	for {
		if s.isClosing() {
			s.finish(b)
			return
		}
		if !s.lanes.TryNextOrPark(b) {
			// A close that came as this parked found a writer in place and started none: the
			// place is taken back to finish. Only one of this and close's Claim succeeds.
			if s.isClosing() && s.lanes.Claim() {
				continue
			}
			return
		}
		if err := s.write(s.ctx, b.Items); err != nil {
			s.Lost("connection lost")
		}
	}
}

func (s *Session) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// subOfKey is the sub of a lanes key.
func subOfKey(key string) string {
	if i := strings.IndexByte(key, 0); i >= 0 {
		return key[:i]
	}
	return key
}

// live drops the data and markers of subscriptions that have ended, or been replaced by a
// new one with the same sub, and gives the rest their client-facing sub back. After an
// unsubscribed reply, nothing of the old subscription may follow.
func (s *Session) live(items []delivery.Item) []delivery.Item {
	out := items[:0]
	s.mu.Lock()
	for _, it := range items {
		switch it.Kind {
		case delivery.KindControl:
			if it.Key != "" {
				it.Key = subOfKey(it.Key)
			}
		case delivery.KindData:
			su := s.subs[subOfKey(it.Key)]
			if su == nil || su.key != it.Key {
				continue
			}
			it.Key = su.sub
		case delivery.KindMarker:
			if it.Marker != nil {
				su := s.subs[subOfKey(it.Marker.Key)]
				if su == nil || su.key != it.Marker.Key {
					continue
				}
				it.Marker.Key = su.sub
			}
		}
		out = append(out, it)
	}
	s.mu.Unlock()
	return out
}

// write writes one batch under the slow-client deadline.
func (s *Session) write(ctx context.Context, items []delivery.Item) error {
	items = s.live(items)
	if len(items) == 0 {
		return nil
	}
	dl := time.Now().Add(s.cfg.SlowTimeout)
	err := s.transport.Write(dl, items)
	// A write that failed once its deadline had passed was cut by it: the client stopped
	// reading.
	if err != nil && ctx.Err() == nil && !time.Now().Before(dl) {
		s.Close(CloseTooSlow, fmt.Sprintf("one write was blocked for %s", s.cfg.SlowTimeout))
	}
	return err
}

// finish writes the control frames that explain the close, closes the transport and lets go
// of the subscriptions.
func (s *Session) finish(b *delivery.Batch) {
	defer close(s.done)
	s.stopCtx()
	grace := time.Now().Add(s.cfg.CloseGrace)
	if s.lanes.TryNext(b) {
		var ctl []delivery.Item
		for _, it := range b.Items {
			if it.Kind == delivery.KindControl {
				ctl = append(ctl, it)
			}
		}
		if len(ctl) > 0 {
			_ = s.transport.Write(grace, ctl)
		}
	}
	s.lanes.Close()
	r, msg := s.closeState()
	s.transport.Close(r, msg)
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = map[string]*subscription{}
	for _, su := range subs {
		s.endedLocked(su)
	}
	tracked := s.tracked
	s.tracked = nil
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	for _, su := range subs {
		su.unsubscribe()
	}
	s.untrackAll(tracked)
	// The lanes are closed and every subscription let go: each snapshot's read stops.
	s.snapshots.Wait()
	s.disarmStall()
	b.Reset() // hold no frame in the pool
	s.endTimers()
}

// afterFunc is time.AfterFunc for the session's timers (the token's expiry, the stall check, the
// close's grace period): the callback runs in a goroutine of the runtime's, and the session
// owns it. One that fires after the session has ended does not run, and endTimers waits for
// those already running, so no callback outlives the session.
func (s *Session) afterFunc(d time.Duration, f func()) *time.Timer {
	return time.AfterFunc(d, func() { s.owned(f) })
}

// owned runs f, a callback on a goroutine of the runtime's (a timer's, context.AfterFunc's), as
// one of the session's: not once the session has ended, and endTimers waits for it.
func (s *Session) owned(f func()) {
	s.timerMu.Lock()
	if s.timersEnded {
		s.timerMu.Unlock()
		return
	}
	s.timers.Add(1)
	s.timerMu.Unlock()
	defer s.timers.Done()
	f()
}

// endTimers lets no more timer callbacks run and waits for those running. It is the last thing
// the session's end does, holding no lock: a callback may take any of them.
func (s *Session) endTimers() {
	s.timerMu.Lock()
	s.timersEnded = true
	s.timerMu.Unlock()
	s.timers.Wait()
}

// armStall is the lanes' OnStall: the data lane began losing frames, so a timer is armed to
// look again once SlowTimeout has passed. Nothing watches a session whose lane is not stalled.
func (s *Session) armStall() { s.armStallIn(s.cfg.SlowTimeout) }

func (s *Session) armStallIn(d time.Duration) {
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	if s.stall == nil && !s.stallEnd {
		s.stall = s.afterFunc(d, s.checkStall)
	}
}

// checkStall closes the session as too slow once its data lane has been losing frames for
// SlowTimeout: the markers kept the client's view honest, but a client that never catches up
// only holds memory. A stall that ended meanwhile disarms it until the next one begins; one
// that began later than the stall that armed it (the first ended, another began while the
// timer was armed, so OnStall armed nothing) re-arms it for the rest of that one's time.
//
// The timer is cleared before the lanes are asked, so a stall that begins in between arms a
// timer of its own through OnStall, and none is missed.
func (s *Session) checkStall() {
	s.stallMu.Lock()
	s.stall = nil
	s.stallMu.Unlock()
	since, ok := s.lanes.Stalled()
	if !ok {
		return
	}
	if left := s.cfg.SlowTimeout - s.cfg.Now().Sub(since); left > 0 {
		s.armStallIn(left)
		return
	}
	s.Close(CloseTooSlow, fmt.Sprintf("the data queue stayed full for %s", s.cfg.SlowTimeout))
}

// disarmStall stops the stall timer for good, as the session ends. A check already running
// finds the lanes closed, which are never stalled, or closes a session that is closed.
func (s *Session) disarmStall() {
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	s.stallEnd = true
	if s.stall != nil {
		s.stall.Stop()
		s.stall = nil
	}
}

// armExpiry schedules the expiring warning and, at the token's expiry, the close. The warning
// always goes out first, even when the token has less than ExpiryWarning left (one accepted
// within the leeway, say), so a client is never closed for expiry without having been told.
// The timer is the session's: it is stopped when the session ends or the token is replaced,
// and what it runs never outlives it. Called with mu held.
func (s *Session) armExpiry() {
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	at := s.identity.ExpiresAt
	if at.IsZero() {
		return
	}
	warned := false // guarded by mu
	var fire func()
	fire = func() {
		s.mu.Lock()
		if s.closed || !s.identity.ExpiresAt.Equal(at) {
			s.mu.Unlock()
			return // ended, or refreshed meanwhile
		}
		now := s.cfg.Now()
		if !warned {
			// Under mu, so a refresh cannot slip in between the warning and the rearm.
			warned = true
			s.Send(s.cfg.Codec.Expiring(nil, at, at.Sub(now).Truncate(time.Second)))
		}
		if now.Before(at) {
			s.expiry = s.afterFunc(at.Sub(now), fire)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.fail(&fault.Error{Code: fault.CodeTokenExpired, Message: fmt.Sprintf("the token expired at %s and no refresh replaced it; get a fresh token and reconnect", at.UTC().Format(time.RFC3339))}, CloseTokenExpired)
	}
	d := at.Add(-s.cfg.ExpiryWarning).Sub(s.cfg.Now())
	if d < 0 {
		d = 0
	}
	s.expiry = s.afterFunc(d, fire)
}
