package sse

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// anyone authenticates every token as one subject.
type anyone struct{}

func (anyone) Authenticate(string) (auth.Identity, error) { return auth.Identity{Subject: "u"}, nil }

// registry admits every connection and counts the slots held.
type registry struct {
	mu       sync.Mutex
	held     int
	stopping chan struct{}
}

func (r *registry) Admit() (func(), bool) {
	r.mu.Lock()
	r.held++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.held--
			r.mu.Unlock()
		})
	}, true
}
func (r *registry) Track(*session.Session) func() { return func() {} }
func (r *registry) Stopping() <-chan struct{}     { return r.stopping }

func (r *registry) slots() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// channels attaches every subscription and publishes nothing.
type channels struct{}

func (channels) Subscribe(stream.Receiver, string, string, string, wire.Position) (session.ChannelSubscription, error) {
	return session.ChannelSubscription{Unsubscribe: func() {}}, nil
}
func (channels) Publish(string, string, json.RawMessage) (wire.Position, error) {
	return wire.Position{}, nil
}

// node is a Handler behind a test HTTP server.
type node struct {
	h      *Handler
	srv    *httptest.Server
	reg    *registry
	cancel context.CancelFunc
}

func newNode(t *testing.T, http2 bool) *node {
	t.Helper()
	return newNodeWith(t, Config{PingInterval: 100 * time.Millisecond}, anyone{}, http2, nil)
}

// newNodeWith is newNode with the handler's Config and authenticator, and wrap, when not nil,
// around its routes.
func newNodeWith(t *testing.T, cfg Config, a session.Authenticator, http2 bool, wrap func(http.Handler) http.Handler) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reg := &registry{stopping: make(chan struct{})}
	h := New(ctx, cfg, session.Deps{Channels: channels{}}, a, reg)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sse", h.Stream)
	mux.HandleFunc("POST /v1/sse/{session}", h.Command)
	var hd http.Handler = mux
	if wrap != nil {
		hd = wrap(mux)
	}
	srv := httptest.NewUnstartedServer(hd)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	if http2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	n := &node{h: h, srv: srv, reg: reg, cancel: cancel}
	t.Cleanup(func() {
		cancel()
		srv.Close()
		n.awaitSlots(t, 0)
	})
	return n
}

// awaitSlots waits until the node holds want connection slots.
func (n *node) awaitSlots(t *testing.T, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); n.reg.slots() != want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the node holds %d connection slots, want %d", n.reg.slots(), want)
		}
	}
}

// events reads a stream's body: each event's data frame, and "keepalive" for a comment line.
func events(t *testing.T, body io.Reader) (<-chan map[string]any, <-chan error) {
	out := make(chan map[string]any, 64)
	end := make(chan error, 1)
	go func() {
		defer close(out)
		br := bufio.NewReader(body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				end <- err
				return
			}
			switch {
			case line == ": ping\n":
				out <- map[string]any{"type": "keepalive"}
			case strings.HasPrefix(line, "data: "):
				var f map[string]any
				if err := json.Unmarshal([]byte(line[6:]), &f); err != nil {
					t.Errorf("event data %q is not JSON", line)
				}
				out <- f
			}
		}
	}()
	return out, end
}

func next(t *testing.T, evs <-chan map[string]any, typ string) map[string]any {
	t.Helper()
	for {
		select {
		case f, ok := <-evs:
			if !ok {
				t.Fatalf("the stream ended waiting for %s", typ)
			}
			if f["type"] == "keepalive" && typ != "keepalive" {
				continue
			}
			if f["type"] != typ {
				t.Fatalf("got %v, want %s", f, typ)
			}
			return f
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10s", typ)
		}
	}
}

