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
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
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
	// Close ends the connection with a close code and a short human reason (the transport
	// formats it, e.g. with wire.CloseReason).
	Close(code wire.CloseCode, reason string)
}

// Channels is the channel hub as a session uses it.
type Channels interface {
	// Subscribe attaches sub to the channels pattern and event select, and returns the
	// position it starts after (zero for a pattern spanning channels) and how to detach.
	Subscribe(s stream.Receiver, sub, pattern, event string) (head wire.Position, unsubscribe func(), err error)
	// Publish sends data to one channel and returns its position there.
	Publish(channel, event string, data json.RawMessage) (wire.Position, error)
}

// Tables is the table router as a session uses it.
type Tables interface {
	// Subscribe validates and attaches a table subscription. A from past the end of the
	// database's stream is refused with bad_position; nothing at or before a from is
	// delivered. Errors are *wire.Error.
	Subscribe(ctx context.Context, s stream.Receiver, f *wire.Subscribe) (TableSubscription, error)
}

// TableSubscription is an attached table subscription.
type TableSubscription struct {
	Head        wire.Position // the position it starts after
	Key         []string      // the table's key columns, for the subscribed frame
	Unsubscribe func()        // detaches it
}

// Codec is the protocol a connection speaks, as the session's data path uses it: it encodes
// the stream's items into that protocol's frames. wire.Codec is herald.v1.
type Codec interface {
	stream.Encoder // the shared body of a change or a message, encoded once per item
	// Head is the per-subscription prefix of sub's data frames, for a table subscription or a
	// channel one.
	Head(sub string, table bool) []byte
	// Gap appends the frame that tells subscription sub about gap g.
	Gap(dst []byte, sub string, g *stream.Gap) []byte
}

var _ stream.Receiver = (*Session)(nil)

// Verifier checks tokens: auth.Verifier.
type Verifier interface {
	Verify(token string) (auth.Identity, error)
}

