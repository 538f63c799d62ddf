package main

// Redis for the many-nodes tests: the few RESP commands the harness needs (the Redis client is
// internal/store/redis's alone, by internal/layout's rule) to delete a test's keys from a
// Redis or every master of a Cluster, and a redis-server of a test's own that it may kill and
// restart.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/heraldrt/herald/internal/testenv"
	"io"
	"net"
	neturl "net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// respConn is just enough of RESP2 to list and delete keys and to see that a Redis answers.
type respConn struct {
	c net.Conn
	r *bufio.Reader
}

// respError is an error reply.
type respError string

func (e respError) Error() string { return "redis: " + string(e) }

// redisTarget is where a Redis URL points: its seed addresses, credentials and database.
type redisTarget struct {
	addrs      []string
	user, pass string
	db         string
}

func parseRedisURL(raw string) (redisTarget, error) {
	u, err := neturl.Parse(raw)
	if err != nil {
		return redisTarget{}, err
	}
	rt := redisTarget{addrs: append([]string{u.Host}, u.Query()["addr"]...), db: strings.TrimPrefix(u.Path, "/")}
	if u.User != nil {
		rt.user = u.User.Username()
		rt.pass, _ = u.User.Password()
	}
	return rt, nil
}

func dialResp(rt redisTarget, addr string) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	rc := &respConn{c: c, r: bufio.NewReader(c)}
	if rt.pass != "" {
		args := []string{"AUTH", rt.pass}
		if rt.user != "" {
			args = []string{"AUTH", rt.user, rt.pass}
		}
		if _, err := rc.do(args...); err != nil {
			c.Close()
			return nil, err
		}
	}
	if rt.db != "" && rt.db != "0" {
		if _, err := rc.do("SELECT", rt.db); err != nil {
			c.Close()
			return nil, err
		}
	}
	return rc, nil
}

func (rc *respConn) do(args ...string) (any, error) {
	_ = rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		return nil, err
	}
	return rc.read()
}

func (rc *respConn) read() (any, error) {
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redis: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, respError(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rc.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = rc.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}

func (rc *respConn) close() { rc.c.Close() }

// masters returns the addresses holding keys: every master of a Cluster (CLUSTER NODES), or
// the one server.
func (rt redisTarget) masters() ([]string, error) {
	rc, err := dialResp(rt, rt.addrs[0])
	if err != nil {
		return nil, err
	}
	defer rc.close()
	r, err := rc.do("CLUSTER", "NODES")
	var re respError
	if errors.As(err, &re) {
		return rt.addrs[:1], nil // not a Cluster
	}
	if err != nil {
		return nil, err
	}
	text, _ := r.(string)
	var out []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		out = append(out, addr)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("redis: CLUSTER NODES lists no master: %q", text)
	}
	return out, nil
}

// redisDo runs one single-key command, following a Cluster's MOVED redirection.
func redisDo(rt redisTarget, args ...string) (any, error) {
	addr := rt.addrs[0]
	for range 3 {
		rc, err := dialResp(rt, addr)
		if err != nil {
			return nil, err
		}
		r, err := rc.do(args...)
		rc.close()
		var re respError
		if errors.As(err, &re) && strings.HasPrefix(string(re), "MOVED ") {
			if f := strings.Fields(string(re)); len(f) == 3 {
				addr = f[2]
				continue
			}
		}
		return r, err
	}
	return nil, fmt.Errorf("redis: %s: redirected too often", args[0])
}

