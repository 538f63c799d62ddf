package server

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/heraldrt/herald/internal/wire"
)

// ownRedis starts a redis-server of the test's own on a free port, to kill while a node uses
// it; it is killed when the test ends if it still runs.
func ownRedis(t *testing.T) (url string, kill func()) {
	t.Helper()
	bin := testenv.RedisServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	kill = func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(kill)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %d did not answer within 10s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "redis://" + addr + "/0", kill
}

// TestUnavailableLoggedOnceWithItsCause: with the nodes' Redis gone, channel subscribes,
// publishes and presence tracks are refused unavailable. Each refusal is counted, and each
// cause is logged exactly once (one line per what was asked and what the client was told,
// within the interval), at warn, with the error behind it; nothing else logs them.
func TestUnavailableLoggedOnceWithItsCause(t *testing.T) {
	redisURL, kill := ownRedis(t)
	var logs lockedBuffer
	cfg := baseConfig()
	var b [6]byte
	_, _ = rand.Read(b[:])
	cfg.Cluster = ClusterConfig{RedisURL: redisURL, RedisPrefix: "herald-test-" + hex.EncodeToString(b[:])}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.unavailableEvery = time.Hour
	r := start(t, cfg)
	c, _ := connect(t, r)
	kill()

	const subs, pubs, tracks = 3, 3, 2
	for i := range subs {
		c.send(fmt.Sprintf(`{"type":"subscribe","id":"s%d","sub":"s%d","channel":"room"}`, i, i))
		c.expectError("unavailable", fmt.Sprintf("s%d", i))
	}
	for range pubs {
		if code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"room","data":1}`); code != 503 || m["code"] != "unavailable" {
			t.Fatalf("publish with Redis gone: %d %v, want 503 unavailable", code, m)
		}
	}
	for i := range tracks {
		c.send(fmt.Sprintf(`{"type":"track","id":"t%d","channel":"room"}`, i))
		c.expectError("unavailable", fmt.Sprintf("t%d", i))
	}

	m := scrape(t, r)
	for _, tt := range []struct {
		op   op
		want float64
	}{{opChannelSubscribe, subs}, {opPublish, pubs}, {opPresenceTrack, tracks}, {opTableSubscribe, 0}} {
		if got := m[fmt.Sprintf("herald_unavailable_total{op=%q}", tt.op)]; got != tt.want {
			t.Errorf("herald_unavailable_total{op=%q} = %v, want %v", tt.op, got, tt.want)
		}
	}
	perOp := map[string]int{}
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, `msg="request refused as unavailable"`) {
			continue
		}
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, " cause=") || !strings.Contains(line, " told=") {
			t.Errorf("line %q: want WARN with what the client was told and the cause", line)
		}
		for _, o := range ops {
			if strings.Contains(line, " op="+string(o)+" ") {
				perOp[string(o)]++
			}
		}
	}
	for _, o := range []op{opChannelSubscribe, opPublish, opPresenceTrack} {
		if perOp[string(o)] != 1 {
			t.Errorf("%s: %d lines, want exactly one for its one cause\nlog:\n%s", o, perOp[string(o)], logs.String())
		}
	}
	// Nothing else logged the same failures: presence logs none of its own, the session none.
	for _, noisy := range []string{"presence: track failed", "presence: roster failed"} {
		if strings.Contains(logs.String(), noisy) {
			t.Errorf("the log has %q besides the server's line", noisy)
		}
	}
}

// TestNoteCountsAndLogsOnlyUnavailable: note counts and logs an unavailable, in either
// client-facing form, with the cause behind it, and lets every other answer by untouched.
func TestNoteCountsAndLogsOnlyUnavailable(t *testing.T) {
	var logs lockedBuffer
	u := newUnavailable(slog.New(slog.NewTextHandler(&logs, nil)), time.Hour)
	cause := errors.New("dial tcp 10.0.0.9:6379: connection refused")
	for _, tt := range []struct {
		name    string
		err     error
		counted bool
	}{
		{"nil", nil, false},
		{"not client-facing", errors.New("boom"), false},
		{"forbidden", &fault.Error{Code: fault.CodeForbidden, Message: "no"}, false},
		{"wire unavailable", &wire.Error{Code: wire.CodeUnavailable, Message: "redis did not answer", Err: cause}, true},
		{"fault unavailable, wrapped", fmt.Errorf("subscribe: %w", &fault.Error{Code: fault.CodeUnavailable, Message: "presence could not be read", Err: cause}), true},
		{"unavailable without a cause", &fault.Error{Code: fault.CodeUnavailable, Message: "the change stream is not live yet"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs.mu.Lock()
			logs.buf.Reset()
			logs.mu.Unlock()
			before := u.count(opTableSubscribe)
			if got := u.note(opTableSubscribe, tt.err); got != tt.err {
				t.Errorf("note returned %v, want its argument %v", got, tt.err)
			}
			counted := u.count(opTableSubscribe) - before
			logged := logs.String()
			if (counted == 1) != tt.counted || (logged != "") != tt.counted {
				t.Fatalf("counted %d, logged %q; want counted and logged: %v", counted, logged, tt.counted)
			}
			if tt.counted {
				we, _ := wire.AsError(tt.err)
				if !strings.Contains(logged, "told=\""+we.Message) {
					t.Errorf("log %q does not say what the client was told", logged)
				}
				if c := causeOf(we); c != nil && !strings.Contains(logged, "cause=\""+cause.Error()) {
					t.Errorf("log %q does not carry the cause", logged)
				}
			}
		})
	}
	// The same cause again within the interval: counted, not logged.
	logs.mu.Lock()
	logs.buf.Reset()
	logs.mu.Unlock()
	u.note(opTableSubscribe, &wire.Error{Code: wire.CodeUnavailable, Message: "redis did not answer", Err: cause})
	if logs.String() != "" {
		t.Errorf("a repeated cause was logged again within the interval: %q", logs.String())
	}
}