// Config configures sessions. The zero value of every field means its default.
type Config struct {
	// MaxSubscriptions a connection may hold at once. Default 100.
	MaxSubscriptions int
	// MaxFrameBytes is the largest client frame read. Default wire.DefaultMaxFrameBytes.
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
	// Codec is the protocol the connection speaks. Default wire.Codec, herald.v1.
	Codec Codec
	// CloseGrace is how long the writer may spend writing the frames that explain a close.
	// Default 2s.
	CloseGrace time.Duration
	Logger     *slog.Logger
	Now        func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = 100
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = wire.DefaultMaxFrameBytes
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
	if c.Lanes.MaxControlFrames == 0 {
		c.Lanes.MaxControlFrames = delivery.DefaultMaxControlFrames
	}
	if c.Lanes.MaxControlBytes == 0 {
		c.Lanes.MaxControlBytes = delivery.DefaultMaxControlBytes
	}
	if c.Codec == nil {
		c.Codec = wire.Codec{}
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

// Validate reports a Config that New would refuse.
func (c Config) Validate() error {
	return c.withDefaults().Lanes.Validate()
}

// Deps are what sessions use, shared by all of them.
type Deps struct {
	Channels Channels // nil: channels are not served
	Tables   Tables   // nil: tables are not served
	Verifier Verifier // nil: refresh is refused
}

// Session is one client connection.
type Session struct {
	id        string
	cfg       Config
	deps      Deps
	transport Transport
	lanes     *delivery.Lanes
	log       *slog.Logger

	handleMu sync.Mutex // serializes Handle; taken before mu, never while holding it

	mu       sync.Mutex
	identity auth.Identity            // guarded by mu
	subs     map[string]*subscription // guarded by mu
	expiry   *time.Timer              // guarded by mu: sends expiring, then closes; stopped by finish and Abort
	closed   bool                     // guarded by mu: no subscription may be added

	gen uint64 // guarded by mu: subscriptions made, for lane keys
	// life ends when the session starts to close: what the session asks of others on the
	// client's behalf (a subscribe's catalog lookup) is not worth finishing after that.
	life         context.Context
	endLife      context.CancelFunc
	closing      chan struct{} // closed by the first Close or Lost
	closeMu      sync.Mutex
	closeStarted bool           // guarded by closeMu
	closeWeak    bool           // guarded by closeMu: closed by Lost; a Close may still name the code
	closeCode    wire.CloseCode // guarded by closeMu
	closeMsg     string         // guarded by closeMu
	done         chan struct{}  // closed when the writer has finished the session

	// The writer runs on demand (see doc.go, Writer): a goroutine started when the lanes get
	// work, ended when they drain. ctx and stopCtx are set by Start before the first writer
	// starts, and read only by writers.
	ctx     context.Context
	stopCtx func() bool    // ends the watch on ctx; called by finish
	writers sync.WaitGroup // the writer goroutines, at most one at a time doing the work

	stallMu  sync.Mutex  // taken after mu, if both (see doc.go)
	stall    *time.Timer // guarded by stallMu: armed while the data lane is stalled, else nil
	stallEnd bool        // guarded by stallMu: the session has ended; arm no more
}

// subscription is one of the session's subscriptions.
type subscription struct {
	sub string
	// key is the subscription's lanes key: the sub and a generation, so data and markers still
	// queued for an earlier subscription with the same sub are told apart and dropped.
	key         string
	head        []byte // the data frames' per-subscription prefix, encoded once
	unsubscribe func()
	// pending is true from the moment the producer attaches the subscription until its
	// subscribed reply is queued: data delivered meanwhile waits in buffered, so the client
	// never sees data before subscribed, nor before the resync of a resumed subscription.
	// Both guarded by the session's mu.
	pending  bool
	buffered []*stream.Item
	// overflow is the gap of items delivered while pending past the bound on buffered (the
	// data lane's frame bound): they join it, and it is marked right after the buffered items.
	overflow *pendingGap
}

// pendingGap is a range of items a pending subscription could not buffer.
type pendingGap struct {
	first, last string
	count       uint64 // 0 when unknown
}

// New returns a session for an identity the transport has verified.
func New(cfg Config, deps Deps, t Transport, id auth.Identity) (*Session, error) {
	cfg = cfg.withDefaults()
	s := &Session{
		id:        newID(),
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

// newID returns an unguessable session id: SSE commands are addressed by it.
func newID() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
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

// Welcome is the session's welcome frame, answering the connect with id.
func (s *Session) Welcome(id string) *wire.Welcome {
	ident := s.Identity()
	w := &wire.Welcome{ID: id, Version: wire.Version, Session: s.id, Limits: wire.Limits{
		MaxFrameBytes:    s.cfg.MaxFrameBytes,
		MaxSubscriptions: s.cfg.MaxSubscriptions,
		PingInterval:     s.cfg.PingInterval,
		MaxUnreadReplies: s.cfg.Lanes.MaxControlFrames - s.replyFrames(),
	}}
	if !ident.ExpiresAt.IsZero() {
		w.ExpiresAt = ident.ExpiresAt
		w.ExpiresIn = ident.ExpiresAt.Sub(s.cfg.Now()).Truncate(time.Second)
	}
	return w
}

// replyFrames and replyBytes are the room on the control lane that one more request needs: a
// request queues at most two frames (subscribed, then a resumed subscription's resync), and a
// timer or a producer may queue an unprompted one meanwhile (expiring, an error). A reply quotes
// at most what its request carried, which MaxFrameBytes bounds, besides a short message. Each
// is capped at the lane's size, so a lane smaller than the room still takes requests, one at a
// time once it is empty.
func (s *Session) replyFrames() int { return min(4, s.cfg.Lanes.MaxControlFrames) }
func (s *Session) replyBytes() int  { return min(s.cfg.MaxFrameBytes+1024, s.cfg.Lanes.MaxControlBytes) }

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
			s.Close(wire.CloseTooSlow, fmt.Sprintf("the replies to its requests stayed unread for %s", s.cfg.SlowTimeout))
			return false
		}
	}
}

// Send queues a control frame. A control lane that cannot take it means the client is not
// reading its own replies: the session closes as too slow.
func (s *Session) Send(f wire.Frame) { s.sendAt("", "", f) }

// sendAt is Send for a frame about the subscription with lanes key key, at position pos: the
// writer's item carries both, for a transport that marks positions (SSE's event ids).
func (s *Session) sendAt(key, pos string, f wire.Frame) {
	b, err := wire.AppendFrame(nil, f)
	if err != nil {
		s.log.Error("encode a control frame", "type", f.Type(), "error", err)
		return
	}
	if err := s.lanes.PushControlAt(b, key, pos); err != nil {
		if errors.Is(err, delivery.ErrControlFull) {
			s.Close(wire.CloseTooSlow, "replies are not being read")
		}
	}
}

// Fail sends err as an error frame and closes the session with code: the error says why.
func (s *Session) Fail(err *wire.Error, code wire.CloseCode) {
	s.Send(err)
	s.Close(code, err.Message)
}

// Push queues one item of subscription sub: stream.Receiver, which producers deliver to. It
// never blocks. A change or a message is encoded by the connection's codec, once per item
// for every connection that speaks it, and queued on the data lane, or lost into sub's gap if
// it does not fit; a gap goes into sub's gap (delivery.Lanes.Gap, the one path every gap
// takes). An item for a subscription that has ended is dropped.
func (s *Session) Push(sub string, it *stream.Item) {
	s.mu.Lock()
	su := s.subs[sub]
	if su == nil {
		s.mu.Unlock()
		return // unsubscribed while the producer was delivering
	}
	if su.pending {
		su.buffer(it, s.cfg.Lanes.MaxDataFrames)
		s.mu.Unlock()
		return
	}
	key, head := su.key, su.head
	s.mu.Unlock()
	s.push(key, head, it)
}

// buffer keeps it until the subscription's subscribed is queued, at most max items: past
// them the items join one gap, so a producer that delivers faster than a subscribe completes
// cannot grow the session without bound. The caller holds the session's mu.
func (su *subscription) buffer(it *stream.Item, max int) {
	if su.overflow == nil && len(su.buffered) < max {
		su.buffered = append(su.buffered, it)
		return
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

// push queues it on the lanes under key.
func (s *Session) push(key string, head []byte, it *stream.Item) {
	if g := it.Gap; g != nil {
		first := ""
		if !g.First.IsZero() {
			first = g.First.String()
		}
		s.lanes.Gap(key, first, it.PosText(), g.Lost, g.Reason)
		return
	}
	s.lanes.PushData(delivery.Frame{Head: head, Body: it.Encoded(s.cfg.Codec), Key: key, Pos: it.PosText()})
}

// Close ends the session with code and reason. The first call wins, except over Lost: a
// connection that dropped may have dropped because of what the code names (a write that
// timed out on a client too slow to read), and the code is what gets counted.
func (s *Session) Close(code wire.CloseCode, reason string) { s.close(code, reason, false) }

// Lost ends the session because its connection dropped.
func (s *Session) Lost(reason string) { s.close(wire.CloseNormal, reason, true) }

func (s *Session) close(code wire.CloseCode, reason string, weak bool) {
	s.closeMu.Lock()
	if s.closeStarted {
		if s.closeWeak && !weak {
			s.closeCode, s.closeMsg, s.closeWeak = code, reason, false
		}
		s.closeMu.Unlock()
		return
	}
	s.closeStarted, s.closeWeak = true, weak
	s.closeCode, s.closeMsg = code, reason
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
	time.AfterFunc(s.cfg.CloseGrace, func() {
		select {
		case <-s.done:
		default:
			c, m := s.closeReason()
			s.transport.Close(c, m)
		}
	})
}

func (s *Session) closeReason() (wire.CloseCode, string) {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	return s.closeCode, s.closeMsg
}

// CloseCode is the code the session closed with; meaningful once Done is closed.
func (s *Session) CloseCode() wire.CloseCode {
	c, _ := s.closeReason()
	return c
}

// Abort lets go of a session that never ran (its transport refused it before Run): it stops
// the expiry timer, detaches every subscription and closes the lanes.
func (s *Session) Abort() {
	s.close(wire.CloseNormal, "", true)
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = map[string]*subscription{}
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	for _, su := range subs {
		su.unsubscribe()
	}
	s.lanes.Close()
	s.disarmStall()
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
	s.stopCtx = context.AfterFunc(ctx, func() { s.Close(wire.CloseShuttingDown, "server shutting down") })
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
		s.Close(wire.CloseTooSlow, fmt.Sprintf("one write was blocked for %s", s.cfg.SlowTimeout))
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
	code, msg := s.closeReason()
	s.transport.Close(code, msg)
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = map[string]*subscription{}
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	for _, su := range subs {
		su.unsubscribe()
	}
	s.disarmStall()
	b.Reset() // hold no frame in the pool
}

// armStall is the lanes' OnStall: the data lane began losing frames, so a timer is armed to
// look again once SlowTimeout has passed. Nothing watches a session whose lane is not stalled.
func (s *Session) armStall() { s.armStallIn(s.cfg.SlowTimeout) }

func (s *Session) armStallIn(d time.Duration) {
	s.stallMu.Lock()
	defer s.stallMu.Unlock()
	if s.stall == nil && !s.stallEnd {
		s.stall = time.AfterFunc(d, s.checkStall)
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
	s.Close(wire.CloseTooSlow, fmt.Sprintf("the data queue stayed full for %s", s.cfg.SlowTimeout))
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
			s.Send(&wire.Expiring{ExpiresAt: at, ExpiresIn: at.Sub(now).Truncate(time.Second)})
		}
		if now.Before(at) {
			s.expiry = time.AfterFunc(at.Sub(now), fire)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.Fail(wire.Errorf(wire.CodeTokenExpired, "the token expired at %s and no refresh replaced it; get a fresh token and reconnect", at.UTC().Format(time.RFC3339)), wire.CloseTokenExpired)
	}
	d := at.Add(-s.cfg.ExpiryWarning).Sub(s.cfg.Now())
	if d < 0 {
		d = 0
	}
	s.expiry = time.AfterFunc(d, fire)
}
