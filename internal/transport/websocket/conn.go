package websocket

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/transport/heartbeat"
	"github.com/heraldrt/herald/internal/wire"
)

// closeTimeout bounds each step of a close: the wait for a write in progress to end before the
// close frame goes out, its write, and the wait for the client's close frame (the closing
// handshake). RFC 6455 leaves the time to the endpoint; 5 s is what browsers and the common
// libraries allow.
const closeTimeout = 5 * time.Second

// maxWriteTime is the deadline of a control frame's write whose ctx has none, so that no write
// holds the connection's write lock, and a close waiting for it, for ever.
const maxWriteTime = 10 * time.Second

// deadlineSlack is how far past its deadline a write may run. The socket's deadline is a timer
// in the runtime's poller, and moving it for every batch cost as much as a tenth of the
// writer's time; with the slack, a writer busy every few milliseconds moves it a few times a
// second. A write stuck on a client that stopped reading fails this much later, at most.
const deadlineSlack = 250 * time.Millisecond

// writeBufferSize is the size of the pooled buffers frames are written through. A batch of
// small messages fits in one, so it goes out in one write(2); a batch larger than this goes out
// in a few writes, each still large enough that the syscall's cost per byte is small. A write
// stuck on a client that stopped reading holds one buffer until its deadline, so it is kept
// well under delivery.DefaultMaxBatchBytes.
const writeBufferSize = 16 << 10

// writers are the buffers of the writes in progress: a connection holds one only while it
// writes, never while it is idle.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}

// errClosed: the connection has been closed, or its close has begun.
var errClosed = net.ErrClosed

// errFrameTooLarge: a client's message is longer than the frame limit.
var errFrameTooLarge = errors.New("message longer than max_frame_bytes")

// framingError is a client frame that breaks RFC 6455's framing: an unmasked frame, reserved
// bits or opcodes, a continuation with no message to continue. The stream can no longer be
// read as frames, so the connection is closed as a bad frame.
type framingError struct{ err error }

func (e *framingError) Error() string { return "WebSocket framing: " + e.err.Error() }
func (e *framingError) Unwrap() error { return e.err }

// peerClosed: the client sent a close frame.
type peerClosed struct {
	code   ws.StatusCode
	reason string
}

func (e *peerClosed) Error() string {
	return fmt.Sprintf("client closed the connection with %d %q", e.code, e.reason)
}

// conn is one upgraded connection: RFC 6455 framing over the hijacked net.Conn, with gobwas/ws
// encoding and decoding the frame headers and unmasking the client's payloads. It is the
// session's Transport.
//
// Writes come from several goroutines: the session's writer, the reader (pongs, the reply to
// the client's close), the pinger and Close. wmu serializes them; it is a channel of one slot
// rather than a mutex so that a wait for it can end with a ctx, a deadline or the connection's
// end. Every write runs under a deadline on the socket, or (tryPing's) never waits, so no
// write holds wmu for ever. Reads
// come from one goroutine at a time, serialized by rmu: the read loop, and then the closing
// handshake, which reads on where the read loop stopped.
//
// Lock order: rmu, then wmu (the reader answers pings and closes while it holds rmu). Close
// never holds wmu while it takes rmu.
type conn struct {
	nc  net.Conn
	raw syscall.RawConn // nc's descriptor, when nc has one: tryPing writes through it
	r   io.Reader       // nc, after what the upgrade had buffered; read under rmu

	wmu       chan struct{}          // the write lock: held by whoever sent into it
	werr      error                  // guarded by wmu: a write failed, maybe mid-frame; nothing more may be written
	wdl       time.Time              // guarded by wmu: the socket's write deadline; zero for none
	closeSent bool                   // guarded by wmu
	whdr      [ws.MaxHeaderSize]byte // guarded by wmu: a frame header's scratch

	rmu       sync.Mutex
	rhdr      [ws.MaxHeaderSize - 2]byte          // guarded by rmu: a frame header's scratch
	rctl      [ws.MaxControlFramePayloadSize]byte // guarded by rmu: a control frame's payload
	rleft     int64                               // guarded by rmu: payload bytes of the current frame not read (a frame too large)
	rfrag     bool                                // guarded by rmu: a fragmented message is in progress
	rerr      error                               // guarded by rmu: why reading ended, once it has
	closeRcvd bool                                // guarded by rmu: the client's close frame was read

	pingSent atomic.Uint64 // the number of the latest ping sent, which is its payload
	pongSeq  atomic.Uint64 // the number of the latest ping answered

	closeOnce sync.Once
	shutOnce  sync.Once
	done      chan struct{} // closed when nc has been closed
}

