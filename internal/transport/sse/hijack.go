package sse

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/transport/heartbeat"
	"github.com/heraldrt/herald/internal/wire"
)

// deadlineSlack is how far past its deadline a write to a taken-over connection may run: the
// socket's deadline is moved only when it is more than this off, not for every batch (as the
// WebSocket transport does).
const deadlineSlack = 250 * time.Millisecond

// chunkRoom is the room kept at the front of a write's buffer for its chunk-size line: up to 16
// hex digits and CRLF.
const chunkRoom = 18

// buffers are the buffers of the writes in progress: a stream holds one only while it writes.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxPooled is the largest buffer put back in the pool; a larger batch's is left to the GC.
const maxPooled = 64 << 10

// hijack takes the connection of an HTTP/1.x stream over from net/http and writes the
// response's status line and headers on it itself, or returns nil to leave the stream on
// the ResponseWriter: HTTP/2 (whose streams share a connection), or a ResponseWriter that
// cannot be taken over. The body is chunked for HTTP/1.1, as net/http would have made it, and
// ends with the connection for HTTP/1.0; either way the connection closes with the stream.
func (h *Handler) hijack(w http.ResponseWriter, r *http.Request, ids *eventIDs) *rawTransport {
	if r.ProtoMajor != 1 {
		return nil
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	hd.Set("Connection", "close")
	hd.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	chunked := r.ProtoAtLeast(1, 1)
	if chunked {
		hd.Set("Transfer-Encoding", "chunked")
	}
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		hd.Del("Connection")
		hd.Del("Date")
		hd.Del("Transfer-Encoding")
		return nil
	}
	// A GET has no body, and a client does not send a request behind a stream's: whatever
	// net/http buffered is dropped with its reader.
	_ = brw
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/%d.%d 200 OK\r\n", r.ProtoMajor, r.ProtoMinor)
	_ = hd.Write(&head)
	head.WriteString("\r\n")
	t := &rawTransport{nc: nc, chunked: chunked, ids: ids, slow: h.slowTimeout(), done: make(chan struct{})}
	if sc, ok := nc.(syscall.Conn); ok {
		t.raw, _ = sc.SyscallConn()
	}
	t.wdl = time.Now().Add(t.slow)
	_ = nc.SetWriteDeadline(t.wdl)
	if _, err := nc.Write(head.Bytes()); err != nil {
		t.werr = err
	}
	return t
}

// rawTransport writes a stream's events to a connection taken over from net/http: the
// session's writer (Write), a keepalive (tryComment or comment) and Close, serialized by mu.
// Every write runs under a deadline on the socket, or (tryComment's) never waits, so none holds
// mu for ever.
type rawTransport struct {
	nc      net.Conn
	raw     syscall.RawConn // nc's descriptor, when nc has one: tryComment writes through it
	chunked bool            // HTTP/1.1: each write is one chunk
	ids     *eventIDs       // what the event ids say; guarded by mu
	slow    time.Duration   // how long a keepalive write may block

	mu sync.Mutex
	// Guarded by mu:
	wdl          time.Time // the socket's write deadline; zero for none
	werr         error     // a write failed, maybe mid-chunk: nothing more may be written
	lastWasError bool      // the last frame written was an error frame, the stream's explanation of its end

	once sync.Once
	done chan struct{} // closed once Close has begun
}

var _ heraldv1.Carrier = (*rawTransport)(nil)

// setWriteDeadline makes the socket's write deadline dl, or up to deadlineSlack later. The
// caller holds mu.
func (t *rawTransport) setWriteDeadline(dl time.Time) error {
	if !t.wdl.Before(dl) && t.wdl.Sub(dl) <= deadlineSlack {
		return nil
	}
	t.wdl = dl.Add(deadlineSlack)
	return t.nc.SetWriteDeadline(t.wdl)
}

// writeLocked writes the bytes append adds to a pooled buffer, as one chunk when chunked, in
// one write(2). The caller holds mu.
func (t *rawTransport) writeLocked(deadline time.Time, fill func([]byte) []byte) error {
	if t.werr != nil {
		return t.werr
	}
	if err := t.setWriteDeadline(deadline); err != nil {
		t.werr = err
		return err
	}
	bp := buffers.Get().(*[]byte)
	b := append((*bp)[:0], make([]byte, chunkRoom)...)
	b = fill(b)
	start := 0
	if t.chunked {
		var size [chunkRoom]byte
		line := append(strconv.AppendInt(size[:0], int64(len(b)-chunkRoom), 16), '\r', '\n')
		start = chunkRoom - len(line)
		copy(b[start:], line)
		b = append(b, '\r', '\n')
	} else {
		start = chunkRoom
	}
	_, err := t.nc.Write(b[start:])
	if cap(b) <= maxPooled {
		*bp = b[:0]
		buffers.Put(bp)
	}
	if err != nil {
		t.werr = err
	}
	return err
}

