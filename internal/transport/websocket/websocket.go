// Package websocket serves Herald's protocol over WebSocket: it upgrades the request, reads the
// connect frame, verifies the token, and then runs one session per connection: this package's
// reader goroutine (the request's own) feeds the session's frames, the session's writer writes
// through Transport, and a pinger checks the client is alive.
//
// ServeHTTP returns once the connection is upgraded, letting go of net/http's goroutine and its
// buffers; the connection's own goroutine reads it from then on. A live connection holds that
// goroutine and the session's writer and nothing else while it is idle: the pinger is a member
// of the handler's heartbeat wheel, which pings the connections due in the same tick together,
// and each ping's wait for its pong is a goroutine that lives for that round trip. Every
// goroutine a connection starts ends before the connection gives back its slot (the release
// Registry.Admit returned), which it does last.
package websocket

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/transport/heartbeat"
	"github.com/heraldrt/herald/internal/wire"
)

// Subprotocol is the WebSocket subprotocol of protocol v1.
const Subprotocol = "herald.v1"

// Config configures the handler. The zero value of each field means its default.
type Config struct {
	// ConnectTimeout is how long a client has to send connect after the upgrade. Default 10s.
	ConnectTimeout time.Duration
	// PingInterval is how often the server pings. Each ping is to be answered before the next
	// is due; maxMissedPongs in a row unanswered close the connection. Default 25s.
	PingInterval time.Duration
	Session      session.Config
	Logger       *slog.Logger
}

// Handler serves GET /v1/ws.
type Handler struct {
	cfg      Config
	deps     session.Deps
	auth     session.Authenticator
	registry session.Registry
	base     context.Context
	log      *slog.Logger
	pings    *heartbeat.Wheel // every connection's pinger
}

// New returns the WebSocket handler. base is the server's context: sessions run under it.
func New(base context.Context, cfg Config, deps session.Deps, a session.Authenticator, r session.Registry) *Handler {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 25 * time.Second
	}
	cfg.Session.PingInterval = cfg.PingInterval
	if cfg.Session.MaxFrameBytes <= 0 {
		cfg.Session.MaxFrameBytes = wire.DefaultMaxFrameBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Session.Logger == nil {
		cfg.Session.Logger = cfg.Logger
	}
	return &Handler{cfg: cfg, deps: deps, auth: a, registry: r, base: base, log: cfg.Logger, pings: heartbeat.New(cfg.PingInterval)}
}

// offersV1 reports whether the upgrade offers our subprotocol.
func offersV1(r *http.Request) bool {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if strings.TrimSpace(p) == Subprotocol {
				return true
			}
		}
	}
	return false
}

// upgradeToken is a token carried by the upgrade request itself.
func upgradeToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return r.URL.Query().Get("access_token")
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !offersV1(r) {
		session.WriteHTTPError(w, &wire.Error{Code: wire.CodeUnsupportedVersion,
			Message: "offer the WebSocket subprotocol herald.v1 (Sec-WebSocket-Protocol: herald.v1); this server speaks herald.v1"})
		return
	}
	release, admitted := h.registry.Admit()
	// Auth is by token, never by cookie, so a page on another origin gains nothing a token
	// would not already give it: every origin may connect.
	c, err := websocket.Accept(&hijacker{ResponseWriter: w}, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, InsecureSkipVerify: true})
	if err != nil {
		if admitted {
			release()
		}
		return // Accept has answered the request
	}
	t := &transport{c: c}
	if !admitted {
		t.closeWith(&wire.Error{Code: wire.CodeTooManyConnections,
			Message: "this node is at its connection limit (limits.max_connections); reconnect with backoff starting at 10 s"}, wire.CloseTooManyConnections)
		return
	}
	// The connection carries on in a goroutine of its own, and net/http's goroutine returns:
	// with it go the request and net/http's state and buffers for the connection, which an
	// idle connection would otherwise hold for its whole life. serve gives the slot back last.
	go h.serve(t, upgradeToken(r), release)
}

