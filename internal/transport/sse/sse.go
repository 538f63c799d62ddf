// Package sse serves Herald's protocol as Server-Sent Events: GET opens a stream whose URL may
// declare one subscription, and POST carries the client's commands to the stream's session,
// whose replies arrive on the stream in order with the data.
//
// On HTTP/1.x a stream takes its connection over from net/http (Hijack) once the session is
// open and its URL subscription accepted, writes the status line and headers itself and frames
// the body itself (chunked for HTTP/1.1, ended by the connection's close for HTTP/1.0; the
// connection closes with the stream either way), and the request's goroutine returns: with it
// go the request and net/http's buffers. A goroutine of its own then reads the connection, only
// to learn that the client went away; it is the stream's only goroutine while it is idle, since
// the session's writer runs only while there is something to write. Writes go through a pooled
// buffer, one write(2) per batch, under a socket deadline moved only when it is well off.
//
// On HTTP/2, whose streams share a connection, the stream stays on the ResponseWriter: the
// request's goroutine runs the session to its end, and the client's going away reaches the
// session through context.AfterFunc on the request's context.
//
// Keepalives come from the handler's heartbeat wheel, which serves the streams due in the same
// tick together; each keepalive is written by the tick itself when the stream's socket takes it
// at once, and otherwise by a goroutine that lives for that one write. The
// stream stops them and waits for a keepalive in flight before it gives its slot back. Writes
// to a stream go through one mutex, shared by the writer, the keepalive and Close.
//
// On many nodes behind a load balancer that is not sticky, a command may reach any node. A
// stream's session id names its node ("<node>.<random>", Config.Node), so the node a command
// reaches knows at once whether it holds the stream; when it does not, it hands the request to
// the node the id names (Config.Peers finds its URL) and relays that node's answer. A request
// handed on is marked (ForwardedHeader) and never handed on again.
package sse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/ratelog"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/transport/heartbeat"
	"github.com/heraldrt/herald/internal/wire"
)

// Config configures the handler. The zero value of each field means its default.
type Config struct {
	// PingInterval is how often a keepalive comment goes out. Default 50s.
	PingInterval time.Duration
	// Session configures the streams' sessions; its Node is always this Config's Node.
	Session session.Config
	// Node is this node's id (cluster.node_id), which starts every stream's session id
	// ("<node>.<random>", session.NodeOf), so a command posted to another node can be handed
	// to this one. 1 to 64 ASCII letters, digits, "-" or "_". Empty: one node.
	Node string
	// Peers finds the node a command's session id names when it is not this one. nil: one
	// node, and a command for a session this node does not hold is not_found.
	Peers Peers
	// ForwardTimeout bounds a command handed to another node, from the dial to the end of its
	// answer. Default 10s.
	ForwardTimeout time.Duration
	// Client hands commands to other nodes: set it for https between nodes with a CA of its
	// own, say. nil: the handler's own, with ForwardTimeout, which never uses a proxy from the
	// environment and closes its idle connections when base ends.
	Client *http.Client
	// ResumeWindow is how long an ended stream's subscriptions are kept for a reconnect whose
	// Last-Event-ID names the stream (limits.sse_resume_window); 0 keeps none, and only the
	// URL subscription resumes. ResumeStreams bounds how many are kept (default 10000).
	ResumeWindow  time.Duration
	ResumeStreams int
	Logger        *slog.Logger
}

// Handler serves GET /v1/sse and POST /v1/sse/{session}.
type Handler struct {
	cfg      Config
	deps     session.Deps
	auth     session.Authenticator
	registry session.Registry
	base     context.Context
	log      *slog.Logger

	keepalives *heartbeat.Wheel // every stream's keepalive

	client   *http.Client // read-only: hands commands to other nodes
	forwards forwardStats
	// forwardLog logs a command that could not be handed on once per node and outcome per
	// interval: a node that went away fails every command its clients post.
	forwardLog *ratelog.Limiter

	kept *kept // ended streams' subscriptions, for a reconnect to take up; nil: none kept

	mu      sync.Mutex
	streams map[string]*heraldv1.Conn // guarded by mu: live streams by session id
}

