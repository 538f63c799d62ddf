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
	"github.com/jackc/pgx/v5/pgconn"
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
	t.Cleanup(func() {
		_ = conns[0].Close()
		_ = conns[1].Close()
	})
	s, ok := newSocket(conns[1], rx).(*socket)
	if !ok {
		t.Fatal("newSocket did not wrap a Unix socket")
	}
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

func TestSocketDoesNotLingerOverTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	defer c.Close()
	defer server.Close()
	rx := &receiver{linger: time.Millisecond}
	rx.inTxn.Store(true)
	s, ok := newSocket(c, rx).(*socket)
	if !ok {
		t.Fatal("newSocket did not wrap a TCP socket")
	}
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
	if paused != 0 {
		t.Errorf("paused %d times over TCP, want 0", paused)
	}
}

func TestPauseSleeps(t *testing.T) {
	// Timed one way only: a pause may run long on a busy machine, never short (but for a
	// signal, which the runtime's preemption can send; the loop tolerates one).
	short := 0
	for range 5 {
		start := time.Now()
		pause(2 * time.Millisecond)
		if time.Since(start) < 2*time.Millisecond {
			short++
		}
	}
	if short > 1 {
		t.Errorf("%d of 5 pauses of 2ms were shorter", short)
	}
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