// countRedisPrefix counts the keys under prefix, on every master.
func countRedisPrefix(rt redisTarget, prefix string) (int, error) {
	masters, err := rt.masters()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, addr := range masters {
		rc, err := dialResp(rt, addr)
		if err != nil {
			return 0, err
		}
		cursor := "0"
		for {
			r, err := rc.do("SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
			parts, _ := r.([]any)
			if err != nil || len(parts) != 2 {
				rc.close()
				return 0, fmt.Errorf("SCAN at %s: %v %v", addr, r, err)
			}
			keys, _ := parts[1].([]any)
			n += len(keys)
			if cursor, _ = parts[0].(string); cursor == "0" {
				break
			}
		}
		rc.close()
	}
	return n, nil
}

// cleanRedisPrefix deletes every key under prefix, on every master: a test's nodes leave their
// interest, positions, presence and streams behind when they are killed.
func cleanRedisPrefix(t *testing.T, url, prefix string) {
	rt, err := parseRedisURL(url)
	if err != nil {
		t.Logf("clean Redis keys %s*: %v", prefix, err)
		return
	}
	masters, err := rt.masters()
	if err != nil {
		t.Logf("clean Redis keys %s*: %v", prefix, err)
		return
	}
	for _, addr := range masters {
		if err := cleanRedisAt(rt, addr, prefix); err != nil {
			t.Logf("clean Redis keys %s* at %s: %v", prefix, addr, err)
		}
	}
}

func cleanRedisAt(rt redisTarget, addr, prefix string) error {
	rc, err := dialResp(rt, addr)
	if err != nil {
		return err
	}
	defer rc.close()
	cursor := "0"
	for {
		r, err := rc.do("SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			return err
		}
		parts, ok := r.([]any)
		if !ok || len(parts) != 2 {
			return fmt.Errorf("SCAN answered %v", r)
		}
		cursor, _ = parts[0].(string)
		keys, _ := parts[1].([]any)
		for _, k := range keys {
			if s, ok := k.(string); ok {
				if _, err := rc.do("DEL", s); err != nil {
					return fmt.Errorf("DEL %s: %w", s, err)
				}
			}
		}
		if cursor == "0" {
			return nil
		}
	}
}

// redisServer is a redis-server of the test's own, on a free port, that the test may kill and
// restart: it keeps nothing on disk, so a restart comes back empty, as a Redis without
// persistence does.
type redisServer struct {
	port int
	dir  string
	log  *lockedBuffer
	cmd  *exec.Cmd
	done chan error
	bin  string // redis-server's path
}

// startRedisServer starts one; it is killed when the test ends.
func startRedisServer(t *testing.T) *redisServer {
	t.Helper()
	r := &redisServer{bin: testenv.RedisServer(t), port: freePort(t), dir: t.TempDir(), log: &lockedBuffer{b: &bytes.Buffer{}}}
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("log of redis-server :%d:\n%s", r.port, tail(r.log.String(), 16<<10))
		}
	})
	r.start(t)
	return r
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// start runs redis-server and waits until it answers PING.
func (r *redisServer) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--maxmemory-policy", "noeviction")
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan error, 1)
	r.cmd, r.done = cmd, done
	go func() { done <- cmd.Wait() }()
	rt := redisTarget{addrs: []string{fmt.Sprintf("127.0.0.1:%d", r.port)}}
	waitFor(t, 10*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("redis-server exited at start: %v\n%s", err, r.log.String())
		default:
		}
		rc, err := dialResp(rt, rt.addrs[0])
		if err != nil {
			return false, "redis-server to answer: " + err.Error()
		}
		defer rc.close()
		pong, err := rc.do("PING")
		return err == nil && pong == "PONG", fmt.Sprintf("redis-server to answer PING: %v %v", pong, err)
	})
}

// stop kills redis-server with SIGKILL, if it runs, and waits for it.
func (r *redisServer) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	err := <-r.done
	r.done <- err
}

// dbsize is the number of keys the server holds.
func (r *redisServer) dbsize(t *testing.T) int64 {
	t.Helper()
	rt := redisTarget{addrs: []string{fmt.Sprintf("127.0.0.1:%d", r.port)}}
	rc, err := dialResp(rt, rt.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.close()
	v, err := rc.do("DBSIZE")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := v.(int64)
	return n
}
