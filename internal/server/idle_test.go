package server

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestIdleConnectionGoroutines: an idle subscribed connection holds two goroutines in the
// server, whatever carries it. WebSocket: the request's goroutine reading frames, and the
// session's writer. SSE: the request's goroutine running the writer, and net/http's own reader
// of the connection. Pings, keepalives, the slow-client check and the wait for the session's
// close are timers and callbacks, not goroutines.
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
				if got == 2*n {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d idle connections hold %d goroutines, want %d", n, got, 2*n)
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
