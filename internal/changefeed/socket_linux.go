//go:build linux

package changefeed

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newSocket takes a dialled replication connection out of the runtime's network poller and
// returns it as a socket. It leaves the connection as it is when it exposes no descriptor, or
// when one of the descriptors the socket needs cannot be had.
func newSocket(c net.Conn, rx *receiver) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	fd := -1
	if err := raw.Control(func(f uintptr) {
		fd, _ = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || fd < 0 {
		return c
	}
	s, err := openSocket(fd, c.LocalAddr(), c.RemoteAddr(), rx)
	if err != nil {
		_ = unix.Close(fd)
		return c
	}
	// Closing the original descriptor takes the connection out of the poller; the duplicate
	// keeps it open. Both share the one non-blocking open file.
	_ = c.Close()
	return s
}

// socket is the replication connection under pgconn (and under TLS, when it is used), on a
// descriptor of its own that the runtime's network poller does not watch. It changes how the
// reader waits for bytes, never which bytes it gets or in what order.
//
// Why not the poller: the poller registers a socket with epoll for its whole life, so every
// send the server makes to it runs epoll's callback in the sender's system call, and wakes a
// thread of ours that sleeps in epoll_wait whenever one does, which is most of the time for a
// reader that keeps up. The walsender paid for those wake-ups with CPU it would have spent
// decoding: over loopback TCP it woke Herald about 2,000 times a 240,000-change drain against
// pg_recvlogical's 30 to 90 (pg_recvlogical waits in poll(2) only when it has read everything, so a
// send finds nobody to wake). This socket does the same:
//
//   - A read is one non-blocking read(2), made with syscall.RawSyscall: it never blocks, so it
//     needs none of the runtime's system call bookkeeping. Only when the socket is empty does
//     the reader wait, in ppoll(2), as an ordinary blocking system call (the runtime hands its P
//     on), on the socket and on an eventfd that a new deadline or Close signals.
//   - The linger (see receiver): in the middle of a transaction, a read that emptied the socket
//     is followed by a short sleep, during which the server's sends find nobody waiting.
//   - Writes (queries before the stream, status updates in it) are non-blocking sendmsg(2) calls
//     with MSG_NOSIGNAL, waiting in ppoll(2) for room when the socket has none.
//
// Deadlines follow net.Conn's rules: an operation past its deadline fails with an error that
// is os.ErrDeadlineExceeded and a net.Error whose Timeout is true, which pgconn takes for a
// timeout and not a broken connection; a new deadline applies to an operation already waiting.
// Reads never run concurrently with reads, nor writes with writes (pgconn's frontend reads on
// one goroutine, and its background reader hands its reads over under a lock); a read and a
// write may run at once, each waiting on an eventfd of its own.
type socket struct {
	fd           int
	laddr, raddr net.Addr
	rx           *receiver
	// pause is how a linger waits: the function pause, but for tests.
	pause func(time.Duration)
	// epoch anchors the deadlines to the monotonic clock: each is held as nanoseconds since
	// epoch, 0 for none.
	epoch         time.Time
	readDeadline  atomic.Int64
	writeDeadline atomic.Int64
	// wakeRead and wakeWrite are eventfds: a new deadline or Close signals them, so that a read
	// or a write waiting in ppoll looks again.
	wakeRead, wakeWrite int
	// mu is held for reading by every operation on the descriptors and for writing by Close,
	// which signals the waiters first: no descriptor is closed, and its number reused, while an
	// operation still uses it.
	mu     sync.RWMutex
	closed atomic.Bool

	// The reader's own (see the type's doc on concurrency).
	// drained says the last read took fewer bytes than it had room for: it emptied the socket.
	drained bool
}

// openSocket makes a socket of a connected, non-blocking stream socket descriptor, which it
// owns from then on.
func openSocket(fd int, laddr, raddr net.Addr, rx *receiver) (*socket, error) {
	wr, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	ww, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(wr)
		return nil, os.NewSyscallError("eventfd", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(wr)
		_ = unix.Close(ww)
		return nil, os.NewSyscallError("fcntl", err)
	}
	return &socket{fd: fd, laddr: laddr, raddr: raddr, rx: rx, pause: func(d time.Duration) { pause(d) }, epoch: time.Now(),
		wakeRead: wr, wakeWrite: ww}, nil
}

func (s *socket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(&s.readDeadline); err != nil {
		s.drained = false
		return 0, s.opError("read", err)
	}
	if s.drained && s.rx.lingering() {
		s.pause(s.rx.linger)
	}
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(s.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			if r == 0 {
				s.drained = false
				return 0, io.EOF
			}
			s.drained = int(r) < len(p)
			return int(r), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if err := s.wait(unix.POLLIN, &s.readDeadline, s.wakeRead); err != nil {
				s.drained = false
				return 0, s.opError("read", err)
			}
		default:
			s.drained = false
			return 0, s.opError("read", os.NewSyscallError("read", e))
		}
	}
}

