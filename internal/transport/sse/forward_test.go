package sse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
)

// peers is a registry of nodes' URLs, filled once their servers listen.
type peers struct {
	mu    sync.Mutex
	urls  map[string]string // guarded by mu
	err   error             // guarded by mu: what every lookup fails with
	calls int               // guarded by mu
}

func (p *peers) URL(_ context.Context, node string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.err != nil {
		return "", p.err
	}
	return p.urls[node], nil
}

func (p *peers) set(node, url string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.urls[node] = url
}

func (p *peers) lookups() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// byToken authenticates a token as the subject it names; no token is subject "u".
type byToken struct{}

func (byToken) Authenticate(token string) (auth.Identity, error) {
	if token == "" {
		token = "u"
	}
	return auth.Identity{Subject: token}, nil
}

// quiet logs nothing: the failures the tests cause are logged as warnings.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// clusterNode is a node among several: its handler names its node and asks ps for the others.
// seen counts the commands handed to it by another node.
type clusterNode struct {
	*node
	mu   sync.Mutex
	seen []string // guarded by mu: ForwardedHeader of each command handed here
}

func (c *clusterNode) forwardedHere() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

func newClusterNode(t *testing.T, id string, ps Peers) *clusterNode {
	t.Helper()
	c := &clusterNode{}
	record := func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Get(ForwardedHeader); v != "" {
				c.mu.Lock()
				c.seen = append(c.seen, v)
				c.mu.Unlock()
			}
			inner.ServeHTTP(w, r)
		})
	}
	n := newNodeWith(t, Config{PingInterval: time.Minute, Node: id, Peers: ps, Session: session.Config{MaxFrameBytes: 1 << 10}, Logger: quiet}, byToken{}, false, record)
	c.node = n
	if p, ok := ps.(*peers); ok {
		p.set(id, n.srv.URL)
	}
	return c
}

// openStream opens a stream on n and returns its session id and events.
func openStream(t *testing.T, n *clusterNode) (string, <-chan map[string]any) {
	t.Helper()
	resp, err := http.Get(n.srv.URL + "/v1/sse")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream answered %s", resp.Status)
	}
	evs, _ := events(t, resp.Body)
	id, _ := next(t, evs, "welcome")["session"].(string)
	if id == "" {
		t.Fatal("welcome has no session")
	}
	return id, evs
}

type answer struct {
	status      int
	contentType string
	frame       map[string]any // the error frame of the body, nil for none
}

// post posts a command for session id to a node at url, with a bearer token when not empty
// and the extra headers, and reads its answer.
func post(t *testing.T, url, id, body, token string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/sse/"+id, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &a.frame); err != nil {
			t.Fatalf("answer body %q is not JSON: %v", b, err)
		}
	}
	return a
}

func (a answer) is(t *testing.T, status int, code wire.Code) {
	t.Helper()
	if a.status != status {
		t.Fatalf("answered %d %v, want %d %s", a.status, a.frame, status, code)
	}
	if code == "" {
		if a.frame != nil {
			t.Fatalf("answered %d with a body %v, want none", a.status, a.frame)
		}
		return
	}
	if a.frame["code"] != string(code) || a.contentType != "application/json" {
		t.Fatalf("answered %d %q %v, want an error frame %s", a.status, a.contentType, a.frame, code)
	}
}

