package redis

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
)

// ownRedis is a redis-server a test runs for itself, to kill and start again while the code
// under test uses it. It listens on a port of its own and keeps its files (the log, a dump
// SHUTDOWN SAVE writes) in a directory of its own; it is killed when the test ends.
type ownRedis struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	r := &ownRedis{t: t, bin: testenv.RedisServer(t), dir: t.TempDir()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *ownRedis) url() string  { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }
func (r *ownRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// start runs redis-server on r's port and directory, without persistence (a kill loses the
// data; a SHUTDOWN SAVE keeps it, in the directory, for the next start), and waits until it
// answers.
func (r *ownRedis) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--daemonize", "no",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	r.exited = exited
	go func(cmd *exec.Cmd) {
		_ = cmd.Wait()
		close(exited)
	}(r.cmd)
	deadline := time.Now().Add(10 * time.Second)
	for !r.answers() {
		select {
		case <-exited:
			r.t.Fatalf("redis-server on port %d exited at start; its log:\n%s", r.port, r.logTail())
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on port %d did not answer within 10s; its log:\n%s", r.port, r.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// answers reports whether the server answers PING.
func (r *ownRedis) answers() bool {
	reply, err := r.command("PING")
	return err == nil && reply == "+PONG"
}

// command sends one inline command and returns the first line of the reply.
func (r *ownRedis) command(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", r.addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// kill ends the server at once (SIGKILL): what it held is lost.
func (r *ownRedis) kill() {
	select {
	case <-r.exited:
		return
	default:
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
}

// shutdownSave has the server save its data and exit (SHUTDOWN SAVE): the next start loads it.
func (r *ownRedis) shutdownSave() {
	r.t.Helper()
	_, _ = r.command("SHUTDOWN SAVE") // the server closes the connection as it exits
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		r.t.Fatalf("redis-server on port %d did not exit 10s after SHUTDOWN SAVE; its log:\n%s", r.port, r.logTail())
	}
	if _, err := os.Stat(filepath.Join(r.dir, "dump.rdb")); err != nil {
		r.t.Fatalf("SHUTDOWN SAVE left no dump: %v; the log:\n%s", err, r.logTail())
	}
}

func (r *ownRedis) logTail() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