// New returns the SSE handler. base is the server's context: sessions run under it.
func New(base context.Context, cfg Config, deps session.Deps, a session.Authenticator, r session.Registry) *Handler {
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 50 * time.Second
	}
	cfg.Session.PingInterval = cfg.PingInterval
	if cfg.Session.Codec == nil {
		cfg.Session.Codec = wire.Codec{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Session.Logger == nil {
		cfg.Session.Logger = cfg.Logger
	}
	cfg.Session.Node = cfg.Node
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = 10 * time.Second
	}
	client := cfg.Client
	if client == nil && cfg.Peers != nil {
		client = newForwardClient(cfg.ForwardTimeout)
		context.AfterFunc(base, client.CloseIdleConnections)
	}
	return &Handler{cfg: cfg, deps: deps, auth: a, registry: r, base: base, log: cfg.Logger,
		keepalives: heartbeat.New(cfg.PingInterval), client: client, streams: map[string]*heraldv1.Conn{},
		kept:       newKept(cfg.ResumeWindow, cfg.ResumeStreams),
		forwardLog: ratelog.New(cfg.Logger, ratelog.Config{})}
}

func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return r.URL.Query().Get("access_token")
}

func authError(err error) *wire.Error { return heraldv1.AuthError("", err) }

// Stream serves GET /v1/sse.
func (h *Handler) Stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeInternal, Message: "the response cannot stream"})
		return
	}
	lastID := r.Header.Get("Last-Event-ID")
	if lastID == "" {
		lastID = r.URL.Query().Get("last_event_id")
	}
	var last *wire.EventID
	if lastID != "" {
		id, err := wire.ParseEventID(lastID)
		if err != nil {
			heraldv1.WriteHTTPError(w, err.(*wire.Error))
			return
		}
		last = &id
	}
	sub, err := wire.SubscribeFromQuery(r.URL.Query(), last)
	if err != nil {
		we, ok := wire.AsError(err)
		if !ok {
			we = &wire.Error{Code: wire.CodeBadFrame, Message: err.Error()}
		}
		heraldv1.WriteHTTPError(w, we)
		return
	}
	ident, err := h.auth.Authenticate(bearer(r))
	if err != nil {
		heraldv1.WriteHTTPError(w, authError(err))
		return
	}
	release, ok := h.registry.Admit()
	if !ok {
		// A refusal that may pass: a 200 stream that ends at once, so EventSource retries.
		t := &transport{w: w, rc: http.NewResponseController(w), flusher: flusher, done: make(chan struct{})}
		startStream(w, flusher)
		t.Close(wire.CloseTooManyConnections, "this node is at its connection limit (limits.max_connections); reconnect with backoff starting at 10 s")
		return
	}
	defer func() { release() }()

	ids := &eventIDs{}
	if sub != nil {
		ids.urlSub = sub.Sub
	}
	t := &transport{w: w, rc: http.NewResponseController(w), flusher: flusher, done: make(chan struct{}), slow: h.slowTimeout(), ids: ids}
	lt := &lateTransport{Carrier: t}
	s, err := session.New(h.cfg.Session, h.deps, heraldv1.Transport(lt), ident)
	if err != nil {
		startStream(w, flusher)
		_, _ = fmt.Fprintf(w, "retry: 2000\n\ndata: {\"type\":\"error\",\"code\":\"internal\",\"status\":500,\"message\":\"the server could not open a session\"}\n\n")
		flusher.Flush()
		return
	}
	c := heraldv1.New(s)
	if h.kept != nil {
		// Before anything is written: every subscription's frames carry the long ids.
		ids.session = s.ID()
		c.Keep()
	}
	c.Send(c.Welcome(""))
	if sub != nil {
		if we := c.Subscribe(r.Context(), sub); we != nil {
			s.Abort()
			if we.StatusCode() >= 500 {
				// A refusal that may pass: a 200 stream that ends at once, so EventSource
				// retries instead of giving up for good.
				startStream(w, flusher)
				b, _ := wire.AppendFrame(nil, we)
				_, _ = fmt.Fprintf(w, "retry: 2000\n\ndata: %s\n\n", b)
				flusher.Flush()
				return
			}
			heraldv1.WriteHTTPError(w, we)
			return
		}
	}
	// On HTTP/1.x the stream takes the connection over from net/http once its headers are
	// written, and this goroutine returns: with it go the request and net/http's buffers and
	// state for the connection, which an idle stream would otherwise hold for its whole life.
	if last != nil && last.Session != "" {
		h.resume(r.Context(), c, last, ownerOf(ident), bearer(r), ids.urlSub)
	}
	keep := func() {
		// A stream whose only subscription was its URL's wrote ids of the short form, which
		// name no stream to take up: nothing of it is worth keeping.
		if defs := c.Definitions(); len(defs) > 1 || len(defs) == 1 && defs[0].Sub != ids.urlSub {
			h.kept.keep(s.ID(), ownerOf(ident), defs)
		}
	}
	if ht := h.hijack(w, r, ids); ht != nil {
		lt.Carrier = ht // before the writer starts: nothing has been written yet
		untrack := h.registry.Track(s)
		h.add(c)
		slot := release
		release = func() {} // serveHijacked gives the slot back, last
		go h.serveHijacked(s, ht, func() {
			h.remove(c)
			keep()
			untrack()
			slot()
		})
		return
	}

	untrack := h.registry.Track(s)
	defer untrack()
	h.add(c)
	defer h.remove(c)
	defer keep()

	startStream(w, flusher)

	gone := context.AfterFunc(r.Context(), func() {
		// The request's context derives from the node's: when the node shuts down, it ends too,
		// but the client is still there, and the session's own watch of h.base closes it with
		// the ending the client is owed.
		if h.base.Err() != nil {
			return
		}
		s.Lost("client went away")
	})
	ka := &keepalive{s: s, t: t, slow: t.slow}
	ka.member = h.keepalives.Add(ka.beat)
	s.Run(h.base)
	ka.stop()
	gone()
}

