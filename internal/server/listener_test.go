package server

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSocketBudget(t *testing.T) {
	for _, tt := range []struct {
		limit, reserve, maxConns int
		sockets, sessions        int
		clamped                  bool
	}{
		{limit: 1 << 20, reserve: 256, maxConns: 10000, sockets: 10625, sessions: 10000},
		{limit: 20000, reserve: 256, maxConns: 10000, sockets: 10625, sessions: 10000},
		{limit: 20000, reserve: 256, maxConns: 20000, sockets: 19744, sessions: 18510, clamped: true},
		{limit: 1024, reserve: 256, maxConns: 10000, sockets: 768, sessions: 720, clamped: true},
		{limit: 100, reserve: 256, maxConns: 10, sockets: 1, sessions: 1, clamped: true},
		{limit: 150, reserve: 50, maxConns: 10000, sockets: 100, sessions: 84, clamped: true},
	} {
		sockets, sessions, clamped := socketBudget(tt.limit, tt.reserve, tt.maxConns)
		if sockets != tt.sockets || sessions != tt.sessions || clamped != tt.clamped {
			t.Errorf("socketBudget(%d, %d, %d) = %d, %d, %v; want %d, %d, %v", tt.limit, tt.reserve, tt.maxConns,
				sockets, sessions, clamped, tt.sockets, tt.sessions, tt.clamped)
		}
		if sessions > sockets || sockets > max(1, tt.limit-tt.reserve) {
			t.Errorf("socketBudget(%d, %d, %d): %d sessions, %d sockets do not fit", tt.limit, tt.reserve, tt.maxConns, sessions, sockets)
		}
	}
}

// TestSocketsPastTheCapAreRefusedAtOnce: with the cap reached, a new connection is answered
// with a 503 and a too_many_connections error without sending anything first, and once a
// socket closes the next one is served.
func TestSocketsPastTheCapAreRefusedAtOnce(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newGatedListener(raw, 2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-done
	}()
	addr := raw.Addr().String()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// The listener hands sockets out as it accepts them: wait until both are counted.
	deadline := time.Now().Add(5 * time.Second)
	for ln.open.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, tt := range []struct{ path, status, body string }{
		{"/v1/ws", "429", `{"type":"error","code":"too_many_connections"`},
		{"/v1/sse", "200", "retry: 10000\ndata: {\"type\":\"error\",\"code\":\"too_many_connections\""},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET "+tt.path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s past the cap: %v, want a refusal at once", tt.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		if fmt.Sprint(resp.StatusCode) != tt.status || !strings.Contains(string(body), tt.body) {
			t.Errorf("%s refusal %d %s, want %s with %s", tt.path, resp.StatusCode, body, tt.status, tt.body)
		}
		if tt.status == "429" && resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s refusal has no Retry-After", tt.path)
		}
	}
	if ln.refused.Load() != 2 {
		t.Errorf("refused %d, want 2", ln.refused.Load())
	}
	held[0].Close()
	deadline = time.Now().Add(5 * time.Second)
	for ln.open.Load() > 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	resp2, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("after a socket closed: %v", err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 200 {
		t.Errorf("after a socket closed: %d, want 200", resp2.StatusCode)
	}
	held[1].Close()
}

// TestListenWithABacklog: a backlog from config is set with a second listen(2), and the
// socket still accepts.
func TestListenWithABacklog(t *testing.T) {
	ln, err := listen("127.0.0.1:0", 16, 0)
	if err != nil {
		t.Fatalf("listen with a backlog: %v", err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("accept: %v", err)
	}
}
