package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heraldrt/herald/internal/wire"
)

// Descriptors. A node's open files are its client sockets, its admin sockets, and what it
// needs to work at all: Postgres connections (replication, the leader lock, the catalog pool),
// Redis, peers, log files. If client sockets took them all, accept(2) would fail with EMFILE:
// the kernel keeps the connection in the listen backlog, Go's server retries, and the client
// hangs with no answer until its own timeout, while /healthz and /metrics time out too. So:
//
//   - Client sockets are capped below the open-file limit, leaving a reserve for the rest.
//   - A socket past the cap is answered at once with a too_many_connections refusal (a 429,
//     or for SSE the error event) and closed: a refusal, never a hang.
//   - Below the cap, limits.max_connections counts sessions and refuses past it with the
//     protocol's own answer (close 4001, or SSE's too_many_connections event). The cap leaves
//     room above max_connections for those refusals and for handshakes in progress.
//   - Should accept fail for lack of descriptors anyway (something else used them), one
//     descriptor kept open in reserve is given up to accept the waiting connection and refuse
//     it, then taken back.
//   - Health, readiness and metrics have their own listener, whose few sockets come out of
//     the reserve.

// fdLimit is the process's open-file limit. Go raises the soft limit to the hard one at start
// on Linux, so the soft limit read here is already as high as it goes without privileges.
func fdLimit() (int, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur > 1<<30 {
		return 1 << 30, nil
	}
	return int(rl.Cur), nil
}

// socketBudget decides the client socket cap and the session limit for a file limit. The
// cap leaves reserve descriptors free; the session limit leaves headroom under the cap for
// refusals and handshakes in progress. clamped says the configured session limit did not fit.
func socketBudget(limit, reserve, maxConns int) (sockets, sessions int, clamped bool) {
	headroom := func(n int) int { return max(16, n/16) }
	free := max(1, limit-reserve)
	if maxConns+headroom(maxConns) <= free {
		return maxConns + headroom(maxConns), maxConns, false
	}
	return free, max(1, free-headroom(free)), true
}

// gatedListener caps the open sockets it hands out, refusing the rest at once.
type gatedListener struct {
	net.Listener
	max int64
	log *slog.Logger

	open    atomic.Int64  // sockets handed out and not yet closed
	refused atomic.Uint64 // sockets refused past the cap or for lack of descriptors

	refusing chan struct{}  // bounds the refusals being written at once
	writers  sync.WaitGroup // the refusals being written; Close waits for them

	spareMu sync.Mutex
	spare   *os.File // guarded by spareMu: a descriptor held in reserve
}

// maxRefusing bounds the refusals in flight: each holds a descriptor for at most
// refuseTimeout. Past it, a socket is closed without an answer (the client sees a reset, not
// a hang).
const maxRefusing = 64

// refuseTimeout bounds writing a refusal and waiting for the client to read it.
const refuseTimeout = time.Second

func newGatedListener(ln net.Listener, maxSockets int, log *slog.Logger) *gatedListener {
	l := &gatedListener{Listener: ln, max: int64(maxSockets), log: log, refusing: make(chan struct{}, maxRefusing)}
	l.spare, _ = os.Open(os.DevNull)
	return l
}

// Accept returns the next connection under the cap; connections past it are refused here.
func (l *gatedListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
				return nil, err
			}
			if l.refuseWithSpare() {
				delay = 0
				continue
			}
			// No spare to give up: wait, as net/http would, instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.log.Warn("out of file descriptors; not accepting", "retry_in", delay, "fix", "raise the open-file limit (ulimit -n, systemd LimitNOFILE) or lower limits.max_connections")
			time.Sleep(delay)
			continue
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(c)
			continue
		}
		return &gatedConn{Conn: c, l: l}, nil
	}
}

// Close closes the listener, waits for the refusals being written (each ends within
// refuseTimeout), and releases the spare descriptor.
func (l *gatedListener) Close() error {
	err := l.Listener.Close()
	l.writers.Wait()
	l.spareMu.Lock()
	if l.spare != nil {
		l.spare.Close()
		l.spare = nil
	}
	l.spareMu.Unlock()
	return err
}

