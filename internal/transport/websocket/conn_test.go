package websocket

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gobwas/ws"
	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/heraldrt/herald/internal/wire"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// pipe returns a server conn over an in-memory socket, the socket's count of writes, and the
// client's end. Both ends are closed when the test ends.
func pipe(t *testing.T) (*conn, *countingConn, net.Conn) {
	t.Helper()
	server, client := net.Pipe()
	cc := &countingConn{Conn: server}
	c := newConn(cc, bufio.NewReader(strings.NewReader("")))
	t.Cleanup(func() {
		c.shut()
		_ = client.Close()
	})
	return c, cc, client
}

// readAll reads what the server writes until it closes, in the background.
func readAll(client net.Conn) func() []byte {
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(&buf, client)
	}()
	return func() []byte {
		<-done
		return buf.Bytes()
	}
}

// serverFrame is a frame as a client reads it.
type serverFrame struct {
	Op      ws.OpCode
	Payload string
}

// parseFrames splits what the server wrote into frames, which must be final and unmasked.
func parseFrames(t *testing.T, b []byte) []serverFrame {
	t.Helper()
	var out []serverFrame
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		h, err := ws.ReadHeader(r)
		if err != nil {
			t.Fatalf("frame %d: %v", len(out), err)
		}
		if !h.Fin || h.Masked {
			t.Fatalf("frame %d: header %+v, want final and unmasked", len(out), h)
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatalf("frame %d: %v", len(out), err)
		}
		out = append(out, serverFrame{h.OpCode, string(p)})
	}
	return out
}

// TestWriteIsOneWritePerBatch: a batch goes out in one write to the socket, each item one text
// frame of head then body; a batch larger than the buffer goes out in a few.
func TestWriteIsOneWritePerBatch(t *testing.T) {
	big := strings.Repeat("b", writeBufferSize)
	tests := []struct {
		name      string
		items     []delivery.Item
		maxWrites int32
	}{
		{"one message", []delivery.Item{{Body: []byte(`{"a":1}`)}}, 1},
		{"64 small messages", func() []delivery.Item {
			var items []delivery.Item
			for range 64 {
				items = append(items, delivery.Item{Kind: delivery.KindData, Head: []byte(`{"type":"message","sub":"s",`), Body: []byte(strings.Repeat("x", 100) + `}`)})
			}
			return items
		}(), 1},
		{"a message larger than the buffer", []delivery.Item{{Body: []byte(`{"a":1}`)}, {Head: []byte("h"), Body: []byte(big)}, {Body: []byte(`{"b":2}`)}}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, cc, client := pipe(t)
			read := readAll(client)
			if err := c.Write(time.Now().Add(10*time.Second), tt.items); err != nil {
				t.Fatalf("Write: %v", err)
			}
			c.shut()
			got := parseFrames(t, read())
			var want []serverFrame
			for _, it := range tt.items {
				want = append(want, serverFrame{ws.OpText, string(it.Head) + string(it.Body)})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("frames (-want +got):\n%s", diff)
			}
			if n := cc.writes.Load(); n < 1 || n > tt.maxWrites {
				t.Errorf("%d writes to the socket, want 1 to %d", n, tt.maxWrites)
			}
		})
	}
}