var _ heraldv1.Carrier = (*conn)(nil)

// newConn takes over nc, a hijacked connection whose upgrade has been answered. br is the
// reader the upgrade read the request with: a client may have sent its first frames before the
// answer, and br may hold them. Only those bytes are kept, not br, so an idle connection holds
// only a small read buffer (readBufferSize), not net/http's.
func newConn(nc net.Conn, br *bufio.Reader) *conn {
	c := &conn{nc: nc, wmu: make(chan struct{}, 1), done: make(chan struct{})}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	var r io.Reader = nc
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(b)), nc)
	}
	c.r = bufio.NewReaderSize(r, readBufferSize)
	return c
}

// readBufferSize is the connection's read buffer: enough for a control frame whole (a pong is
// 14 bytes: header, mask, payload) and a small request, so each takes one read(2) rather than
// one for the header, one for the mask and one for the payload. A message larger than it is
// read straight into its own slice.
const readBufferSize = 256

// lock takes the write lock, unless ctx ends or the connection closes first.
func (c *conn) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case c.wmu <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return errClosed
	}
}

// lockBy takes the write lock, unless deadline passes or the connection closes first. The wait
// has a timer only when the lock is held.
func (c *conn) lockBy(deadline time.Time) error {
	select {
	case c.wmu <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case c.wmu <- struct{}{}:
		return nil
	case <-t.C:
		return os.ErrDeadlineExceeded
	case <-c.done:
		return errClosed
	}
}

func (c *conn) unlock() { <-c.wmu }

// writable reports why nothing may be written, or nil. The caller holds wmu.
func (c *conn) writable() error {
	if c.werr != nil {
		return c.werr
	}
	if c.closeSent {
		return errClosed
	}
	return nil
}

// setWriteDeadline makes the socket's write deadline dl, or up to deadlineSlack later: it keeps
// the one set before when that is in range, else sets dl plus the slack. The caller holds wmu.
func (c *conn) setWriteDeadline(dl time.Time) error {
	if !c.wdl.Before(dl) && c.wdl.Sub(dl) <= deadlineSlack {
		return nil
	}
	c.wdl = dl.Add(deadlineSlack)
	return c.nc.SetWriteDeadline(c.wdl)
}

// Write writes every item as one text message, all through one buffer that is flushed once at
// the end, so a batch of small messages leaves in one write(2), under one deadline. Each
// message is one frame, its head and body written after the header as they are, never
// joined. A write that fails leaves the stream maybe cut mid-frame, so the connection writes
// nothing more (not even a close frame) and is closed.
func (c *conn) Write(deadline time.Time, items []delivery.Item) error {
	if err := c.lockBy(deadline); err != nil {
		return err
	}
	defer c.unlock()
	if err := c.writable(); err != nil {
		return err
	}
	return c.writeLocked(deadline, ws.OpText, items)
}

// writeControl writes one control frame, payload at most 125 bytes, under ctx's deadline or
// maxWriteTime from now.
func (c *conn) writeControl(ctx context.Context, op ws.OpCode, payload []byte) error {
	if err := c.lock(ctx); err != nil {
		return err
	}
	defer c.unlock()
	if err := c.writable(); err != nil {
		return err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(maxWriteTime)
	}
	if err := c.writeLocked(dl, op, []delivery.Item{{Body: payload}}); err != nil {
		return err
	}
	// Pings and pongs are mostly what an idle connection writes: the deadline is lifted after
	// them, or its timer would fire for nothing maxWriteTime after every ping. A busy writer's
	// next batch sets it again.
	c.wdl = time.Time{}
	_ = c.nc.SetWriteDeadline(c.wdl)
	return nil
}

