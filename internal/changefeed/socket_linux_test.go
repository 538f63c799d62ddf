//go:build linux

package changefeed

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sys/unix"
)

// socketPair is a connected pair of Unix sockets: client wrapped as session wraps the
// replication connection, server as the walsender's end.
func socketPair(t *testing.T, rx *receiver) (client *socket, server net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	t.Cleanup(func() { _ = conns[0].Close() })
	s, ok := newSocket(conns[1], rx).(*socket)
	if !ok {
		t.Fatal("newSocket did not wrap a Unix socket")
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, conns[0]
}

func TestSocketReadsEveryByteInOrder(t *testing.T) {
	rx := &receiver{linger: 10 * time.Microsecond}
	rx.inTxn.Store(true) // lingering on, so reads after draining ones take that path too
	s, server := socketPair(t, rx)
	want := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	go func() {
		rng := rand.New(rand.NewPCG(3, 4)) // the writer's own
		rest := want
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(20_000))
			if _, err := server.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		_ = server.Close()
	}()
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf[:1+rng.IntN(len(buf))])
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", got.Len(), err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes that differ from the %d written", got.Len(), len(want))
	}
}

func TestSocketReadEndsAtTheDeadline(t *testing.T) {
	// The reader's status interval and a stop both end a waiting read through its deadline,
	// and pgconn must see the timeout as one, or it closes the connection.
	s, _ := socketPair(t, &receiver{})
	if err := s.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := s.Read(make([]byte, 100))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %d bytes, %v; want 0 and a timeout", n, err)
	}
	// Moving the deadline on makes the socket readable again.
	if err := s.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
}

