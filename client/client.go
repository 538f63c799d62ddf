package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/heraldrt/herald/internal/wire"
)

// Options configures Dial. The zero value of each field means its default.
type Options struct {
	// Token is the access token sent in the connect frame. Empty: connect anonymously, or with
	// the token HTTPHeader's Authorization carries.
	Token string
	// HTTPHeader is added to the upgrade request.
	HTTPHeader http.Header
	// HTTPClient performs the upgrade. Default http.DefaultClient.
	HTTPClient *http.Client
	// Buffer is how many data frames wait for Next before the reader stops reading. Default
	// 256.
	Buffer int
	// MaxFrameBytes bounds one server frame. Default 0: no bound, as the protocol sets none
	// (a frame carries a row or a payload of any size).
	MaxFrameBytes int64
}

// DefaultBuffer is Options.Buffer's default: enough to ride out a burst while the application
// handles a frame, small enough that a stalled application is noticed by the server.
const DefaultBuffer = 256

// Conn is one herald.v1 connection.
type Conn struct {
	ws      *websocket.Conn
	welcome wire.Welcome
	ids     atomic.Uint64 // request ids: "1", "2", ...; connect used "0"

	data    chan item     // owned by the reader, which closes it when it ends
	done    chan struct{} // closed when the reader has ended, after err is set
	quit    chan struct{} // closed by Close: the reader stops waiting on a full data queue
	closing atomic.Bool   // Close was called

	mu        sync.Mutex
	pending   map[string]chan wire.Frame // guarded by mu: requests waiting for their reply
	positions map[string]wire.Position   // guarded by mu: the last position Next returned, by sub
	// unplaced holds the subs whose subscribed carried no position: channel patterns, which
	// span channels with unrelated positions, so none of their frames is a place to resume
	// from. Guarded by mu.
	unplaced map[string]bool
	err      error // guarded by mu: why the connection ended; set before done closes

	closeOnce sync.Once
}

// item is one data frame for Next.
type item struct {
	f   wire.Frame
	raw []byte
}

// Dial connects to a Herald node and completes the connect handshake. rawURL is the node's
// base URL (ws://host:8080, wss://..., or http(s):// which means the same) or the full
// endpoint (ws://host:8080/v1/ws). ctx bounds the handshake only.
//
// A refused token is a *CloseError (4101 auth_failed or 4100 token_expired) whose Cause is the
// server's *Error saying why.
func Dial(ctx context.Context, rawURL string, opts Options) (*Conn, error) {
	endpoint, err := Endpoint(rawURL, "/v1/ws")
	if err != nil {
		return nil, err
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	ws, resp, err := websocket.Dial(ctx, endpoint, &websocket.DialOptions{
		HTTPClient:   opts.HTTPClient,
		HTTPHeader:   opts.HTTPHeader,
		Subprotocols: []string{wire.Subprotocol},
	})
	if err != nil {
		if e := refusal(resp); e != nil {
			return nil, e
		}
		return nil, fmt.Errorf("dial %s: %w", endpoint, err)
	}
	if ws.Subprotocol() != wire.Subprotocol {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("dial %s: the server did not accept subprotocol %s: it is not a Herald v1 endpoint", endpoint, wire.Subprotocol)
	}
	if opts.MaxFrameBytes > 0 {
		ws.SetReadLimit(opts.MaxFrameBytes)
	} else {
		ws.SetReadLimit(-1)
	}
	w, err := handshake(ctx, ws, opts.Token)
	if err != nil {
		_ = ws.CloseNow()
		return nil, err
	}
	c := &Conn{
		ws:        ws,
		welcome:   *w,
		data:      make(chan item, opts.Buffer),
		done:      make(chan struct{}),
		quit:      make(chan struct{}),
		pending:   map[string]chan wire.Frame{},
		positions: map[string]wire.Position{},
		unplaced:  map[string]bool{},
	}
	go c.read()
	return c, nil
}

// Endpoint turns a node's base URL into the URL of path on it: ws:// and wss:// stay, http://
// and https:// become them, a missing scheme is ws://, and a URL with no path gets path.
func Endpoint(rawURL, path string) (string, error) {
	if !strings.Contains(rawURL, "://") {
		rawURL = "ws://" + rawURL
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("herald URL %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("herald URL %q: scheme %q: want ws, wss, http or https", rawURL, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("herald URL %q has no host: want ws://host:port", rawURL)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = path
	}
	return u.String(), nil
}

// refusal reads the error frame of a refused upgrade (426 unsupported_version, 503, ...).
func refusal(resp *http.Response) error {
	if resp == nil || resp.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	f, err := wire.DecodeServer(b, 0)
	if err != nil {
		return nil
	}
	if e, ok := f.(*wire.Error); ok {
		return newError("connect", "", e)
	}
	return nil
}

// handshake sends connect and reads the welcome. A refusal is an error frame and a close.
func handshake(ctx context.Context, ws *websocket.Conn, token string) (*wire.Welcome, error) {
	b, err := wire.AppendFrame(nil, &wire.Connect{ID: "0", Token: token})
	if err != nil {
		return nil, err
	}
	if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, fmt.Errorf("send connect: %w", err)
	}
	var cause *Error
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			if ce := closeErrorOf(err); ce != nil {
				ce.Cause = cause
				return nil, ce
			}
			return nil, fmt.Errorf("read welcome: %w", err)
		}
		f, err := wire.DecodeServer(msg, 0)
		if err != nil {
			return nil, fmt.Errorf("read welcome: %w", err)
		}
		switch f := f.(type) {
		case *wire.Welcome:
			if f.Version != wire.Version {
				return nil, fmt.Errorf("welcome: protocol version %d, want %d", f.Version, wire.Version)
			}
			return f, nil
		case *wire.Error:
			// A close follows: read on to learn its code.
			cause = newError("connect", "", f)
		default:
			return nil, fmt.Errorf("read welcome: got a %s frame first", f.Type())
		}
	}
}