// lateTransport is the session's transport: the response, until the stream takes the
// connection over, before the session starts.
type lateTransport struct{ heraldv1.Carrier }

// add and remove enter a live stream's session in the table commands are addressed by.
func (h *Handler) add(c *heraldv1.Conn) {
	h.mu.Lock()
	h.streams[c.Session().ID()] = c
	h.mu.Unlock()
}

func (h *Handler) remove(c *heraldv1.Conn) {
	h.mu.Lock()
	delete(h.streams, c.Session().ID())
	h.mu.Unlock()
}

// serveHijacked runs a stream whose connection was taken over: this goroutine reads the
// connection, only to learn when the client goes away, and the session's writer runs only while
// there is something to write. Every goroutine it started has ended before it calls done, which
// gives the connection's slot back last.
func (h *Handler) serveHijacked(s *session.Session, t *rawTransport, done func()) {
	defer done()
	ka := &keepalive{s: s, t: t, slow: t.slow}
	ka.member = h.keepalives.Add(ka.beat)
	s.Start(h.base)
	t.awaitGone()
	s.Lost("client went away")
	s.Wait()
	ka.stop()
}

// keepalive is one stream's keepalive: each beat of the wheel writes a comment line. On a stream
// taken over from net/http the beat writes it itself when that cannot wait (tryComment);
// otherwise the line is written in a goroutine of its own, since a client that stopped reading
// blocks the write (until the slow limit, when it ends the stream as too slow). A beat that
// finds the last keepalive still blocked writes no other.
type keepalive struct {
	s      *session.Session
	t      interface{ comment() error }
	slow   time.Duration // how long a keepalive write may block
	member *heartbeat.Member

	done     bool           // owned by beat: a keepalive failed, and the stream is ending
	busy     atomic.Bool    // a keepalive is being written
	failed   atomic.Bool    // one failed
	inFlight sync.WaitGroup // the keepalive being written
}

// beat starts the next keepalive. It never blocks.
func (k *keepalive) beat() {
	if k.done || k.failed.Load() {
		k.done = true
		return
	}
	if !k.busy.CompareAndSwap(false, true) {
		return
	}
	if tc, ok := k.t.(interface{ tryComment() (bool, error) }); ok {
		if done, err := tc.tryComment(); done {
			k.busy.Store(false)
			if err != nil {
				k.fail(err)
			}
			return
		}
	}
	k.inFlight.Add(1)
	go func() {
		defer k.inFlight.Done()
		defer k.busy.Store(false)
		if err := k.t.comment(); err != nil {
			k.fail(err)
		}
	}()
}

// fail ends the stream for a keepalive that could not be written.
func (k *keepalive) fail(err error) {
	k.failed.Store(true)
	if errors.Is(err, errBlocked) {
		k.s.Close(session.CloseTooSlow, fmt.Sprintf("a keepalive write was blocked for %s", k.slow))
	} else {
		k.s.Lost("connection lost")
	}
}

// stop ends the keepalives and waits for one being written: the session's end has closed the
// stream, so its write fails at once.
func (k *keepalive) stop() {
	k.member.Stop()
	k.inFlight.Wait()
}

// slowTimeout is how long one write to a stream may block: the session's SlowTimeout.
func (h *Handler) slowTimeout() time.Duration {
	if d := h.cfg.Session.SlowTimeout; d > 0 {
		return d
	}
	return 10 * time.Second
}

func startStream(w http.ResponseWriter, flusher http.Flusher) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
}

