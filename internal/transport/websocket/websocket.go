// Package websocket serves Herald's protocol over WebSocket: it upgrades the request, reads the
// connect frame, verifies the token, and then runs one session per connection: this package's
// reader goroutine (the request's own) feeds the session's frames, the session's writer writes
// through Transport, and a pinger checks the client is alive.
//
// The framing is this package's own (conn.go), on github.com/gobwas/ws's frame codec and
// upgrade: the session's writer hands over a batch of frames, and they go out as one text
// message each through one pooled buffer, flushed once, under one write deadline. A batch of
// small messages is one write(2).
//
// ServeHTTP returns once the connection is upgraded, letting go of net/http's goroutine and its
// buffers; the connection's own goroutine reads it from then on. A live connection holds that
// goroutine and nothing else while it is idle (the session's writer runs only while there is
// something to write), and a 256-byte read buffer: a control frame or a small request is one
// read(2), a larger message is read straight into its own slice, and frames are written through
// a pooled buffer only while a write is in progress. The pinger is a member of the handler's
// heartbeat wheel, which pings the connections due in the same tick together; a ping is written
// by a goroutine that lives for that write, and nothing waits for its pong: the reader records
// it, and the next beat judges it. Every goroutine a connection starts ends before the
// connection gives back its slot (the release Registry.Admit returned), which it does last.
package websocket

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/transport/heartbeat"
	"github.com/heraldrt/herald/internal/wire"
)

// Subprotocol is the WebSocket subprotocol of protocol v1.
const Subprotocol = "herald.v1"

// upgrader answers the upgrade. ServeHTTP has checked that herald.v1 is offered. No extension
// is negotiated: per-message compression would compress each connection's copy of a frame
// that fan-out encodes once for all of them.
var upgrader = ws.HTTPUpgrader{
	Timeout:  10 * time.Second,
	Protocol: func(p string) bool { return p == Subprotocol },
}

// Config configures the handler. The zero value of each field means its default.
type Config struct {
	// ConnectTimeout is how long a client has to send connect after the upgrade. Default 10s.
	ConnectTimeout time.Duration
	// PingInterval is how often the server pings. Each ping is to be answered before the next
	// is due; maxMissedPongs in a row unanswered close the connection. Default 50s.
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
		cfg.PingInterval = 50 * time.Second
	}
	cfg.Session.PingInterval = cfg.PingInterval
	if cfg.Session.MaxFrameBytes <= 0 {
		cfg.Session.MaxFrameBytes = wire.DefaultMaxFrameBytes
	}
	if cfg.Session.Codec == nil {
		cfg.Session.Codec = wire.Codec{}
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
		heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeUnsupportedVersion,
			Message: "offer the WebSocket subprotocol herald.v1 (Sec-WebSocket-Protocol: herald.v1); this server speaks herald.v1"})
		return
	}
	release, admitted := h.registry.Admit()
	// Auth is by token, never by cookie, so a page on another origin gains nothing a token
	// would not already give it: every origin may connect.
	nc, rw, _, err := upgrader.Upgrade(r, w)
	if err != nil {
		if nc != nil {
			_ = nc.Close() // Upgrade has answered the request
		}
		if admitted {
			release()
		}
		return
	}
	// Only what the client sent past the upgrade request is kept of net/http's buffers.
	t := newConn(nc, rw.Reader)
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
func (h *Handler) serve(t *conn, upgradeToken string, release func()) {
	defer release()
	defer t.Close(wire.CloseNormal, "")
	var (
		c       *heraldv1.Conn
		untrack func()
		ok      bool
	)
	aside(func() { c, untrack, ok = h.open(t, upgradeToken) })
	if !ok {
		return
	}
	defer untrack()
	s := c.Session()

	p := h.startPinger(s, t)
	// The session's writer runs only while there is something to write: between writes this
	// goroutine, the reader, is the connection's only one.
	s.Start(h.base)
	h.read(c, t)
	s.Lost("connection closed")
	s.Wait()
	// After the writer: it has closed the connection, so a ping being written fails at once.
	p.stop()
}