// clientFrame encodes one client frame, masked unless unmasked is set.
func clientFrame(op ws.OpCode, fin bool, payload string, unmasked bool) []byte {
	f := ws.NewFrame(op, fin, []byte(payload))
	if !unmasked {
		f = ws.MaskFrame(f)
	}
	var b bytes.Buffer
	if err := ws.WriteFrame(&b, f); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// TestReadMessage: what readMessage makes of the client's frames, and what it writes back.
func TestReadMessage(t *testing.T) {
	const limit = 16
	cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	type result struct {
		Op      ws.OpCode
		Payload string
		Err     string // "" none; else the kind of error
	}
	tests := []struct {
		name    string
		in      []byte
		want    []result      // one per readMessage call, until an error
		written []serverFrame // what the server answered
	}{
		{
			name: "text messages",
			in:   cat(clientFrame(ws.OpText, true, `{"a":1}`, false), clientFrame(ws.OpText, true, ``, false)),
			want: []result{{ws.OpText, `{"a":1}`, ""}, {ws.OpText, ``, ""}},
		},
		{
			name: "a binary message is read whole for the caller to refuse",
			in:   clientFrame(ws.OpBinary, true, "bin", false),
			want: []result{{ws.OpBinary, "bin", ""}},
		},
		{
			name: "fragments with a ping between them",
			in: cat(clientFrame(ws.OpText, false, `{"a":`, false), clientFrame(ws.OpPing, true, "p", false),
				clientFrame(ws.OpContinuation, false, `1`, false), clientFrame(ws.OpContinuation, true, `}`, false)),
			want:    []result{{ws.OpText, `{"a":1}`, ""}},
			written: []serverFrame{{ws.OpPong, "p"}},
		},
		{
			name: "a message at the limit",
			in:   clientFrame(ws.OpText, true, strings.Repeat("a", limit), false),
			want: []result{{ws.OpText, strings.Repeat("a", limit), ""}},
		},
		{
			name: "a frame over the limit",
			in:   clientFrame(ws.OpText, true, strings.Repeat("a", limit+1), false),
			want: []result{{ws.OpText, "", "too large"}},
		},
		{
			name: "fragments over the limit together",
			in:   cat(clientFrame(ws.OpText, false, strings.Repeat("a", limit), false), clientFrame(ws.OpContinuation, true, "b", false)),
			want: []result{{ws.OpText, "", "too large"}},
		},
		{
			name: "an unmasked frame",
			in:   clientFrame(ws.OpText, true, `{}`, true),
			want: []result{{0, "", "framing"}},
		},
		{
			name: "a continuation with nothing to continue",
			in:   clientFrame(ws.OpContinuation, true, `{}`, false),
			want: []result{{0, "", "framing"}},
		},
		{
			name: "a new message inside a fragmented one",
			in:   cat(clientFrame(ws.OpText, false, `{`, false), clientFrame(ws.OpText, true, `}`, false)),
			want: []result{{0, "", "framing"}},
		},
		{
			name: "a fragmented ping",
			in:   clientFrame(ws.OpPing, false, "p", false),
			want: []result{{0, "", "framing"}},
		},
		{
			name: "a reserved opcode",
			in:   clientFrame(ws.OpCode(0x3), true, "", false),
			want: []result{{0, "", "framing"}},
		},
		{
			name: "reserved bits",
			in: func() []byte {
				b := clientFrame(ws.OpText, true, "{}", false)
				b[0] |= 0x40 // RSV1, no extension negotiated
				return b
			}(),
			want: []result{{0, "", "framing"}},
		},
		{
			name:    "the client's close is echoed",
			in:      clientFrame(ws.OpClose, true, string(ws.NewCloseFrameBody(ws.StatusNormalClosure, "bye")), false),
			want:    []result{{0, "", "closed"}},
			written: []serverFrame{{ws.OpClose, string(ws.NewCloseFrameBody(ws.StatusNormalClosure, "bye"))}},
		},
		{
			name:    "a close with no code is answered with none",
			in:      clientFrame(ws.OpClose, true, "", false),
			want:    []result{{0, "", "closed"}},
			written: []serverFrame{{ws.OpClose, ""}},
		},
		{
			name:    "a close with a code the registry added",
			in:      clientFrame(ws.OpClose, true, string(ws.NewCloseFrameBody(1012, "")), false),
			want:    []result{{0, "", "closed"}},
			written: []serverFrame{{ws.OpClose, string(ws.NewCloseFrameBody(1012, ""))}},
		},
		{
			name: "a close with a code past the private range",
			in:   clientFrame(ws.OpClose, true, string(ws.NewCloseFrameBody(5000, "")), false),
			want: []result{{0, "", "framing"}},
		},
		{
			name: "a close with a code no peer may send",
			in:   clientFrame(ws.OpClose, true, string(ws.NewCloseFrameBody(1005, "")), false),
			want: []result{{0, "", "framing"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, client := pipe(t)
			read := readAll(client)
			go func() {
				_, _ = client.Write(tt.in)
			}()
			var got []result
			for range len(tt.want) {
				op, p, err := c.readMessage(limit)
				got = append(got, result{op, string(p), errKind(err)})
				if err != nil {
					break
				}
			}
			c.shut()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.written, parseFrames(t, read())); diff != "" {
				t.Errorf("written (-want +got):\n%s", diff)
			}
		})
	}
}

func errKind(err error) string {
	var fe *framingError
	var pc *peerClosed
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errFrameTooLarge):
		return "too large"
	case errors.As(err, &fe):
		return "framing"
	case errors.As(err, &pc):
		return "closed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrClosedPipe):
		return "eof"
	}
	return err.Error()
}