// errNoStream answers a command for a session no live stream has.
var errNoStream = &wire.Error{Code: wire.CodeNotFound, Message: "no live stream has this session id; open a stream with GET /v1/sse and use its welcome's session"}

// Command serves POST /v1/sse/{session}: one client frame for a live stream's session. A
// session another node holds (its id names that node) has the request handed to that node,
// whose answer this one relays (forward.go).
func (h *Handler) Command(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	h.mu.Lock()
	c := h.streams[id]
	h.mu.Unlock()
	if c == nil {
		if node := session.NodeOf(id); h.cfg.Peers != nil && node != "" && node != h.cfg.Node && r.Header.Get(ForwardedHeader) == "" {
			h.forward(w, r, node)
			return
		}
		// No other node to ask: this one, the one the id names, does not hold it (or it was
		// handed here by another node, which must not be handed it back: no loops).
		heraldv1.WriteHTTPError(w, errNoStream)
		return
	}
	body, ok := readFrame(w, r, h.cfg.Session.MaxFrameBytes)
	if !ok {
		return
	}
	f, err := wire.Decode(body, h.cfg.Session.MaxFrameBytes)
	if err != nil {
		we, ok := wire.AsError(err)
		if !ok {
			we = &wire.Error{Code: wire.CodeBadFrame, Message: err.Error()}
		}
		heraldv1.WriteHTTPError(w, we)
		return
	}
	// The session belongs to the identity that opened the stream: a command must prove the
	// same identity, except a refresh, whose frame carries its own token.
	if _, isRefresh := f.(*wire.Refresh); !isRefresh {
		ident, err := h.auth.Authenticate(bearer(r))
		if err != nil {
			heraldv1.WriteHTTPError(w, authError(err))
			return
		}
		owner := c.Session().Identity()
		if ident.Subject != owner.Subject || ident.Anonymous != owner.Anonymous {
			heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeForbidden, Message: "this session belongs to another identity"})
			return
		}
	}
	if we := c.TryHandle(r.Context(), f); we != nil {
		heraldv1.WriteHTTPError(w, we)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// readFrame reads a command's body, one frame of at most maxFrameBytes, or answers
// frame_too_large and returns false.
func readFrame(w http.ResponseWriter, r *http.Request, maxFrameBytes int) ([]byte, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, int64(maxFrame(maxFrameBytes)))
	body, err := io.ReadAll(r.Body)
	if err != nil {
		heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeFrameTooLarge, Message: "the frame is longer than limits.max_frame_bytes; send less per frame"})
		return nil, false
	}
	return body, true
}

func maxFrame(n int) int {
	if n <= 0 {
		return wire.DefaultMaxFrameBytes
	}
	return n
}

// transport writes frames as SSE events.
type transport struct {
	mu      sync.Mutex // serializes writes to w
	w       http.ResponseWriter
	rc      *http.ResponseController
	flusher http.Flusher
	ids     *eventIDs     // what the event ids say; guarded by mu
	slow    time.Duration // how long a keepalive write may block
	buf     []byte
	// lastWasError: the last frame written was an error frame, which then is the stream's
	// explanation of its end. Guarded by mu.
	lastWasError bool
	once         sync.Once
	done         chan struct{}
}

var _ heraldv1.Carrier = (*transport)(nil)

func (t *transport) Write(deadline time.Time, items []delivery.Item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_ = t.rc.SetWriteDeadline(deadline)
	b := appendEvents(t.buf[:0], items, t.ids)
	t.buf = b
	if n := len(items); n > 0 {
		t.lastWasError = bytes.HasPrefix(items[n-1].Body, errorPrefix)
	}
	if _, err := t.w.Write(b); err != nil {
		return err
	}
	// Flush through the controller, which reports failure: the frames may still be in the
	// response's buffer, and a flush stuck on a client that stopped reading is a failed write.
	if err := t.rc.Flush(); err != nil {
		return err
	}
	t.clearDeadline()
	return nil
}

// appendEvents appends items as SSE events: each frame one data line, with an id line when it
// is about a subscription whose frames carry ids, at a position, or ends one (see eventIDs).
func appendEvents(b []byte, items []delivery.Item, ids *eventIDs) []byte {
	for i := range items {
		it := &items[i]
		switch {
		case it.Kind == delivery.KindData && it.Pos != "" && ids.tracked(it.Key):
			// A snapshot's pages have none: the subscription's position is its live's.
			ids.set(it.Key, it.Pos)
			b = ids.appendID(b)
		case it.Kind == delivery.KindMarker && it.Marker != nil && ids.tracked(it.Marker.Key):
			ids.set(it.Marker.Key, it.Marker.Last)
			b = ids.appendID(b)
		case it.Kind == delivery.KindControl && it.Pos != "" && ids.tracked(it.Key):
			// A subscribed: its id lets a reconnect before any data resume from where the
			// subscription started.
			ids.set(it.Key, it.Pos)
			b = ids.appendID(b)
		case it.Kind == delivery.KindControl && it.Ends && ids.tracked(it.Key):
			// The unsubscribed that ends one: a reconnect after it does not take it up.
			if ids.end(it.Key) {
				b = ids.appendID(b)
			}
		}
		b = append(b, "data: "...)
		b = append(b, it.Head...)
		b = append(b, it.Body...)
		b = append(b, "\n\n"...)
	}
	return b
}

