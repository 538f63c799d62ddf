package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// serveProc is a running `herald serve` under an open-file limit.
type serveProc struct {
	addr, admin string
	stderr      *lockedBuffer
	cmd         *exec.Cmd
	done        chan error // cmd.Wait's result, put back by whoever takes it
}

var servingRE = regexp.MustCompile(`msg="?serving"? addr=(\S+)`)
var adminRE = regexp.MustCompile(`msg="serving health and metrics" addr=(\S+)`)

func startServe(t *testing.T, nofile int, env ...string) *serveProc {
	t.Helper()
	p := &serveProc{stderr: &lockedBuffer{b: &bytes.Buffer{}}}
	// Both the soft and the hard limit: Go raises the soft one to the hard one at start.
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" serve`, nofile), herald(t))
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HERALD_LISTEN=127.0.0.1:0", "HERALD_ADMIN_LISTEN=127.0.0.1:0",
		"HERALD_AUTH_ALLOW_ANONYMOUS=true", "HERALD_LIMITS_HANDSHAKE_TIMEOUT=30s"}, env...)
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	p.cmd, p.done = cmd, done
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("stderr of herald serve:\n%s", p.stderr.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for p.addr == "" || p.admin == "" {
		if m := servingRE.FindStringSubmatch(p.stderr.String()); m != nil {
			p.addr = m[1]
		}
		if m := adminRE.FindStringSubmatch(p.stderr.String()); m != nil {
			p.admin = m[1]
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("herald serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("herald serve did not start within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// kill ends the node with SIGKILL, as a crash would: no goodbye to Postgres or to clients.
func (p *serveProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-p.done
	p.done <- err
}

// dialWS connects and sends connect; it returns the first frame, or how the connection was
// refused. It never waits more than 5 s: a refusal that takes longer is a hang.
func dialWS(t *testing.T, addr string) (*websocket.Conn, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{Subprotocols: []string{"herald.v1"}})
	if err != nil {
		body := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			body = fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
		}
		return nil, body, err
	}
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"connect","id":"1"}`)); err != nil {
		return nil, "", err
	}
	_, b, err := c.Read(ctx)
	if err != nil {
		return nil, "", err
	}
	return c, string(b), nil
}

func healthy(t *testing.T, admin string) {
	t.Helper()
	hc := &http.Client{Timeout: 3 * time.Second}
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := hc.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("admin %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("admin %s: %d", path, resp.StatusCode)
		}
	}
}

// TestDescriptorCeiling starts a node under a low open-file limit and connects past it: the
// node lowers its session limit to fit and says so; clients past it get close 4001, and
// sockets past the socket cap an immediate 429 with too_many_connections, never a hang; the
// admin listener answers throughout.
func TestDescriptorCeiling(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("open-file limits are tested on Linux")
	}
	// 150 files, 50 kept back: 100 client sockets, 84 sessions (16 of headroom).
	p := startServe(t, 150, "HERALD_LIMITS_FD_RESERVE=50")
	if !strings.Contains(p.stderr.String(), "limits.max_connections lowered to fit the open-file limit") {
		t.Errorf("no warning that max_connections was lowered; stderr:\n%s", p.stderr.String())
	}
	var held []*websocket.Conn
	defer func() {
		for _, c := range held {
			c.CloseNow()
		}
	}()
	for i := range 84 {
		c, first, err := dialWS(t, p.addr)
		if err != nil || !strings.Contains(first, `"type":"welcome"`) {
			t.Fatalf("client %d under the limit: %q %v", i, first, err)
		}
		held = append(held, c)
	}
	healthy(t, p.admin)
	for i := range 5 {
		c, first, err := dialWS(t, p.addr)
		if err != nil || !strings.Contains(first, `"code":"too_many_connections"`) {
			t.Fatalf("client %d past max_connections: %q %v, want an error frame too_many_connections", i, first, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err = c.Read(ctx)
		cancel()
		if websocket.CloseStatus(err) != 4001 {
			t.Fatalf("client %d past max_connections: closed with %v, want 4001", i, err)
		}
		c.CloseNow()
	}
	healthy(t, p.admin)
	// Sockets that never send a request fill the rest of the cap (slow clients, a flood).
	var raw []net.Conn
	defer func() {
		for _, c := range raw {
			c.Close()
		}
	}()
	for range 16 {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, c)
	}
	refused := 0
	for i := range 20 {
		_, first, err := dialWS(t, p.addr)
		switch {
		case err == nil:
			// Sockets the server has not counted yet: it may still take this one.
			continue
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("client %d past the socket cap hung: %v", i, err)
		case !strings.Contains(first, "HTTP 429") || !strings.Contains(first, `"code":"too_many_connections"`):
			t.Fatalf("client %d past the socket cap: %q %v, want HTTP 429 too_many_connections", i, first, err)
		}
		refused++
	}
	if refused == 0 {
		t.Fatal("no socket was refused at the cap")
	}
	healthy(t, p.admin)
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`herald_sockets_refused_total [1-9]`).Match(b) {
		t.Errorf("metrics do not count the refused sockets")
	}
}

// TestOutOfDescriptors: with almost no reserve, accept itself runs out of descriptors. The
// node gives up its spare descriptor to accept and reset each waiting connection, so no client
// hangs, and it keeps serving once descriptors free up.
func TestOutOfDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("open-file limits are tested on Linux")
	}
	p := startServe(t, 64, "HERALD_LIMITS_FD_RESERVE=1")
	var held []*websocket.Conn
	failed := 0
	for i := 0; i < 70 && failed < 5; i++ {
		c, _, err := dialWS(t, p.addr)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("client %d hung at the descriptor ceiling: %v", i, err)
		case err != nil:
			failed++
		default:
			held = append(held, c)
		}
	}
	if failed == 0 {
		t.Fatal("no connection met the descriptor ceiling: the limit did not take")
	}
	for _, c := range held {
		c.CloseNow()
	}
	// Descriptors free up as the server sees the closes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, first, err := dialWS(t, p.addr)
		if err == nil && strings.Contains(first, `"type":"welcome"`) {
			c.CloseNow()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not serve again after descriptors freed up: %q %v", first, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
