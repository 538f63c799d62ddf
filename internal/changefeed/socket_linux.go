//go:build linux

package changefeed

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// rawReads says whether socket reads with raw read(2) calls; always on Linux.
const rawReads = true

// newSocket wraps a dialled replication connection. It reads through raw non-blocking read(2)
// calls when the connection exposes its descriptor (TCP and Unix sockets do), and through the
// connection's own Read otherwise.
func newSocket(c net.Conn, rx *receiver) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	s := &socket{Conn: c, raw: raw, rx: rx, pause: pause}
	// Over TCP the linger cost the server more than it saved: on loopback the walsender used
	// about 0.4 s more CPU per 240,000-change drain with it than without (docs/BENCHMARKS.md).
	_, s.lingers = c.(*net.UnixConn)
	s.readFD = s.read
	return s
}

// socket is the replication connection under pgconn (and under TLS, when it is used). It
// changes how the reader waits for bytes, never which bytes it gets or in what order:
//
//   - A read is one non-blocking read(2) made with syscall.RawSyscall inside
//     syscall.RawConn.Read, which parks the goroutine on the poller, deadline and all, exactly
//     as a net.Conn read does when the socket is empty. The difference is the runtime's system
//     call bookkeeping, which a read that never blocks does not need: entering a system call the
//     ordinary way wakes the runtime's monitor thread whenever every P was idle, and it then polls
//     every 20 µs for the next millisecond. A reader that keeps up with the server goes idle and
//     wakes thousands of times a second, so that monitor was about a fifth of `herald tail`'s CPU.
//   - The linger (see receiver), on a Unix socket only.
type socket struct {
	net.Conn
	raw syscall.RawConn
	rx  *receiver
	// pause is how a linger waits: the function pause, but for tests.
	pause func(time.Duration)
	// drained says the last read took fewer bytes than it had room for: it emptied the socket.
	// Read is never called from two goroutines at once (pgconn's frontend reads on one, and its
	// background reader, when it runs, hands its reads over under a lock).
	drained bool
	// lingers says the linger applies: on a Unix socket only.
	lingers bool
	// readFD is s.read, made once: a closure per Read would be an allocation per read.
	readFD func(fd uintptr) bool
	// The current read's buffer and outcome, for read.
	p     []byte
	n     int
	errno syscall.Errno
}

func (s *socket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.drained && s.lingers && s.rx.lingering() {
		s.pause(s.rx.linger)
	}
	s.p = p
	err := s.raw.Read(s.readFD)
	n, errno := s.n, s.errno
	s.p = nil
	if err == nil && errno != 0 {
		err = os.NewSyscallError("read", errno)
		n = 0
	}
	if err != nil {
		s.drained = false
		return 0, &net.OpError{Op: "read", Net: s.LocalAddr().Network(), Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	s.drained = n < len(p)
	return n, nil
}

// read is one non-blocking read(2) of s.p into s.n and s.errno; false asks RawConn.Read to
// wait until the socket is readable and call again.
func (s *socket) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.p[0])), uintptr(len(s.p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.n, s.errno = int(r), e
		return true
	}
}

// pause sleeps for d with a raw nanosleep(2): the goroutine keeps its P and the runtime is not
// involved (a Go timer this short wakes the poller, and an ordinary sleeping system call is
// retaken by the monitor thread after 20 µs, both of which cost more than the sleep saves). A
// signal ends it early, which only shortens the linger.
func pause(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}