// serve runs an upgraded connection: the connect handshake, then the session, with this
// goroutine as its reader. Every goroutine it starts has ended before it gives back the
// connection's slot, which it does last: that is what the server waits for at shutdown.
func (h *Handler) serve(t *transport, upgradeToken string, release func()) {
	defer release()
	defer t.Close(wire.CloseNormal, "")
	s, untrack, ok := h.open(t, upgradeToken)
	if !ok {
		return
	}
	defer untrack()

	p := h.startPinger(s, t.c)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.Run(h.base)
	}()
	h.read(s, t.c)
	s.Lost("connection closed")
	wg.Wait()
	// After the writer: it has closed the connection, so a ping in flight fails at once, and
	// stopping sooner would cut the pong wait of a connection still writing its close.
	p.stop()
}

// open runs the connect handshake and returns the tracked session, with welcome queued, or
// false once it has closed the connection with the reason. What the handshake needed is let
// go when it returns, rather than held for the connection's life.
func (h *Handler) open(t *transport, upgradeToken string) (_ *session.Session, untrack func(), ok bool) {
	c := t.c
	// readFrame enforces the frame limit itself; the library's, one byte above it, never fires
	// first. It would close with its own reason text and no error frame.
	c.SetReadLimit(int64(h.cfg.Session.MaxFrameBytes) + 1)
	// Until its session is tracked the server's shutdown cannot reach this connection, and
	// would end it by cutting the handshake's Read, with no close frame: watch for it here.
	unwatch := h.closeOnStopping(t)
	defer unwatch()

	connect, ok := h.readConnect(t)
	if !ok {
		return nil, nil, false
	}
	token := connect.Token
	if token == "" {
		token = upgradeToken
	}
	ident, err := h.auth.Authenticate(token)
	if err != nil {
		we := session.AuthError(connect.ID, err)
		t.closeWith(we, session.AuthCloseCode(we))
		return nil, nil, false
	}
	s, err := session.New(h.cfg.Session, h.deps, t, ident)
	if err != nil {
		h.log.Error("new session", "error", err)
		t.closeWith(&wire.Error{ID: connect.ID, Code: wire.CodeInternal, Message: "the server could not open a session"}, wire.CloseInternal)
		return nil, nil, false
	}
	untrack = h.registry.Track(s)
	unwatch() // the server's shutdown closes the session from here on
	s.Send(s.Welcome(connect.ID))
	return s, untrack, true
}

// readBufferSize is the read buffer of a connection: clients send small frames (requests), and
// a larger one is read past the buffer. net/http's own is 4 KiB, held for as long as a
// connection lives.
const readBufferSize = 1 << 10

// hijacker hands the WebSocket library a read buffer of the connection's own in place of
// net/http's, so that net/http's can go with its goroutine (see ServeHTTP). The write buffer is
// net/http's, which the library writes every message through.
type hijacker struct {
	http.ResponseWriter
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// What the client sent past the upgrade request is already in net/http's buffer: it is
	// loaded into the new one first, where the library looks for it.
	n := brw.Reader.Buffered()
	left, _ := brw.Reader.Peek(n)
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(left)), conn), max(readBufferSize, n))
	if n > 0 {
		if _, err := br.Peek(n); err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
	}
	return conn, bufio.NewReadWriter(br, brw.Writer), nil
}

// closeOnStopping closes t with 1012 if the node begins to stop before the returned function
// is called. That function waits for the watch to end and may be called more than once.
func (h *Handler) closeOnStopping(t *transport) (unwatch func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-h.registry.Stopping():
			t.Close(wire.CloseShuttingDown, "server shutting down; reconnect")
		case <-done:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-ended
	}
}