// refuseWithSpare gives up the spare descriptor to accept one waiting connection and refuse
// it, then takes the descriptor back. It reports whether it had one to give.
func (l *gatedListener) refuseWithSpare() bool {
	l.spareMu.Lock()
	defer l.spareMu.Unlock()
	if l.spare == nil {
		l.spare, _ = os.Open(os.DevNull)
		return false
	}
	l.spare.Close()
	l.spare = nil
	if c, err := l.Listener.Accept(); err == nil {
		l.refused.Add(1)
		// No descriptors to spare for a polite answer: a reset tells the client at once.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
	l.spare, _ = os.Open(os.DevNull)
	return true
}

// refusalFrame is the error frame every refused socket gets.
var refusalFrame = func() []byte {
	b, _ := wire.AppendFrame(nil, &wire.Error{Code: wire.CodeTooManyConnections,
		Message: "this node is at its connection limit; reconnect with backoff starting at 10 s"})
	return b
}()

// The answers to a socket past the cap, as docs/PROTOCOL.md has each transport refuse
// too_many_connections: an SSE stream is a 200 whose only event is the error, after a retry
// delay, since EventSource gives up for good on any other status; anything else (a WebSocket
// upgrade, which would cost a whole socket to accept) is a 429 with the error frame as its
// body and Retry-After.
var (
	refusalSSE = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n" +
		"retry: 10000\ndata: " + string(refusalFrame) + "\n\n")
	refusalHTTP = []byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 10\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(refusalFrame)) + "\r\n\r\n" + string(refusalFrame))
)

// refuse answers c and closes it, on a goroutine of its own, bounded by maxRefusing and
// refuseTimeout. It reads the request's head first: an answer sent before the request is
// taken by HTTP clients as an unsolicited response, and closing a socket whose request is
// unread resets it, which can destroy the answer before the client reads it. So: read the
// head, answer, shut the sending side, and drain until the client closes.
func (l *gatedListener) refuse(c net.Conn) {
	l.refused.Add(1)
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	l.writers.Add(1)
	go func() {
		defer l.writers.Done()
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseTimeout))
		answer := refusalHTTP
		if req, err := http.ReadRequest(bufio.NewReaderSize(io.LimitReader(c, 8<<10), 4<<10)); err == nil && req.URL.Path == "/v1/sse" {
			answer = refusalSSE
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, c)
	}()
}

// gatedConn gives its place under the cap back when closed.
type gatedConn struct {
	net.Conn
	l    *gatedListener
	once sync.Once
}

// SyscallConn is the accepted connection's, for a transport that writes to the descriptor
// directly (the WebSocket transport's pings).
func (c *gatedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// listen binds addr with the given accept backlog. Go asks for the kernel's maximum
// (net.core.somaxconn); a positive backlog is set with a second listen(2), which Linux
// allows on a listening socket. The kernel caps it at somaxconn either way.
//
// Accepted connections get TCP keepalive probes only after twice ping (Go's default is after
// 15 s of silence, which on a WebSocket or SSE connection beaten every ping would probe it two
// or three times between beats for nothing), and, on Linux, a TCP_USER_TIMEOUT of twice ping,
// which the listening socket hands on to every connection it accepts: a connection whose
// data (a ping, a keepalive) stays unacknowledged that long is dropped by the kernel. That is
// what ends an SSE stream whose client vanished (an SSE stream has no pong to miss); without it
// the kernel retransmits for about 15 minutes first. ping zero leaves Go's defaults.
func listen(addr string, backlog int, ping time.Duration) (net.Listener, error) {
	var lc net.ListenConfig
	if ping > 0 {
		lc.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: 2 * ping, Interval: 15 * time.Second, Count: 4}
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, 2*ping) }); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("set TCP_USER_TIMEOUT: %w", serr)
			}
			return nil
		}
	}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil || backlog <= 0 {
		return ln, err
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return ln, nil
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		ln.Close()
		return nil, err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), backlog) }); err != nil {
		lerr = err
	}
	if lerr != nil {
		ln.Close()
		return nil, fmt.Errorf("set the listen backlog to %d: %w", backlog, lerr)
	}
	return ln, nil
}