// TestHijackedStream: an HTTP/1.1 stream, taken over from net/http, is chunked as net/http
// would have made it, carries welcome, the URL subscription's subscribed, keepalives and the
// replies to commands, and at the node's shutdown ends with an error event and the chunked
// body's end; the connection's slot is given back. An HTTP/1.0 stream is not chunked and ends
// with the connection.
func TestHijackedStream(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			n := newNode(t, false)
			c, err := net.Dial("tcp", n.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /v1/sse?sub=s&channel=room HTTP/"+proto[5:]+"\r\nHost: herald\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			chunked := len(resp.TransferEncoding) == 1 && resp.TransferEncoding[0] == "chunked"
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || chunked != (proto == "HTTP/1.1") {
				t.Fatalf("%s %q, chunked %v", resp.Status, resp.Header.Get("Content-Type"), chunked)
			}
			if !resp.Close {
				t.Error("no Connection: close: the stream was not taken over from net/http")
			}
			evs, end := events(t, resp.Body)
			id, _ := next(t, evs, "welcome")["session"].(string)
			next(t, evs, "subscribed")
			next(t, evs, "keepalive")

			cmd, _ := http.NewRequest(http.MethodPost, n.srv.URL+"/v1/sse/"+id, strings.NewReader(`{"type":"ping","id":"p1"}`))
			cr, err := http.DefaultClient.Do(cmd)
			if err != nil {
				t.Fatal(err)
			}
			cr.Body.Close()
			if cr.StatusCode != http.StatusAccepted {
				t.Fatalf("command answered %d", cr.StatusCode)
			}
			if f := next(t, evs, "pong"); f["id"] != "p1" {
				t.Errorf("pong %v, want id p1", f)
			}
			next(t, evs, "keepalive")

			n.cancel() // the node shuts down: the session closes
			if f := next(t, evs, "error"); f["code"] != string(wire.CodeUnavailable) {
				t.Errorf("ending %v, want unavailable", f)
			}
			for range evs {
			}
			// A chunked body ends with its last chunk, not a cut connection.
			if err := <-end; !errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("the body ended with %v, want io.EOF", err)
			}
			c.Close()
			n.awaitSlots(t, 0)
		})
	}
}

// TestHijackedStreamClientGoesAway: a client that closes its connection ends its stream's
// session, and the slot is given back.
func TestHijackedStreamClientGoesAway(t *testing.T) {
	n := newNode(t, false)
	c, err := net.Dial("tcp", n.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /v1/sse HTTP/1.1\r\nHost: herald\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := events(t, resp.Body)
	id, _ := next(t, evs, "welcome")["session"].(string)
	n.awaitSlots(t, 1)
	c.Close()
	n.awaitSlots(t, 0)
	n.h.mu.Lock()
	_, live := n.h.streams[id]
	n.h.mu.Unlock()
	if live {
		t.Error("the stream's session is still addressable after its client went away")
	}
	for range evs {
	}
}

// TestHTTP2Stream: over HTTP/2, whose streams share a connection and cannot be taken over, a
// stream is served on the ResponseWriter: welcome, keepalives, and its end when the client
// cancels it.
func TestHTTP2Stream(t *testing.T) {
	n := newNode(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.srv.URL+"/v1/sse?sub=s&channel=room", nil)
	resp, err := n.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("%s %s, want HTTP/2 200", resp.Proto, resp.Status)
	}
	evs, _ := events(t, resp.Body)
	next(t, evs, "welcome")
	next(t, evs, "subscribed")
	next(t, evs, "keepalive")
	n.awaitSlots(t, 1)
	cancel()
	resp.Body.Close()
	n.awaitSlots(t, 0)
	for range evs {
	}
}

// TestHTTP2StreamEnding: at the node's shutdown an HTTP/2 stream ends with its error event,
// even when the close meets a keepalive being written (the pings here come every 100 ms, so
// some of the rounds close during one).
func TestHTTP2StreamEnding(t *testing.T) {
	for round := range 10 {
		n := newNode(t, true)
		resp, err := n.srv.Client().Get(n.srv.URL + "/v1/sse?sub=s&channel=room")
		if err != nil {
			t.Fatal(err)
		}
		evs, _ := events(t, resp.Body)
		next(t, evs, "welcome")
		next(t, evs, "subscribed")
		next(t, evs, "keepalive")
		time.Sleep(time.Duration(round) * 10 * time.Millisecond)
		n.cancel() // the node shuts down: the session closes
		if f := next(t, evs, "error"); f["code"] != string(wire.CodeUnavailable) {
			t.Errorf("round %d: ending %v, want unavailable", round, f)
		}
		for range evs {
		}
		resp.Body.Close()
		n.awaitSlots(t, 0)
	}
}
