// The descriptor tests raise and lower RLIMIT_NOFILE with the shell's ulimit and count on
// Linux's accept(2) failing with EMFILE, so they build on Linux only.

package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestDescriptorCeiling starts a node under a low open-file limit and connects past it: the
// node lowers its session limit to fit and says so; clients past it get close 4001, and
// sockets past the socket cap an immediate 429 with too_many_connections, never a hang; the
// admin listener answers throughout.
func TestDescriptorCeiling(t *testing.T) {
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