func TestSocketLingersOnlyAfterDrainingReadsInsideATransaction(t *testing.T) {
	const linger = 123 * time.Microsecond
	cases := []struct {
		name   string
		linger time.Duration
		inTxn  bool
		first  int // bytes the first read may take, of the 10 waiting
		want   int // pauses before the second read
	}{
		{"drained inside a transaction", linger, true, 100, 1},
		{"drained between transactions", linger, false, 100, 0},
		{"more was waiting", linger, true, 4, 0},
		{"drained exactly", linger, true, 10, 0}, // a full read cannot tell an empty socket
		{"linger off", -1, true, 100, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rx := &receiver{linger: tc.linger}
			rx.inTxn.Store(tc.inTxn)
			s, server := socketPair(t, rx)
			var pauses []time.Duration
			s.pause = func(d time.Duration) { pauses = append(pauses, d) }
			if _, err := server.Write([]byte("0123456789")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Read(make([]byte, tc.first)); err != nil {
				t.Fatal(err)
			}
			if len(pauses) != 0 {
				t.Fatalf("paused before the first read: %v", pauses)
			}
			if _, err := server.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Read(make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			if len(pauses) != tc.want {
				t.Fatalf("paused %d times before the second read, want %d", len(pauses), tc.want)
			}
			if tc.want > 0 && pauses[0] != linger {
				t.Errorf("paused %s, want %s", pauses[0], linger)
			}
		})
	}
}

// tcpPair is a connected pair of loopback TCP connections: client wrapped as session wraps
// the replication connection, server as the walsender's end.
func tcpPair(t *testing.T, rx *receiver) (client *socket, server net.Conn) {
	t.Helper()
	server, dialed := testenv.TCPPair(t)
	s, ok := newSocket(dialed, rx).(*socket)
	if !ok {
		t.Fatal("newSocket did not wrap a TCP socket")
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, server
}

func TestSocketLingersOverTCPToo(t *testing.T) {
	rx := &receiver{linger: time.Millisecond}
	rx.inTxn.Store(true)
	s, server := tcpPair(t, rx)
	paused := 0
	s.pause = func(time.Duration) { paused++ }
	for _, b := range []string{"0123456789", "x"} {
		if _, err := server.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
		// A buffer larger than what waits: the read empties the socket.
		if _, err := s.Read(make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if paused != 1 {
		t.Errorf("paused %d times over TCP, want 1: before the read that follows one that emptied the socket", paused)
	}
}

func TestSocketLeavesThePoller(t *testing.T) {
	// The connection's own descriptor is closed, which is what takes it out of the runtime's
	// poller: the socket reads through a duplicate, and the original net.Conn is done with.
	server, c := testenv.TCPPair(t)
	if _, err := server.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	s, ok := newSocket(c, &receiver{}).(*socket)
	if !ok {
		t.Fatal("newSocket did not wrap a TCP socket")
	}
	defer s.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the original connection still reads (%v): it is still in the poller", err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v through the socket, want hello", buf, err)
	}
	flags, err := unix.FcntlInt(uintptr(s.fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("the socket's descriptor is not close-on-exec (flags %#x, %v)", flags, err)
	}
}

func TestSocketWaitsAndWrites(t *testing.T) {
	for name, pair := range map[string]func(*testing.T, *receiver) (*socket, net.Conn){"unix": socketPair, "tcp": tcpPair} {
		t.Run(name, func(t *testing.T) {
			s, server := pair(t, &receiver{})
			// A read that finds nothing waits in ppoll until the peer writes.
			go func() {
				time.Sleep(20 * time.Millisecond)
				_, _ = server.Write([]byte("late"))
			}()
			buf := make([]byte, 16)
			n, err := s.Read(buf)
			if err != nil || string(buf[:n]) != "late" {
				t.Fatalf("read %q, %v; want late", buf[:n], err)
			}
			// A write larger than the socket buffers waits for room, and arrives whole.
			want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(io.LimitReader(server, int64(len(want))))
				got <- b
			}()
			if n, err := s.Write(want); n != len(want) || err != nil {
				t.Fatalf("wrote %d of %d bytes: %v", n, len(want), err)
			}
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("the peer read %d bytes that differ from the %d written", len(b), len(want))
			}
		})
	}
}

// endWaitingRead starts a read of s that finds nothing, ends it with end, and checks that the
// read ended with want. (A read that has not reached ppoll when end runs ends the same way.)
func endWaitingRead(t *testing.T, s *socket, end func() error, want error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := end(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("the waiting read ended with %v, want %v", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting read did not end")
	}
}

func TestSocketDeadlineAndCloseReachAWaitingRead(t *testing.T) {
	// The reader's status interval and a stop (context.AfterFunc sets the deadline to now) both
	// end a read that already waits, as does Close.
	t.Run("deadline moved in", func(t *testing.T) {
		s, _ := socketPair(t, &receiver{})
		endWaitingRead(t, s, func() error { return s.SetReadDeadline(time.Now()) }, os.ErrDeadlineExceeded)
	})
	t.Run("close", func(t *testing.T) {
		s, _ := socketPair(t, &receiver{})
		endWaitingRead(t, s, s.Close, net.ErrClosed)
		if err := s.Close(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("a second Close: %v, want net.ErrClosed", err)
		}
		if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("a write after Close: %v, want net.ErrClosed", err)
		}
	})
	t.Run("write deadline", func(t *testing.T) {
		s, _ := socketPair(t, &receiver{})
		if err := s.SetWriteDeadline(time.Now().Add(30 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		// Nobody reads: the write fills the buffers and then waits, until its deadline.
		n, err := s.Write(make([]byte, 16<<20))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || n >= 16<<20 {
			t.Fatalf("wrote %d bytes, %v; want fewer than all and a timeout", n, err)
		}
	})
}

func TestPauseSleeps(t *testing.T) {
	// Timed one way only: a pause may run long on a busy machine, never short, unless a signal
	// ended it (the runtime's preemption and the race detector send them), which it says. Five
	// uninterrupted pauses are asked for, of at most a hundred.
	whole := 0
	for range 100 {
		start := time.Now()
		interrupted := pause(2 * time.Millisecond)
		if took := time.Since(start); !interrupted {
			if took < 2*time.Millisecond {
				t.Fatalf("an uninterrupted pause of 2ms took %s", took)
			}
			if whole++; whole == 5 {
				return
			}
		}
	}
	t.Fatalf("only %d of 100 pauses were not interrupted by a signal", whole)
}

func TestStreamThroughSocketKeepsPgconnTimeouts(t *testing.T) {
	// What the reader relies on: a read that the deadline ends is a timeout to pgconn, and
	// the connection stays usable for the next read.
	p, server := fakeStream(t, Config{}, SinkFunc(func(context.Context, *change.Txn) error { return nil }))
	if err := p.conn.Conn().SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.conn.ReceiveMessage(context.Background()); !pgconn.Timeout(err) {
		t.Fatalf("receive past the deadline: %v, want a pgconn timeout", err)
	}
	if err := p.conn.Conn().SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write(keepalive(42, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.conn.ReceiveMessage(context.Background()); err != nil {
		t.Fatalf("receive after a timeout: %v", err)
	}
}