var (
	// An unprompted error (no id) explains an ending; a reply to one request does not.
	errorPrefix = []byte(`{"type":"error","code"`)
)

// errBlocked is what comment returns for a write that failed once its deadline had passed: the
// client stopped reading.
var errBlocked = errors.New("sse: a write was blocked past its deadline")

// keepaliveComment is the comment line a keepalive writes.
var keepaliveComment = []byte(": ping\n\n")

// comment writes the keepalive comment line, within the slow limit.
func (t *transport) comment() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.done:
		return net.ErrClosed // the stream has ended
	default:
	}
	dl := time.Now().Add(t.slow)
	_ = t.rc.SetWriteDeadline(dl)
	_, err := t.w.Write(keepaliveComment)
	if err == nil {
		err = t.rc.Flush()
	}
	if err != nil && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %w", errBlocked, err)
	}
	if err == nil {
		t.clearDeadline()
	}
	return err
}

// clearDeadline lifts the write deadline once a write is done: left set, it would fire a timer
// for nothing, one per write, long after an idle stream's keepalive went out. Called with mu
// held.
func (t *transport) clearDeadline() { _ = t.rc.SetWriteDeadline(time.Time{}) }

// Close ends the stream. SSE has no close codes, so an ending the server chose is told as a
// last error event, after a retry field with the delay EventSource should wait before it
// reconnects (docs/PROTOCOL.md, "Refusals and endings"). When the writer is stuck on a client
// that stopped reading, nothing more can be written: the blocked write is failed (closeWait),
// and no ending follows it.
func (t *transport) Close(code wire.CloseCode, reason string) {
	t.once.Do(func() {
		defer close(t.done)
		if !t.mu.TryLock() {
			// A write in progress: a keepalive, most likely, which ends at once and leaves room
			// for the ending. One stuck on a client that stopped reading fails by this deadline
			// (safe to set without mu), and then the client is not written to again.
			dl := time.Now().Add(closeWait)
			_ = t.rc.SetWriteDeadline(dl)
			t.mu.Lock()
			if !time.Now().Before(dl) {
				t.mu.Unlock()
				return
			}
		}
		defer t.mu.Unlock()
		ending, retry := endingOf(code, reason)
		if ending == nil {
			return
		}
		_ = t.rc.SetWriteDeadline(time.Now().Add(closeWait))
		b := fmt.Appendf(nil, "retry: %d\n\n", retry.Milliseconds())
		if !t.lastWasError {
			frame, err := wire.AppendFrame(nil, ending)
			if err == nil {
				b = append(append(append(b, "data: "...), frame...), "\n\n"...)
			}
		}
		if _, err := t.w.Write(b); err == nil {
			t.flusher.Flush()
		}
	})
}

// endingOf maps a close code to the error event that ends an SSE stream, and the reconnect
// delay; nil for an ending the client asked for.
func endingOf(code wire.CloseCode, reason string) (*wire.Error, time.Duration) {
	var c wire.Code
	retry := time.Second
	switch code {
	case wire.CloseNormal:
		return nil, 0
	case wire.CloseShuttingDown:
		c, retry = wire.CodeUnavailable, time.Duration(1000+rand.IntN(4000))*time.Millisecond
	case wire.CloseTooSlow:
		c = wire.CodeTooSlow
	case wire.CloseTooManyConnections:
		c, retry = wire.CodeTooManyConnections, 10*time.Second
	case wire.CloseTokenExpired:
		c = wire.CodeTokenExpired
	case wire.ClosePolicy:
		c = wire.CodeForbidden
	case wire.CloseAuthFailed:
		c = wire.CodeUnauthorized
	case wire.CloseBadFrame:
		c = wire.CodeBadFrame
	default:
		c = wire.CodeInternal
	}
	if reason == "" {
		reason = code.String()
	}
	return &wire.Error{Code: c, Message: reason}, retry
}
