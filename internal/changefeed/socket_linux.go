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
	return &socket{Conn: c, raw: raw, rx: rx, pause: pause}
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
//   - The linger (see receiver).
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
}

func (s *socket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.drained && s.rx.lingering() {
		s.pause(s.rx.linger)
	}
	var n int
	var errno syscall.Errno
	err := s.raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait on the poller, then call again
			}
			n, errno = int(r), e
			return true
		}
	})
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

// pause sleeps for d with a raw nanosleep(2): the goroutine keeps its P and the runtime is not
// involved (a Go timer this short wakes the poller, and an ordinary sleeping system call is
// retaken by the monitor thread after 20 µs, both of which cost more than the sleep saves). A
// signal ends it early, which only shortens the linger.
func pause(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}
