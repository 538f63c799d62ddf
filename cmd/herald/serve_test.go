package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// openPolicyFile writes a config file whose policy opens tables, and every channel with its
// presence, to everyone, written out as a node without rules is closed; it returns its path.
func openPolicyFile(t *testing.T, tables ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("policy:\n  channels:\n    \"**\": {subscribe: \"true\", publish: \"true\", presence: \"true\"}\n")
	if len(tables) > 0 {
		b.WriteString("  tables:\n")
		for _, tb := range tables {
			fmt.Fprintf(&b, "    %s: {row: \"true\"}\n", tb)
		}
	}
	path := filepath.Join(t.TempDir(), "herald.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