// writeLocked writes each item as one final frame of opcode op through a pooled buffer, and
// flushes once. The caller holds wmu and has checked writable.
func (c *conn) writeLocked(deadline time.Time, op ws.OpCode, items []delivery.Item) error {
	if err := c.setWriteDeadline(deadline); err != nil {
		c.werr = err
		return err
	}
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(c.nc)
	var err error
	for i := range items {
		it := &items[i]
		h := ws.Header{Fin: true, OpCode: op, Length: int64(len(it.Head) + len(it.Body))}
		if err = ws.WriteHeaderBuffer(bw, h, c.whdr[:]); err != nil {
			break
		}
		_, _ = bw.Write(it.Head) // a failed write is kept by bw and returned by Flush
		_, _ = bw.Write(it.Body)
	}
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil) // hold no connection in the pool
	writers.Put(bw)
	if err != nil {
		c.werr = err
	}
	return err
}

// writeClose writes the close frame, if nothing has made writing impossible, within deadline.
// It reports whether the frame went out.
func (c *conn) writeClose(deadline time.Time, code ws.StatusCode, reason string) bool {
	if err := c.lockBy(deadline); err != nil {
		return false
	}
	defer c.unlock()
	if c.writable() != nil {
		return false
	}
	c.closeSent = true
	var body []byte
	if code != 0 { // a close frame with no code is answered with none
		body = ws.NewCloseFrameBody(code, reason)
	}
	return c.writeLocked(deadline, ws.OpClose, []delivery.Item{{Body: body}}) == nil
}

// Close closes the connection with code and reason (cut to Herald's form by wire.CloseReason):
// it sends the close frame, waits for the client's own (the closing handshake), then closes the
// socket, each step within closeTimeout. A write stuck on a client that stopped reading does not
// hold it: once closeTimeout has passed the socket is closed, which ends that write. The first
// call does the work; the others wait for it to end.
func (c *conn) Close(code wire.CloseCode, reason string) {
	c.closeOnce.Do(func() {
		if c.writeClose(time.Now().Add(closeTimeout), ws.StatusCode(code), wire.CloseReason(code, reason)) {
			c.awaitClose(time.Now().Add(closeTimeout))
		}
		c.shut()
	})
}

// shut closes the socket, which ends every read and write in progress.
func (c *conn) shut() {
	c.shutOnce.Do(func() {
		_ = c.nc.Close()
		close(c.done)
	})
}

// closeWith sends an error frame, then closes: a client learns why before the close.
func (c *conn) closeWith(e *wire.Error, code wire.CloseCode) {
	if b, err := wire.AppendFrame(nil, e); err == nil {
		_ = c.Write(time.Now().Add(closeTimeout), []delivery.Item{{Kind: delivery.KindControl, Body: b}})
	}
	c.Close(code, e.Message)
}

// ping writes ping number n, whose payload is n, within ctx's deadline or maxWriteTime. It does
// not wait for the pong: answered reports it once it has come.
func (c *conn) ping(ctx context.Context, n uint64) error {
	var p [8]byte
	binary.BigEndian.PutUint64(p[:], n)
	c.pingSent.Store(n)
	return c.writeControl(ctx, ws.OpPing, p[:])
}

