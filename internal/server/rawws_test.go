package server

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// rawConn is a WebSocket client written by hand on a TCP connection, for what a library
// client does not let a test do: leave pings unanswered while reading, or put a thousand
// frames in one write.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	opText  = 0x1
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// dialRaw opens a WebSocket to the server's /v1/ws with the herald.v1 subprotocol.
func dialRaw(t *testing.T, r *running) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", r.srv.Addr())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var key [16]byte
	_, _ = rand.Read(key[:])
	fmt.Fprintf(c, "GET /v1/ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: herald.v1\r\n\r\n",
		r.srv.Addr(), base64.StdEncoding.EncodeToString(key[:]))
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d, want 101", resp.StatusCode)
	}
	return &rawConn{t: t, c: c, br: br}
}

// connectRaw dials and completes the connect handshake with a valid token.
func connectRaw(t *testing.T, r *running) *rawConn {
	t.Helper()
	rc := dialRaw(t, r)
	rc.write(clientFrame(nil, opText, []byte(`{"type":"connect","id":"c1","token":"`+token(t, "user-1", time.Now().Add(time.Hour))+`"}`)))
	rc.expect("welcome")
	return rc
}

// clientFrame appends one client frame. Client frames must be masked; a zero mask key is
// valid and leaves the payload as it is.
func clientFrame(dst []byte, op byte, payload []byte) []byte {
	dst = append(dst, 0x80|op)
	switch n := len(payload); {
	case n < 126:
		dst = append(dst, 0x80|byte(n))
	case n <= 0xFFFF:
		dst = append(dst, 0x80|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, 0x80|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	dst = append(dst, 0, 0, 0, 0)
	return append(dst, payload...)
}

// write sends b, any number of frames, in one write.
func (rc *rawConn) write(b []byte) {
	rc.t.Helper()
	_ = rc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// readFrame reads one server frame: its opcode and payload. The server sends every message
// as one unfragmented, unmasked frame.
func (rc *rawConn) readFrame(timeout time.Duration) (byte, []byte, error) {
	_ = rc.c.SetReadDeadline(time.Now().Add(timeout))
	var h [2]byte
	if _, err := io.ReadFull(rc.br, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0]&0x80 == 0 || h[1]&0x80 != 0 {
		return 0, nil, fmt.Errorf("frame header %x: want a final, unmasked frame", h)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(rc.br, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(rc.br, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(rc.br, p); err != nil {
		return 0, nil, err
	}
	return h[0] & 0x0F, p, nil
}

// expect reads the next frame, which must be a text frame of type typ.
func (rc *rawConn) expect(typ string) map[string]any {
	rc.t.Helper()
	op, p, err := rc.readFrame(5 * time.Second)
	if err != nil {
		rc.t.Fatalf("waiting for %s: %v", typ, err)
	}
	if op != opText {
		rc.t.Fatalf("got opcode %#x %q, want a %s frame", op, p, typ)
	}
	m := decodeFrame(rc.t, p)
	if m["type"] != typ {
		rc.t.Fatalf("got %v, want a %s frame", m, typ)
	}
	return m
}

func decodeFrame(t *testing.T, p []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		t.Fatalf("server sent invalid JSON %q: %v", p, err)
	}
	return m
}

// closeCode is the status code of a close frame's payload, 1005 when it has none.
func closeCode(p []byte) int {
	if len(p) < 2 {
		return 1005
	}
	return int(binary.BigEndian.Uint16(p))
}