// Write writes items as events, in one write(2).
func (t *rawTransport) Write(deadline time.Time, items []delivery.Item) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(items); n > 0 {
		t.lastWasError = bytes.HasPrefix(items[n-1].Body, errorPrefix)
	}
	return t.writeLocked(deadline, func(b []byte) []byte { return appendEvents(b, items, t.ids) })
}

// comment writes the keepalive comment line, within the slow limit, and lifts the deadline
// after it: a keepalive is mostly what an idle stream writes, and a deadline left set would
// fire its timer for nothing.
func (t *rawTransport) comment() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.done:
		return net.ErrClosed // the stream has ended
	default:
	}
	dl := time.Now().Add(t.slow)
	err := t.writeLocked(dl, func(b []byte) []byte { return append(b, keepaliveComment...) })
	if err != nil {
		if !time.Now().Before(dl) {
			return fmt.Errorf("%w: %w", errBlocked, err)
		}
		return err
	}
	t.wdl = time.Time{}
	_ = t.nc.SetWriteDeadline(t.wdl)
	return nil
}

// keepaliveChunk is the keepalive comment as one chunk of a chunked body.
var keepaliveChunk = fmt.Appendf(nil, "%x\r\n%s\r\n", len(keepaliveComment), keepaliveComment)

// tryComment writes the keepalive comment now, on the caller's goroutine, if it can without
// waiting: no other write holds mu, the stream has not ended or failed, and the socket takes
// the whole line in one write(2). It reports whether the keepalive was dealt with: written, or
// the stream broken by a line the socket took only part of (the error). false leaves it to
// comment, which may wait.
func (t *rawTransport) tryComment() (bool, error) {
	if t.raw == nil || !t.mu.TryLock() {
		return false, nil
	}
	defer t.mu.Unlock()
	select {
	case <-t.done:
		return false, nil
	default:
	}
	if t.werr != nil {
		return false, nil
	}
	if !t.wdl.IsZero() {
		// A deadline left by the last write would refuse this one once it has passed.
		t.wdl = time.Time{}
		if err := t.nc.SetWriteDeadline(t.wdl); err != nil {
			return false, nil
		}
	}
	b := keepaliveComment
	if t.chunked {
		b = keepaliveChunk
	}
	ok, err := heartbeat.WriteNow(t.raw, b)
	if err != nil {
		t.werr = fmt.Errorf("a keepalive %w", err)
	}
	return ok, t.werr
}

// closeWait is how long Close lets a write in progress finish before it fails it.
const closeWait = 2 * time.Second

// Close ends the stream as the ResponseWriter's transport does (an ending error event after a
// retry field), then the chunked body's last chunk, and closes the connection. A write stuck
// on a client that stopped reading is failed first (closeWait), and then nothing more is
// written.
func (t *rawTransport) Close(code wire.CloseCode, reason string) {
	t.once.Do(func() {
		close(t.done)
		if !t.mu.TryLock() {
			// A write in progress: a keepalive, most likely, which ends at once. One stuck on a
			// client that stopped reading is failed by this deadline (or its own, if it set a
			// later one as this was set), and then nothing more is written.
			_ = t.nc.SetWriteDeadline(time.Now().Add(closeWait))
			t.mu.Lock()
		}
		defer t.mu.Unlock()
		ending, retry := endingOf(code, reason)
		dl := time.Now().Add(closeWait)
		if ending != nil {
			_ = t.writeLocked(dl, func(b []byte) []byte {
				b = fmt.Appendf(b, "retry: %d\n\n", retry.Milliseconds())
				if !t.lastWasError {
					if frame, err := wire.AppendFrame(nil, ending); err == nil {
						b = append(append(append(b, "data: "...), frame...), "\n\n"...)
					}
				}
				return b
			})
		}
		if t.chunked && t.werr == nil {
			_ = t.setWriteDeadline(dl)
			_, _ = t.nc.Write([]byte("0\r\n\r\n"))
		}
		// Close the sending side first and let the reader see the client close its own, so
		// that the last events are not lost to a reset; the reader's end closes the socket.
		if cw, ok := t.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = t.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
			return
		}
		_ = t.nc.Close()
	})
}

// awaitGone reads the connection until the client closes it or it fails, and then closes it.
// A client sends nothing on a stream after its request; what it does send is dropped.
func (t *rawTransport) awaitGone() {
	var b [16]byte
	for {
		// An end of the stream, a reset, the socket closed by Close, or the deadline it set.
		if _, err := t.nc.Read(b[:]); err != nil {
			break
		}
	}
	_ = t.nc.Close()
}