// open runs the connect handshake and returns the tracked session, with welcome queued, or
// false once it has closed the connection with the reason. What the handshake needed is let
// go when it returns, rather than held for the connection's life.
func (h *Handler) open(t *conn, upgradeToken string) (_ *heraldv1.Conn, untrack func(), ok bool) {
	// Until its session is tracked the server's shutdown cannot reach this connection, and
	// would end it by cutting the handshake's read, with no close frame: watch for it here.
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
		we := heraldv1.AuthError(connect.ID, err)
		t.closeWith(we, heraldv1.AuthCloseCode(we))
		return nil, nil, false
	}
	s, err := session.New(h.cfg.Session, h.deps, heraldv1.Transport(t), ident)
	if err != nil {
		h.log.Error("new session", "error", err)
		t.closeWith(&wire.Error{ID: connect.ID, Code: wire.CodeInternal, Message: "the server could not open a session"}, wire.CloseInternal)
		return nil, nil, false
	}
	untrack = h.registry.Track(s)
	unwatch() // the server's shutdown closes the session from here on
	c := heraldv1.New(s)
	c.Send(c.Welcome(connect.ID))
	return c, untrack, true
}

// closeOnStopping closes t with 1012 if the node begins to stop before the returned function
// is called. That function waits for the watch to end and may be called more than once.
func (h *Handler) closeOnStopping(t *conn) (unwatch func()) {
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
// deadline is a timer that closes the connection with its own code, not a deadline on the
// read: a read cut by its deadline ends the connection without a close frame.
func (h *Handler) readConnect(t *conn) (*wire.Connect, bool) {
	timer := time.AfterFunc(h.cfg.ConnectTimeout, func() {
		t.Close(wire.CloseConnectTimeout, "no connect frame within "+h.cfg.ConnectTimeout.String())
	})
	defer timer.Stop()
	op, b, err := t.readMessage(h.cfg.Session.MaxFrameBytes)
	if err == nil {
		err = checkText(op, b)
	}
	if err != nil {
		if e, code, ok := h.readError(err); ok {
			t.closeWith(e, code)
		}
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
// close ends it: the close handshake's read deadline, or the client's close frame, ends the
// read in progress.
//
// Before it hands over a frame it waits for room for the replies, so a client that pipelines
// requests faster than it reads the replies is read more slowly: TCP holds back its writes,
// rather than the control lane overflowing and the session closing.
func (h *Handler) read(c *heraldv1.Conn, t *conn) {
	s := c.Session()
	for {
		op, b, err := t.readMessage(h.cfg.Session.MaxFrameBytes)
		if err == nil {
			err = checkText(op, b)
		}
		if err != nil {
			if e, code, ok := h.readError(err); ok {
				c.Fail(e, code)
			}
			return
		}
		if !s.AwaitReplyRoom(h.base) {
			return
		}
		aside(func() { c.HandleFrame(h.base, b) })
	}
}

// aside runs f on a goroutine of its own and waits for it to return. The reader runs the
// handshake (token verification) and the handling of each frame (a subscribe calls into the
// hub or the router) this way, so that the stack they grow is let go when they return: the
// reader itself, parked in a read for most of the connection's life, keeps the small stack the
// read needs, instead of the largest any frame needed until the collector shrinks it a half at
// a time. A client's frames are few; a goroutine each costs about a microsecond.
func aside(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// errBinary and errNotUTF8: a message that is not a frame, and cannot be answered as one.
var (
	errBinary  = errors.New("binary message")
	errNotUTF8 = errors.New("text message that is not UTF-8")
)

// checkText checks that a message is text, and UTF-8 (RFC 6455): one that is not is a broken
// client, not a malformed request to answer and go on from.
func checkText(op ws.OpCode, b []byte) error {
	switch {
	case op != ws.OpText:
		return errBinary
	case !utf8.Valid(b):
		return errNotUTF8
	}
	return nil
}

// readError is the error frame and close code that answer a failed read, or ok false when
// the connection has ended and there is no one to tell.
func (h *Handler) readError(err error) (*wire.Error, wire.CloseCode, bool) {
	var fe *framingError
	switch {
	case errors.Is(err, errFrameTooLarge):
		return h.tooLarge(), wire.CloseFrameTooLarge, true
	case errors.Is(err, errBinary):
		return &wire.Error{Code: wire.CodeBadFrame, Message: "frames are JSON text messages; a binary message is a protocol violation"}, wire.CloseBadFrame, true
	case errors.Is(err, errNotUTF8):
		return &wire.Error{Code: wire.CodeBadFrame, Message: "a text message that is not UTF-8 is a protocol violation; send frames as UTF-8 JSON"}, wire.CloseBadFrame, true
	case errors.As(err, &fe):
		return &wire.Error{Code: wire.CodeBadFrame, Message: fe.Error() + " (RFC 6455); the client's WebSocket implementation is broken"}, wire.CloseBadFrame, true
	}
	return nil, 0, false
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
func (h *Handler) startPinger(s *session.Session, c *conn) *pinger {
	p := newPinger(h.base, maxMissedPongs, c.ping, c.answered, func() {
		s.Close(session.ClosePingTimeout, fmt.Sprintf("%d pings in a row, %s apart, went unanswered", maxMissedPongs, h.cfg.PingInterval))
	})
	p.try = c.tryPing
	p.member = h.pings.Add(p.beat)
	return p
}

// pinger is one connection's liveness check. Each beat, an interval after the one before, first
// judges the ping the last beat sent, which had until now for its pong, then sends the next:
// after maxMissed unanswered in a row it calls dead and pings no more. It stops pinging, without
// calling dead, once ctx ends or a ping's write fails (the connection is gone, and its reader
// ends the session).
//
// Nothing waits for a pong: the reader records the latest one (conn.gotPong), and the next beat
// compares it with the ping it judges. A ping is written by a goroutine that lives for that
// write only, since a beat must not block its wheel and a write may (on a client that stopped
// reading, until its deadline). Pings are numbered, so a pong that comes after its ping was
// judged is not taken for the next's. Most pings go to a connection that is reading and
// writing nothing else: those are written by the beat itself when try can do so without waiting
// (conn.tryPing), and only the others get a goroutine. A goroutine per ping, a tick's worth of
// connections at once, left the runtime holding that many goroutines' structs and stacks for good.
type pinger struct {
	ctx       context.Context
	maxMissed int
	ping      func(ctx context.Context, n uint64) error
	// try, if set, writes ping n without waiting when it can: it reports whether it did, and
	// the error that broke the connection if the write cut the frame.
	try      func(n uint64) (bool, error)
	answered func() uint64 // the number of the latest ping answered
	dead     func()
	member   *heartbeat.Member

	// Owned by beat, which the wheel runs for one member at a time.
	sent   uint64 // pings sent
	missed int    // judged unanswered in a row
	done   bool   // dead was called, or the pinging ended

	busy     atomic.Bool    // a ping is being written
	failed   atomic.Bool    // a ping's write failed: the connection is gone, or ctx ended
	inFlight sync.WaitGroup // the ping being written
}

func newPinger(ctx context.Context, maxMissed int, ping func(context.Context, uint64) error, answered func() uint64, dead func()) *pinger {
	return &pinger{ctx: ctx, maxMissed: maxMissed, ping: ping, answered: answered, dead: dead}
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
		if p.answered() >= p.sent {
			p.missed = 0
		} else if p.missed++; p.missed >= p.maxMissed {
			p.done = true
			p.dead()
			return
		}
	}
	// A ping whose write is still blocked (the client stopped reading) was not answered, and
	// is judged again; no other is sent until it has gone out. The session's slow limit ends
	// such a connection first.
	if !p.busy.CompareAndSwap(false, true) {
		return
	}
	p.sent++
	n := p.sent
	if p.try != nil {
		if ok, err := p.try(n); ok {
			p.busy.Store(false)
			if err != nil {
				p.failed.Store(true)
			}
			return
		}
	}
	p.inFlight.Add(1)
	go func() {
		defer p.inFlight.Done()
		defer p.busy.Store(false)
		if err := p.ping(p.ctx, n); err != nil {
			p.failed.Store(true)
		}
	}()
}

// stop ends the pinging and waits for a ping being written, which the caller ends by closing
// the connection first. It may be called more than once.
func (p *pinger) stop() {
	if p.member != nil {
		p.member.Stop()
	}
	p.inFlight.Wait()
}