func (s *socket) Write(p []byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(&s.writeDeadline); err != nil {
		return 0, s.opError("write", err)
	}
	n := 0
	for n < len(p) {
		w, err := unix.SendmsgN(s.fd, p[n:], nil, nil, unix.MSG_NOSIGNAL)
		switch err {
		case nil:
			n += w
		case unix.EINTR:
		case unix.EAGAIN:
			if err := s.wait(unix.POLLOUT, &s.writeDeadline, s.wakeWrite); err != nil {
				return n, s.opError("write", err)
			}
		default:
			return n, s.opError("write", os.NewSyscallError("sendmsg", err))
		}
	}
	return n, nil
}

// usable says why an operation may not start: the socket is closed, or its deadline passed.
func (s *socket) usable(deadline *atomic.Int64) error {
	if s.closed.Load() {
		return net.ErrClosed
	}
	if d := deadline.Load(); d != 0 && int64(time.Since(s.epoch)) >= d {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// wait blocks until the socket has events for the caller (or an error or hang-up, which the
// next read or write reports), until the deadline, or until Close.
func (s *socket) wait(events int16, deadline *atomic.Int64, wake int) error {
	for {
		if s.closed.Load() {
			return net.ErrClosed
		}
		var timeout *unix.Timespec
		if d := deadline.Load(); d != 0 {
			left := d - int64(time.Since(s.epoch))
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			ts := unix.NsecToTimespec(left)
			timeout = &ts
		}
		fds := [2]unix.PollFd{{Fd: int32(s.fd), Events: events}, {Fd: int32(wake), Events: unix.POLLIN}}
		if _, err := unix.Ppoll(fds[:], timeout, nil); err != nil && err != unix.EINTR {
			return os.NewSyscallError("ppoll", err)
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(wake, b[:])
		}
		if fds[0].Revents != 0 {
			return nil
		}
	}
}

// signal wakes an operation waiting on the eventfd wake, or the next one to wait.
func signal(wake int) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	_, _ = unix.Write(wake, b[:])
}

func (s *socket) SetDeadline(t time.Time) error {
	return s.setDeadline(t, true, true)
}

func (s *socket) SetReadDeadline(t time.Time) error {
	return s.setDeadline(t, true, false)
}

func (s *socket) SetWriteDeadline(t time.Time) error {
	return s.setDeadline(t, false, true)
}

func (s *socket) setDeadline(t time.Time, read, write bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return s.opError("set deadline", net.ErrClosed)
	}
	d := int64(0)
	if !t.IsZero() {
		// A deadline at or before the epoch has passed; 1 keeps it apart from "none".
		d = max(int64(t.Sub(s.epoch)), 1)
	}
	if read {
		s.readDeadline.Store(d)
		signal(s.wakeRead)
	}
	if write {
		s.writeDeadline.Store(d)
		signal(s.wakeWrite)
	}
	return nil
}

func (s *socket) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return s.opError("close", net.ErrClosed)
	}
	signal(s.wakeRead)
	signal(s.wakeWrite)
	s.mu.Lock()
	defer s.mu.Unlock()
	err := unix.Close(s.fd)
	_ = unix.Close(s.wakeRead)
	_ = unix.Close(s.wakeWrite)
	if err != nil {
		return s.opError("close", os.NewSyscallError("close", err))
	}
	return nil
}

func (s *socket) LocalAddr() net.Addr  { return s.laddr }
func (s *socket) RemoteAddr() net.Addr { return s.raddr }

func (s *socket) opError(op string, err error) error {
	e := &net.OpError{Op: op, Source: s.laddr, Addr: s.raddr, Err: err}
	if s.laddr != nil {
		e.Net = s.laddr.Network()
	}
	return e
}

// pause sleeps for d with a raw nanosleep(2): the goroutine keeps its P and the runtime is not
// involved (a Go timer this short wakes the poller, and an ordinary sleeping system call is
// retaken by the monitor thread after 20 µs, both of which cost more than the sleep saves). A
// signal ends it early, which only shortens the linger and lets the runtime's preemption or a
// stop for the collector through at once; interrupted says one did.
func pause(d time.Duration) (interrupted bool) {
	ts := syscall.NsecToTimespec(int64(d))
	_, _, e := syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
	return e == syscall.EINTR
}