// tryPing writes ping number n now, on the caller's goroutine, if it can without waiting: the
// write lock is free, nothing has broken the connection, and the socket takes the whole frame
// in one write(2). It reports whether the ping was dealt with: written, or the connection
// broken by a frame the socket took only part of (the error). false leaves the ping to ping,
// which may wait.
func (c *conn) tryPing(n uint64) (bool, error) {
	if c.raw == nil {
		return false, nil
	}
	select {
	case c.wmu <- struct{}{}:
	default:
		return false, nil
	}
	defer c.unlock()
	if c.writable() != nil {
		return false, nil // ping meets the same error and reports it
	}
	if !c.wdl.IsZero() {
		// A deadline left by the last batch would refuse the write once it has passed.
		c.wdl = time.Time{}
		if err := c.nc.SetWriteDeadline(c.wdl); err != nil {
			return false, nil
		}
	}
	var f [2 + 8]byte // FIN and opcode ping, payload length 8 (unmasked: from the server), n
	f[0], f[1] = 0x80|byte(ws.OpPing), 8
	binary.BigEndian.PutUint64(f[2:], n)
	c.pingSent.Store(n)
	ok, err := heartbeat.WriteNow(c.raw, f[:])
	if err != nil {
		c.werr = fmt.Errorf("a ping %w", err)
	}
	return ok, c.werr
}

// answered is the number of the latest ping whose pong has come, 0 for none.
func (c *conn) answered() uint64 { return c.pongSeq.Load() }

// gotPong takes a pong: it answers ping n when it carries n's payload, and every ping before it
// (a pong may answer only the latest of several pings, RFC 6455 section 5.5.3). A pong for no
// ping sent, or one no ping asked for (RFC 6455 allows them), answers nothing.
func (c *conn) gotPong(p []byte) {
	if len(p) != 8 {
		return
	}
	n := binary.BigEndian.Uint64(p)
	if n == 0 || n > c.pingSent.Load() {
		return
	}
	for {
		old := c.pongSeq.Load()
		if old >= n || c.pongSeq.CompareAndSwap(old, n) {
			return
		}
	}
}

// readMessage reads the next data message of at most limit bytes, answering the control frames
// that come before it or between its fragments. It returns the message's opcode and its
// unmasked payload, which is the caller's. It fails with errFrameTooLarge as soon as a frame's
// header shows the message would be longer than limit, before it reads that frame's payload:
// the rest is left to the closing handshake to discard. It fails with a *framingError for a
// frame RFC 6455 forbids, and with a *peerClosed once the client has closed, after answering
// with a close frame of the same code and closing the socket. After an error it reads nothing
// more.
func (c *conn) readMessage(limit int) (ws.OpCode, []byte, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.rerr != nil {
		return 0, nil, c.rerr
	}
	op, b, err := c.readMessageLocked(limit)
	if err != nil {
		c.rerr = err
	}
	return op, b, err
}

func (c *conn) readMessageLocked(limit int) (ws.OpCode, []byte, error) {
	var (
		op  ws.OpCode
		msg []byte
	)
	for {
		h, err := c.readHeader()
		if err != nil {
			return 0, nil, err
		}
		if h.OpCode.IsControl() {
			if err := c.control(h); err != nil {
				return 0, nil, err
			}
			continue
		}
		if h.OpCode != ws.OpContinuation {
			op = h.OpCode
		}
		c.rfrag = !h.Fin
		if h.Length > int64(limit-len(msg)) {
			c.rleft = h.Length
			return op, nil, errFrameTooLarge
		}
		n := len(msg)
		msg = append(msg, make([]byte, h.Length)...)
		if _, err := io.ReadFull(c.r, msg[n:]); err != nil {
			return 0, nil, err
		}
		ws.Cipher(msg[n:], h.Mask, 0)
		if h.Fin {
			if msg == nil {
				msg = []byte{}
			}
			return op, msg, nil
		}
	}
}

// readHeader reads the next frame header and checks it against RFC 6455 for a server: masked,
// no reserved bits or opcodes (no extension is negotiated), control frames final and short,
// continuations only within a fragmented message.
func (c *conn) readHeader() (ws.Header, error) {
	h, err := ws.ReadHeaderBuffer(c.r, c.rhdr[:])
	if err != nil {
		if errors.Is(err, ws.ErrHeaderLengthMSB) || errors.Is(err, ws.ErrHeaderLengthUnexpected) {
			return h, &framingError{err}
		}
		return h, err
	}
	state := ws.StateServerSide
	if c.rfrag {
		state = state.Set(ws.StateFragmented)
	}
	if err := ws.CheckHeader(h, state); err != nil {
		return h, &framingError{err}
	}
	return h, nil
}