// TestCloseHandshake: Close sends its close frame with Herald's reason, discards what the client
// still sends, including the rest of a frame too large to read, until the client's close frame,
// and then closes the socket.
func TestCloseHandshake(t *testing.T) {
	c, _, client := pipe(t)
	go func() {
		_, _ = client.Write(clientFrame(ws.OpText, true, strings.Repeat("a", 100), false))
	}()
	if _, _, err := c.readMessage(10); !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("readMessage: %v, want errFrameTooLarge", err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Close(wire.CloseFrameTooLarge, "too big")
	}()
	// The client reads the close frame, while the server is still to read the rest of the
	// frame too large; then it sends more, and its own close.
	br := bufio.NewReader(client)
	h, err := ws.ReadHeader(br)
	if err != nil || h.OpCode != ws.OpClose {
		t.Fatalf("read %+v, %v; want the close frame", h, err)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatal(err)
	}
	code, reason := ws.ParseCloseFrameData(p)
	if code != ws.StatusCode(wire.CloseFrameTooLarge) || reason != "frame_too_large: too big" {
		t.Errorf("close frame %d %q, want 1009 %q", code, reason, "frame_too_large: too big")
	}
	if _, err := client.Write(clientFrame(ws.OpText, true, "more", false)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write(clientFrame(ws.OpClose, true, string(p), false)); err != nil {
		t.Fatal(err)
	}
	<-closed
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the handshake the client reads %v, want EOF: the server closed the socket", err)
	}
}

// TestCloseIsNotHeldByAStuckWrite: a write to a client that stopped reading does not hold the
// close for longer than closeTimeout: Close ends, and so does the write. On a fake clock.
func TestCloseIsNotHeldByAStuckWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, _ := pipe(t) // the client never reads
		var werr error
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			werr = c.Write(time.Now().Add(time.Hour), []delivery.Item{{Body: []byte(`{}`)}})
		}()
		synctest.Wait() // the write is stuck, holding the lock
		start := time.Now()
		c.Close(wire.CloseTooSlow, "stuck")
		if took := time.Since(start); took > closeTimeout {
			t.Errorf("Close took %s, want at most closeTimeout (%s)", took, closeTimeout)
		}
		<-wrote
		if werr == nil {
			t.Error("the stuck write succeeded, want it failed by the close")
		}
		if err := c.Write(time.Now().Add(time.Second), []delivery.Item{{Body: []byte(`{}`)}}); err == nil {
			t.Error("a write after the close succeeded")
		}
	})
}

// TestPing: a ping is answered by the pong that carries its payload, not by an unsolicited
// pong or one for a ping never sent, and a ping fails once the connection closes.
func TestPing(t *testing.T) {
	c, _, client := pipe(t)
	pings := make(chan []byte, 4)
	go func() {
		for {
			h, err := ws.ReadHeader(client)
			if err != nil {
				return
			}
			p := make([]byte, h.Length)
			if _, err := io.ReadFull(client, p); err != nil {
				return
			}
			if h.OpCode == ws.OpPing {
				pings <- p
			}
		}
	}()
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			if _, _, err := c.readMessage(64); err != nil {
				return
			}
		}
	}()
	if err := c.ping(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	p := <-pings
	// An unsolicited pong and one for a ping not sent answer nothing; then a text message, so
	// that once the reader has returned it, the pongs before it have been taken.
	for _, pong := range [][]byte{[]byte("x"), {0, 0, 0, 0, 0, 0, 0, 9}} {
		if _, err := client.Write(clientFrame(ws.OpPong, true, string(pong), false)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Write(clientFrame(ws.OpPong, true, string(p), false)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); c.answered() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("answered = %d, want 1 once its pong came", c.answered())
		}
	}
	if _, err := client.Write(clientFrame(ws.OpPong, true, string([]byte{0, 0, 0, 0, 0, 0, 0, 9}), false)); err != nil {
		t.Fatal(err)
	}
	c.shut()
	<-read
	if c.answered() != 1 {
		t.Errorf("answered = %d after a pong for a ping never sent, want 1", c.answered())
	}
	if err := c.ping(t.Context(), 2); err == nil {
		t.Error("a ping succeeded on a closed connection")
	}
}