// TestCommandReachesItsNode: a stream's session id names its node, and a command posted to
// another node is handed to it: the session gets it (its reply comes on the stream) and the
// node posted to answers with the holding node's answer, refusals included.
func TestCommandReachesItsNode(t *testing.T) {
	ps := &peers{urls: map[string]string{}}
	a := newClusterNode(t, "node-a", ps)
	b := newClusterNode(t, "node-b", ps)
	id, evs := openStream(t, a)
	if got := session.NodeOf(id); got != "node-a" {
		t.Fatalf("session id %q names node %q, want node-a", id, got)
	}

	post(t, b.srv.URL, id, `{"type":"ping","id":"p1"}`, "").is(t, http.StatusAccepted, "")
	if f := next(t, evs, "pong"); f["id"] != "p1" {
		t.Errorf("pong %v, want id p1", f)
	}
	if got := a.forwardedHere(); len(got) != 1 || got[0] != "node-b" {
		t.Errorf("node-a was handed %v, want one command from node-b", got)
	}

	// The holding node's refusals come back as it gave them.
	post(t, b.srv.URL, id, `{"type":"ping","id":"p2"}`, "mallory").is(t, http.StatusForbidden, wire.CodeForbidden)
	post(t, b.srv.URL, id, `{"type":"nope"`, "").is(t, http.StatusBadRequest, wire.CodeBadFrame)
	// A frame too long is refused by the node posted to, before anyone is asked.
	before := ps.lookups()
	post(t, b.srv.URL, id, `{"type":"ping","id":"`+strings.Repeat("x", 2<<10)+`"}`, "").is(t, http.StatusRequestEntityTooLarge, wire.CodeFrameTooLarge)
	if ps.lookups() != before {
		t.Error("a frame too long was looked up")
	}
	// A command posted to the holding node itself is not handed on.
	post(t, a.srv.URL, id, `{"type":"ping","id":"p3"}`, "").is(t, http.StatusAccepted, "")
	if f := next(t, evs, "pong"); f["id"] != "p3" {
		t.Errorf("pong %v, want id p3", f)
	}
	if got := len(a.forwardedHere()); got != 3 {
		t.Errorf("node-a was handed %d commands, want 3", got)
	}
	if got, want := b.h.Forwards()[ForwardRelayed], uint64(3); got != want {
		t.Errorf("node-b relayed %d answers, want %d", got, want)
	}
	if len(b.forwardedHere()) != 0 {
		t.Error("node-b was handed a command")
	}
}

// TestForwardNoLoop: a node handed a command for a session it does not hold answers not_found
// and hands it on to nobody, even when the id names another node, so a stale id or a registry
// that points at the wrong node costs one hop, never a loop.
func TestForwardNoLoop(t *testing.T) {
	ps := &peers{urls: map[string]string{}}
	a := newClusterNode(t, "node-a", ps)
	b := newClusterNode(t, "node-b", ps)
	stale := "node-a.AAAAAAAAAAAAAAAAAAAAAAAA"

	// B hands it to A, which does not hold it.
	post(t, b.srv.URL, stale, `{"type":"ping","id":"p"}`, "").is(t, http.StatusNotFound, wire.CodeNotFound)
	if got := a.forwardedHere(); len(got) != 1 {
		t.Errorf("node-a was handed %v, want one command", got)
	}
	// A command already handed on is not handed on again, nor looked up.
	before := ps.lookups()
	post(t, b.srv.URL, stale, `{"type":"ping","id":"p"}`, "", ForwardedHeader, "node-c").is(t, http.StatusNotFound, wire.CodeNotFound)
	if ps.lookups() != before || len(a.forwardedHere()) != 1 {
		t.Error("a command handed on was handed on again")
	}
	// node-c's registered URL is node-b's (say node-c ended and node-b took its address): B,
	// handed a command for node-c's session, does not hand it back to A, nor to itself.
	ps.set("node-c", b.srv.URL)
	handed := len(b.forwardedHere()) // the one the test marked as handed on, above
	post(t, a.srv.URL, "node-c.AAAAAAAAAAAAAAAAAAAAAAAA", `{"type":"ping","id":"p"}`, "").is(t, http.StatusNotFound, wire.CodeNotFound)
	if got := b.forwardedHere()[handed:]; len(got) != 1 || got[0] != "node-a" {
		t.Errorf("node-b was handed %v, want one command from node-a", got)
	}
	if got := len(a.forwardedHere()); got != 1 {
		t.Errorf("node-a was handed %d commands, want 1: the command came back", got)
	}
}