// readConnect reads the first frame, which must be connect, within the connect deadline. The
// deadline is a timer that closes the connection with its own code, not a context on Read: a
// Read whose context ends drops the connection without a close frame.
func (h *Handler) readConnect(t *transport) (*wire.Connect, bool) {
	timer := time.AfterFunc(h.cfg.ConnectTimeout, func() {
		t.Close(wire.CloseConnectTimeout, "no connect frame within "+h.cfg.ConnectTimeout.String())
	})
	defer timer.Stop()
	typ, b, err := h.readFrame(t.c)
	if errors.Is(err, errFrameTooLarge) {
		t.closeWith(h.tooLarge(), wire.CloseFrameTooLarge)
		return nil, false
	}
	if err != nil {
		return nil, false
	}
	if typ != websocket.MessageText {
		t.closeWith(&wire.Error{Code: wire.CodeBadFrame, Message: "frames are JSON text messages; a binary message is a protocol violation"}, wire.CloseBadFrame)
		return nil, false
	}
	f, err := wire.Decode(b, h.cfg.Session.MaxFrameBytes)
	if err != nil {
		we, ok := wire.AsError(err)
		if !ok {
			we = &wire.Error{Code: wire.CodeBadFrame, Message: err.Error()}
		}
		t.closeWith(we, wire.CloseBadFrame)
		return nil, false
	}
	connect, ok := f.(*wire.Connect)
	if !ok {
		t.closeWith(&wire.Error{Code: wire.CodeBadFrame, Field: "type",
			Message: "the first frame must be connect; send {\"type\":\"connect\",\"id\":\"1\",\"token\":\"...\"} before anything else"}, wire.CloseBadFrame)
		return nil, false
	}
	if !timer.Stop() {
		return nil, false // the deadline passed as the frame arrived: the close has begun
	}
	return connect, true
}

// read feeds the client's frames to the session until the connection ends. The session's
// close ends it: the transport's close handshake makes Read return. Read is never given a
// context that ends first, which would drop the connection without its close frame.
//
// Before it hands over a frame it waits for room for the replies, so a client that pipelines
// requests faster than it reads the replies is read more slowly: TCP holds back its writes,
// rather than the control lane overflowing and the session closing.
func (h *Handler) read(s *session.Session, c *websocket.Conn) {
	for {
		typ, b, err := h.readFrame(c)
		if errors.Is(err, errFrameTooLarge) {
			s.Fail(h.tooLarge(), wire.CloseFrameTooLarge)
			return
		}
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			s.Fail(&wire.Error{Code: wire.CodeBadFrame, Message: "frames are JSON text messages; a binary message is a protocol violation"}, wire.CloseBadFrame)
			return
		}
		// A text message must be UTF-8 (RFC 6455); one that is not is a broken client, not a
		// malformed request to answer and go on from.
		if !utf8.Valid(b) {
			s.Fail(&wire.Error{Code: wire.CodeBadFrame, Message: "a text message that is not UTF-8 is a protocol violation; send frames as UTF-8 JSON"}, wire.CloseBadFrame)
			return
		}
		if !s.AwaitReplyRoom(h.base) {
			return
		}
		s.HandleFrame(b)
	}
}

// errFrameTooLarge: a client's message is longer than the frame limit.
var errFrameTooLarge = errors.New("message longer than max_frame_bytes")

// readFrame reads one message of at most the frame limit, or fails with errFrameTooLarge once
// it has read one byte more; the rest of that message is left to the close handshake to
// discard. The limit is Herald's own, not the library's, so that the client learns of it with
// an error frame and a close reason in Herald's form.
func (h *Handler) readFrame(c *websocket.Conn) (websocket.MessageType, []byte, error) {
	typ, r, err := c.Reader(h.base)
	if err != nil {
		return 0, nil, err
	}
	limit := h.cfg.Session.MaxFrameBytes
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return 0, nil, err
	}
	if len(b) > limit {
		return typ, nil, errFrameTooLarge
	}
	return typ, b, nil
}

func (h *Handler) tooLarge() *wire.Error {
	return &wire.Error{Code: wire.CodeFrameTooLarge, Message: fmt.Sprintf(
		"a message exceeded max_frame_bytes (%d); do not resend it", h.cfg.Session.MaxFrameBytes)}
}

// maxMissedPongs is how many pings in a row may go unanswered before the connection is closed
// as dead. One missed pong is forgiven: a client stalled for a moment (a busy tab, a GC pause,
// a congested hop) would otherwise be cut off for nothing. docs/CONFIG.md (limits.ping_interval)
// and docs/PROTOCOL.md (Liveness) state the same number.
const maxMissedPongs = 2

// startPinger pings c every PingInterval until it is stopped, and closes s with
// ClosePingTimeout once maxMissedPongs pings in a row went unanswered: a code whose reaction is
// to reconnect, since a dead connection says nothing against the client.
func (h *Handler) startPinger(s *session.Session, c *websocket.Conn) *pinger {
	p := newPinger(h.base, maxMissedPongs, c.Ping, func() {
		s.Close(wire.ClosePingTimeout, fmt.Sprintf("%d pings in a row, %s apart, went unanswered", maxMissedPongs, h.cfg.PingInterval))
	})
	p.member = h.pings.Add(p.beat)
	return p
}