// FuzzReadMessage: no client bytes make the reader panic, return a message over the limit, or
// read on after it failed.
func FuzzReadMessage(f *testing.F) {
	f.Add(clientFrame(ws.OpText, true, `{"type":"ping","id":"1"}`, false))
	f.Add(append(clientFrame(ws.OpText, false, `{"a":`, false), clientFrame(ws.OpContinuation, true, `1}`, false)...))
	f.Add(clientFrame(ws.OpPing, true, "p", false))
	f.Add(clientFrame(ws.OpClose, true, "\x03\xe8", false))
	f.Add(clientFrame(ws.OpText, true, "x", true))
	f.Fuzz(func(t *testing.T, in []byte) {
		const limit = 64
		c := newConn(&fuzzConn{r: bytes.NewReader(in)}, bufio.NewReader(strings.NewReader("")))
		for {
			_, p, err := c.readMessage(limit)
			if len(p) > limit {
				t.Fatalf("message of %d bytes, limit %d", len(p), limit)
			}
			if err != nil {
				if _, _, again := c.readMessage(limit); again == nil {
					t.Fatal("readMessage read on after an error")
				}
				return
			}
		}
	})
}

// fuzzConn reads from r and discards what is written.
type fuzzConn struct {
	net.Conn
	r io.Reader
}

func (c *fuzzConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }

// tcpConn is a conn over a real loopback TCP connection, which has a descriptor for tryPing,
// and the client's end.
func tcpConn(t *testing.T) (*conn, *net.TCPConn) {
	server, client := testenv.TCPPair(t)
	c := newConn(server, bufio.NewReader(server))
	t.Cleanup(c.shut)
	return c, client
}

// TestTryPing: a ping to a connection that takes it is written at once, as a ping frame
// carrying its number, even past a deadline an earlier batch left; one that would wait (the
// write lock held, or a socket with no room) is left to ping, never claimed as written.
func TestTryPing(t *testing.T) {
	c, client := tcpConn(t)
	// A batch's deadline, long passed.
	c.wdl = time.Now().Add(-time.Minute)
	if err := c.nc.SetWriteDeadline(c.wdl); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.tryPing(7); !ok || err != nil {
		t.Fatalf("tryPing on an idle connection = %v, %v; want it written", ok, err)
	}
	h, err := ws.ReadHeader(client)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(client, p); err != nil {
		t.Fatal(err)
	}
	if h.OpCode != ws.OpPing || !h.Fin || h.Masked || binary.BigEndian.Uint64(p) != 7 || c.pingSent.Load() != 7 {
		t.Fatalf("frame %+v payload %x, pingSent %d: want a final unmasked ping carrying 7", h, p, c.pingSent.Load())
	}

	c.wmu <- struct{}{} // a batch being written
	if ok, _ := c.tryPing(8); ok {
		t.Fatal("tryPing claimed a ping while the write lock was held")
	}
	c.unlock()

	// The client reads nothing more: fill the socket until a write would wait.
	_ = client.SetReadBuffer(4096)
	chunk := make([]byte, 64<<10)
	for {
		c.wdl = time.Now().Add(50 * time.Millisecond) // tryPing lifts it, so the write is tried
		if err := c.nc.SetWriteDeadline(c.wdl); err != nil {
			t.Fatal(err)
		}
		if _, err := c.nc.Write(chunk); err != nil {
			break
		}
	}
	if ok, err := c.tryPing(9); ok && err == nil {
		t.Fatal("tryPing claimed a ping written to a socket with no room")
	}
}