// closeErrorOf turns the WebSocket library's read error into a *CloseError.
func closeErrorOf(err error) *CloseError {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return &CloseError{Code: CloseCode(ce.Code), Reason: ce.Reason, Err: err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return &CloseError{Code: closeAbnormal, Err: err}
}

// Welcome returns the server's welcome: its limits, the session id, the token's expiry.
func (c *Conn) Welcome() Welcome { return c.welcome }

// read is the reader goroutine: it routes replies to their requests and queues data for Next.
// It ends when the connection does, records why, and wakes every waiter.
func (c *Conn) read() {
	var (
		last    wire.Frame // the last frame read: an error frame before a close explains it
		lastErr error
	)
	defer func() {
		c.mu.Lock()
		if c.closing.Load() {
			c.err = ErrClosed
		} else {
			ce, ok := lastErr.(*CloseError) // an unreadable frame, recorded below
			if !ok {
				ce = closeErrorOf(lastErr)
			}
			if ce == nil {
				ce = &CloseError{Code: closeAbnormal, Err: lastErr}
			}
			if e, ok := last.(*wire.Error); ok {
				ce.Cause = newError("connection", e.Sub, e)
			}
			c.err = ce
		}
		c.mu.Unlock()
		close(c.done)
		close(c.data)
		_ = c.ws.CloseNow()
	}()
	for {
		// The context never ends: a read whose context ends drops the connection without a
		// close frame. Close and the server's close end the read instead.
		_, msg, err := c.ws.Read(context.Background())
		if err != nil {
			lastErr = err
			return
		}
		f, err := wire.DecodeServer(msg, 0)
		if err != nil {
			if wire.CodeOf(err) == wire.CodeUnknownType {
				continue // a newer server's frame type: ignore it, as v1 requires
			}
			// A frame this client cannot read: its view can no longer be trusted.
			lastErr = &CloseError{Code: closeProtocolError, Err: fmt.Errorf("read a server frame: %w", err)}
			_ = c.ws.Close(websocket.StatusProtocolError, "unreadable server frame")
			return
		}
		last = f
		if id, ok := replyID(f); ok && c.reply(id, f) {
			continue
		}
		select {
		case c.data <- item{f: f, raw: msg}:
		case <-c.quit:
			lastErr = ErrClosed
			return
		}
	}
}

// replyID returns the request id a frame answers, if it answers one.
func replyID(f wire.Frame) (string, bool) {
	switch f := f.(type) {
	case *wire.Subscribed:
		return f.ID, f.ID != ""
	case *wire.Unsubscribed:
		return f.ID, f.ID != ""
	case *wire.Published:
		return f.ID, true
	case *wire.Pong:
		return f.ID, true
	case *wire.Refreshed:
		return f.ID, true
	case *wire.Tracked:
		return f.ID, true
	case *wire.Untracked:
		return f.ID, true
	case *wire.Error:
		return f.ID, f.ID != ""
	}
	return "", false
}

// reply hands f to the request waiting for id; false when none is.
func (c *Conn) reply(id string, f wire.Frame) bool {
	c.mu.Lock()
	ch, ok := c.pending[id]
	delete(c.pending, id)
	// The position is recorded here, before any data of the subscription can reach Next,
	// not by the request once it wakes: that could overwrite a later position Next recorded.
	switch f := f.(type) {
	case *wire.Subscribed:
		c.positions[f.Sub] = f.Pos
		c.unplaced[f.Sub] = f.Pos.IsZero()
	case *wire.Unsubscribed:
		delete(c.positions, f.Sub)
		delete(c.unplaced, f.Sub)
	}
	c.mu.Unlock()
	if ok {
		ch <- f // buffered: the reader never waits on a request
	}
	return ok || isReply(f)
}

// isReply reports whether f only ever answers a request, so a late one (its request gave up)
// is dropped rather than queued as data.
func isReply(f wire.Frame) bool {
	switch f.(type) {
	case *wire.Subscribed, *wire.Published, *wire.Pong, *wire.Refreshed, *wire.Tracked, *wire.Untracked:
		return true
	}
	return false
}

// Next returns the next data frame and its raw JSON: a *Change, *Message, *Resync, *Rows,
// *Live, *Roster, *Join, *Leave, *ErrorFrame (unprompted, e.g. a policy_error with its Sub),
// *Expiring, or an *Unsubscribed the server chose. The reply to a request that stopped waiting (its ctx ended) comes here too, when it is
// an error or an unsubscribed. raw is the frame as received, one line; it is the caller's to
// keep.
//
// Once the connection has ended and the queued frames are read, Next returns the *CloseError
// saying how it ended, or ErrClosed after Close. A ctx that ends returns ctx.Err() and leaves
// the connection as it was.
func (c *Conn) Next(ctx context.Context) (Frame, []byte, error) {
	if c.closing.Load() {
		return nil, nil, ErrClosed
	}
	select {
	case it, ok := <-c.data:
		if !ok {
			return nil, nil, c.closedErr()
		}
		c.track(it.f)
		return it.f, it.raw, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// track records the position of a frame Next returns, for a resume.
func (c *Conn) track(f wire.Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f := f.(type) {
	case *wire.Change:
		// Before a snapshot's Live the rows hold transactions committed after this change,
		// so its position is no place to resume from: a reconnect then reads the rows again.
		if !c.unplaced[f.Sub] {
			c.positions[f.Sub] = f.Position()
		}
	case *wire.Live:
		c.positions[f.Sub] = f.Pos
		c.unplaced[f.Sub] = false
	case *wire.Message:
		if !c.unplaced[f.Sub] {
			c.positions[f.Sub] = f.Pos
		}
	case *wire.Resync:
		// Items after Last are delivered; a resume from Last asks for exactly those.
		if !c.unplaced[f.Sub] {
			c.positions[f.Sub] = f.Last
		}
	case *wire.Unsubscribed:
		delete(c.positions, f.Sub)
		delete(c.unplaced, f.Sub)
	}
}

// Position returns the position of the last frame of subscription sub that Next returned, or
// its subscribed position before any: what Subscribe's From takes to resume it after a
// reconnect. It is zero for a channel pattern (rooms/*), which spans channels and so cannot be
// resumed: subscribe to it again without From, knowing what was published meanwhile is
// missed. ok is false for a subscription this Conn does not have.
func (c *Conn) Position(sub string) (p Position, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok = c.positions[sub]
	return p, ok
}

// Done is closed once the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended: a *CloseError, or ErrClosed after Close; nil while it
// is open.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.closedErr()
	default:
		return nil
	}
}

func (c *Conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection with close code 1000 and waits for the reader to end. Frames still
// queued are dropped. It returns nil, or ErrClosed when already closed.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closing.Store(true)
		close(c.quit)
		// The close handshake is bounded by the library (5 s for each half).
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
		<-c.done
	})
	if !first {
		<-c.done
		return ErrClosed
	}
	return nil
}

// send sends f, which no reply answers on success.
func (c *Conn) send(ctx context.Context, f wire.Frame) error {
	b, err := wire.AppendFrame(nil, f)
	if err != nil {
		return err
	}
	if c.closing.Load() {
		return ErrClosed
	}
	c.mu.Lock()
	err = c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		select {
		case <-c.done:
			return c.closedErr()
		default:
		}
		return err
	}
	return nil
}

// request sends f and waits for the reply with its id.
func (c *Conn) request(ctx context.Context, id string, f wire.Frame) (wire.Frame, error) {
	b, err := wire.AppendFrame(nil, f)
	if err != nil {
		return nil, err
	}
	ch := make(chan wire.Frame, 1)
	if c.closing.Load() {
		return nil, ErrClosed
	}
	c.mu.Lock()
	if err := c.err; err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	// A write whose ctx ends midway closes the connection: a half-written frame would leave
	// the stream unreadable.
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		forget()
		select {
		case <-c.done:
			return nil, c.closedErr()
		default:
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("send %s: %w", f.Type(), err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-c.done:
		return nil, c.closedErr()
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}

func (c *Conn) nextID() string { return strconv.FormatUint(c.ids.Add(1), 10) }