// pinger is one connection's liveness check. Each beat, an interval after the one before, first
// judges the ping the last beat sent, which had until now for its pong, then sends the next:
// after maxMissed unanswered in a row it calls dead and pings no more. It stops pinging, without
// calling dead, once ctx ends or a ping fails otherwise (the connection is gone, and its reader
// ends the session).
//
// A ping waits for its pong in a goroutine of its own, so a beat never blocks its wheel; that
// goroutine lives for the round trip. The wait has no deadline of its own (no timer per ping):
// the next beat judges the ping whether or not its pong came, and the pings of a connection
// that never answers end with the connection, which the second missed pong closes. Pings are
// numbered, so a pong that comes after its ping was judged is not taken for the next's.
type pinger struct {
	ctx       context.Context
	maxMissed int
	ping      func(context.Context) error
	dead      func()
	member    *heartbeat.Member

	// Owned by beat, which the wheel runs for one member at a time.
	sent   uint64 // pings sent
	missed int    // judged unanswered in a row
	done   bool   // dead was called, or the pinging ended

	answered atomic.Uint64  // the highest number of a ping answered
	failed   atomic.Bool    // a ping failed: the connection is gone, or ctx ended
	inFlight sync.WaitGroup // pings awaiting their pongs
}

func newPinger(ctx context.Context, maxMissed int, ping func(context.Context) error, dead func()) *pinger {
	return &pinger{ctx: ctx, maxMissed: maxMissed, ping: ping, dead: dead}
}

// beat judges the last ping and sends the next. It never blocks.
func (p *pinger) beat() {
	if p.done {
		return
	}
	if p.failed.Load() || p.ctx.Err() != nil {
		p.done = true
		return
	}
	if p.sent > 0 {
		if p.answered.Load() == p.sent {
			p.missed = 0
		} else if p.missed++; p.missed >= p.maxMissed {
			p.done = true
			p.dead()
			return
		}
	}
	p.sent++
	n := p.sent
	p.inFlight.Add(1)
	go func() {
		defer p.inFlight.Done()
		if err := p.ping(p.ctx); err != nil {
			p.failed.Store(true)
			return
		}
		// Pongs come in order, but the goroutines that wait for them may wake out of it.
		for {
			old := p.answered.Load()
			if old >= n || p.answered.CompareAndSwap(old, n) {
				return
			}
		}
	}()
}

// stop ends the pinging and waits for the pings awaiting their pongs, which the caller ends by
// closing the connection first. It may be called more than once.
func (p *pinger) stop() {
	if p.member != nil {
		p.member.Stop()
	}
	p.inFlight.Wait()
}

// transport writes frames as WebSocket text messages.
type transport struct {
	c       *websocket.Conn
	once    sync.Once
	scratch []byte // owned by the session's writer goroutine
}

var _ session.Transport = (*transport)(nil)

func (t *transport) Write(ctx context.Context, items []delivery.Item) error {
	for i := range items {
		// One frame per message: head and body are joined in a scratch buffer, since each Write
		// on a message writer would be a frame of its own, with its own header and deadline.
		msg := items[i].Body
		if len(items[i].Head) > 0 {
			t.scratch = append(append(t.scratch[:0], items[i].Head...), items[i].Body...)
			msg = t.scratch
		}
		if err := t.c.Write(ctx, websocket.MessageText, msg); err != nil {
			return err
		}
	}
	return nil
}

func (t *transport) Close(code wire.CloseCode, reason string) {
	t.once.Do(func() {
		_ = t.c.Close(websocket.StatusCode(code), wire.CloseReason(code, reason))
	})
}

// closeWith sends an error frame, then closes: a client learns why before the close.
func (t *transport) closeWith(e *wire.Error, code wire.CloseCode) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if b, err := wire.AppendFrame(nil, e); err == nil {
		_ = t.c.Write(ctx, websocket.MessageText, b)
	}
	t.Close(code, e.Message)
}