// TestForwardFails: a command for a node that is not live is not_found, one for a node that
// does not answer, or when the registry does not, is unavailable; each says what to do.
// Without peers (one node), a session id naming another node is simply not found here.
func TestForwardFails(t *testing.T) {
	ps := &peers{urls: map[string]string{}}
	b := newClusterNode(t, "node-b", ps)
	down := httptest.NewServer(http.NotFoundHandler())
	ps.set("node-d", down.URL)
	down.Close()
	ps.set("node-x", "ftp://node-x")

	tests := []struct {
		name    string
		id      string
		err     error
		status  int
		code    wire.Code
		outcome ForwardOutcome
		message string
	}{
		{"unknown node", "node-z.AAAA", nil, http.StatusNotFound, wire.CodeNotFound, ForwardUnknownNode, "node-z, which held this stream, is no longer live"},
		{"node down", "node-d.AAAA", nil, http.StatusServiceUnavailable, wire.CodeUnavailable, ForwardUnreachable, "node-d, which holds this stream, could not be reached"},
		{"registered URL not http", "node-x.AAAA", nil, http.StatusServiceUnavailable, wire.CodeUnavailable, ForwardUnreachable, "could not be reached"},
		{"registry down", "node-a.AAAA", errors.New("redis: connection refused"), http.StatusServiceUnavailable, wire.CodeUnavailable, ForwardLookupFailed, "could not be looked up"},
		{"names no node", "AAAA", nil, http.StatusNotFound, wire.CodeNotFound, "", "no live stream has this session id"},
		{"names no node a node id could be", "n~de.AAAA", nil, http.StatusNotFound, wire.CodeNotFound, "", "no live stream has this session id"},
		{"names this node", "node-b.AAAA", nil, http.StatusNotFound, wire.CodeNotFound, "", "no live stream has this session id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps.mu.Lock()
			ps.err = tt.err
			ps.mu.Unlock()
			before := b.h.Forwards()
			lookups := ps.lookups()
			a := post(t, b.srv.URL, tt.id, `{"type":"ping","id":"p"}`, "")
			a.is(t, tt.status, tt.code)
			if msg, _ := a.frame["message"].(string); !strings.Contains(msg, tt.message) || (tt.outcome != "" && !strings.Contains(msg, "open a new stream with GET /v1/sse")) {
				t.Errorf("message %q, want it to hold %q and what to do", msg, tt.message)
			}
			after := b.h.Forwards()
			for _, o := range ForwardOutcomes {
				want := before[o]
				if o == tt.outcome {
					want++
				}
				if after[o] != want {
					t.Errorf("%s: %d, want %d", o, after[o], want)
				}
			}
			if looked := ps.lookups() != lookups; looked != (tt.outcome != "") {
				t.Errorf("looked up: %v, want %v", looked, tt.outcome != "")
			}
		})
	}

	t.Run("one node", func(t *testing.T) {
		n := newNodeWith(t, Config{PingInterval: time.Minute, Node: "node-b"}, byToken{}, false, nil)
		post(t, n.srv.URL, "node-a.AAAA", `{"type":"ping","id":"p"}`, "").is(t, http.StatusNotFound, wire.CodeNotFound)
	})
}

// TestForwardFailuresLoggedOncePerCause: every command that could not be handed on is
// counted, and logged at warn with its cause once per outcome (and node, once the registry
// named one) per interval, however many clients post meanwhile, and whatever node ids they
// name.
func TestForwardFailuresLoggedOncePerCause(t *testing.T) {
	ps := &peers{urls: map[string]string{}}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n := newNodeWith(t, Config{PingInterval: time.Minute, Node: "node-b", Peers: ps, Session: session.Config{MaxFrameBytes: 1 << 10}, Logger: log}, byToken{}, false, nil)
	down := httptest.NewServer(http.NotFoundHandler())
	ps.set("node-d", down.URL)
	down.Close()
	for range 5 {
		post(t, n.srv.URL, "node-d.AAAA", `{"type":"ping","id":"p"}`, "").is(t, http.StatusServiceUnavailable, wire.CodeUnavailable)
	}
	ps.mu.Lock()
	ps.err = errors.New("redis: connection refused")
	ps.mu.Unlock()
	for i := range 5 {
		// A client names the node it likes: each a new one, which must not make a new line.
		post(t, n.srv.URL, fmt.Sprintf("node-%d.AAAA", i), `{"type":"ping","id":"p"}`, "").is(t, http.StatusServiceUnavailable, wire.CodeUnavailable)
	}
	if got := n.h.Forwards(); got[ForwardUnreachable] != 5 || got[ForwardLookupFailed] != 5 {
		t.Errorf("forwards %v, want 5 unreachable and 5 lookup_failed", got)
	}
	lines := map[ForwardOutcome]int{}
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, `msg="sse command not handed on"`) {
			continue
		}
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, " err=") {
			t.Errorf("line %q: want WARN with the cause", line)
		}
		for _, o := range ForwardOutcomes {
			if strings.Contains(line, "outcome="+string(o)+" ") {
				lines[o]++
			}
		}
	}
	if lines[ForwardUnreachable] != 1 || lines[ForwardLookupFailed] != 1 {
		t.Errorf("lines by outcome %v, want one unreachable and one lookup_failed\n%s", lines, logs.String())
	}
}

// syncBuffer is a log's destination written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
