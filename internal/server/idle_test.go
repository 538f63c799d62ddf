package server

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestIdleConnectionGoroutines: an idle subscribed connection holds one goroutine in the
// server, whatever carries it: the connection's reader (WebSocket frames, or an SSE stream's
// connection, taken over from net/http, read only to learn that the client went away). The
// session's writer runs only while there is something to write; pings, keepalives, the
// slow-client check and the wait for the session's close are timers and callbacks.
func TestIdleConnectionGoroutines(t *testing.T) {
	const n = 8
	for _, transport := range []string{"ws", "sse"} {
		t.Run(transport, func(t *testing.T) {
			r := start(t, baseConfig())
			before := connectionGoroutines()
			for i := range n {
				if transport == "ws" {
					c, _ := connect(t, r)
					c.send(`{"type":"subscribe","id":"s","sub":"s","channel":"idle/` + transport + `"}`)
					c.expect("subscribed")
					continue
				}
				sr := openSSEReader(t, r.url+"/v1/sse?sub=s&channel=idle/sse", bearerHeader(t, "user-1"))
				sr.next() // welcome
				if ev, _ := sr.next(); ev.frame["type"] != "subscribed" {
					t.Fatalf("stream %d: %v, want subscribed", i, ev.frame)
				}
			}
			// Poll: a handshake's goroutines may still be ending.
			deadline := time.Now().Add(5 * time.Second)
			for {
				got := connectionGoroutines() - before
				if got == n {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d idle connections hold %d goroutines, want %d", n, got, n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// connectionGoroutines counts the server's goroutines serving connections: net/http's for each
// connection, and any running the session or transport code.
func connectionGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, f := range []string{"net/http.(*conn).serve", "net/http.(*connReader).backgroundRead", "internal/session.", "internal/transport/"} {
			if strings.Contains(g, f) {
				count++
				break
			}
		}
	}
	return count
}

// TestConnectSentWithTheUpgrade: a client that sends its connect frame in the same write as the
// upgrade request, before the 101 came back, is served: what net/http read past the request is
// carried into the connection's own read buffer.
func TestConnectSentWithTheUpgrade(t *testing.T) {
	r := start(t, baseConfig())
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	upgrade := "GET /v1/ws HTTP/1.1\r\nHost: herald\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: herald.v1\r\n\r\n"
	connect := `{"type":"connect","id":"c1","token":"` + token(t, "user-1", time.Now().Add(time.Hour)) + `"}`
	if _, err := conn.Write(append([]byte(upgrade), maskedText(connect)...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d, want 101", resp.StatusCode)
	}
	// The first frame: an unmasked text frame holding welcome.
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatalf("no frame after the upgrade: %v", err)
	}
	n := int(hdr[1] & 0x7f)
	if n == 126 {
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			t.Fatal(err)
		}
		n = int(binary.BigEndian.Uint16(ext[:]))
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(br, payload); err != nil {
		t.Fatal(err)
	}
	if hdr[0] != 0x81 || !strings.Contains(string(payload), `"type":"welcome"`) {
		t.Errorf("first frame %#x %s, want a text frame holding welcome", hdr[0], payload)
	}
}

// maskedText is a client's text frame holding s.
func maskedText(s string) []byte {
	mask := [4]byte{1, 2, 3, 4}
	b := []byte{0x81}
	if len(s) < 126 {
		b = append(b, 0x80|byte(len(s)))
	} else {
		b = append(b, 0x80|126, byte(len(s)>>8), byte(len(s)))
	}
	b = append(b, mask[:]...)
	for i := range len(s) {
		b = append(b, s[i]^mask[i%4])
	}
	return b
}