// control reads a control frame's payload and acts on it: a ping is answered with a pong, a
// pong may answer the server's ping, and a close is answered with a close and ends the
// connection (the server closes the socket first, as RFC 6455 section 7.1.1 asks).
func (c *conn) control(h ws.Header) error {
	p := c.rctl[:h.Length]
	if _, err := io.ReadFull(c.r, p); err != nil {
		return err
	}
	ws.Cipher(p, h.Mask, 0)
	switch h.OpCode {
	case ws.OpPing:
		// A pong that cannot be written is no reason to stop reading: the session's writer
		// meets the same failure and ends the connection.
		_ = c.writeControl(context.Background(), ws.OpPong, p)
		return nil
	case ws.OpPong:
		c.gotPong(p)
		return nil
	}
	c.closeRcvd = true
	code, reason, err := closePayload(p)
	if err != nil {
		return err
	}
	// The reply echoes the client's code, as RFC 6455 section 5.5.1 suggests; a close that has
	// begun on the server's side has sent its own already.
	c.writeClose(time.Now().Add(closeTimeout), code, reason)
	c.shut()
	return &peerClosed{code: code, reason: reason}
}

// closePayload parses a close frame's payload: none, or a code a peer may send and a UTF-8
// reason.
func closePayload(p []byte) (ws.StatusCode, string, error) {
	if len(p) == 0 {
		return 0, "", nil
	}
	if len(p) == 1 {
		return 0, "", &framingError{errors.New("a close frame's payload is one byte, too short for its code")}
	}
	code, reason := ws.ParseCloseFrameData(p)
	if !sendable(code) {
		return 0, "", &framingError{fmt.Errorf("close code %d is not one a peer may send", code)}
	}
	if !utf8.ValidString(reason) {
		return 0, "", &framingError{errors.New("a close frame's reason is not UTF-8")}
	}
	return code, reason, nil
}

// sendable reports whether a peer may put code in a close frame: the codes RFC 6455 and the
// IANA registry define, but those that only stand for a missing or failed close, and the
// ranges for libraries and applications. (ws.CheckCloseFrameData refuses 1012-1014, which the
// registry has defined since, and lets codes from 5000 up through.)
func sendable(code ws.StatusCode) bool {
	switch {
	case code >= 1000 && code <= 1014:
		return code != 1004 && code != ws.StatusNoStatusRcvd && code != ws.StatusAbnormalClosure
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// awaitClose is the closing handshake after the server sent its close frame: it reads on,
// discarding what comes, until the client's close frame, the end of the stream or deadline.
// A reader in progress ends by deadline at the latest; the handshake waits for it and then
// reads on from where it stopped.
func (c *conn) awaitClose(deadline time.Time) {
	_ = c.nc.SetReadDeadline(deadline)
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closeRcvd {
		return
	}
	var fe *framingError
	switch {
	case errors.Is(c.rerr, errFrameTooLarge):
	case errors.As(c.rerr, &fe):
		// The stream cannot be read as frames any more. Read it as bytes until the client
		// closes its side, so that the close frame is not lost to a reset of a socket closed
		// with unread data.
		_, _ = io.Copy(io.Discard, c.r)
		return
	case c.rerr != nil:
		return // the stream has ended
	}
	if _, err := io.CopyN(io.Discard, c.r, c.rleft); err != nil {
		return
	}
	c.rleft = 0
	for {
		h, err := c.readHeader()
		if err != nil {
			var fe *framingError
			if errors.As(err, &fe) {
				_, _ = io.Copy(io.Discard, c.r)
			}
			return
		}
		if !h.OpCode.IsControl() {
			c.rfrag = !h.Fin
		}
		if _, err := io.CopyN(io.Discard, c.r, h.Length); err != nil {
			return
		}
		if h.OpCode == ws.OpClose {
			c.closeRcvd = true
			return
		}
	}
}
