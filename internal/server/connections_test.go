package server

import (
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/wire"
)

// TestUnansweredPingsCloseWithPingTimeout: a client that reads but leaves the server's pings
// unanswered is closed with 4003 ping_timeout, whose reaction is to reconnect, and only after
// two pings in a row went unanswered.
func TestUnansweredPingsCloseWithPingTimeout(t *testing.T) {
	cfg := baseConfig()
	cfg.PingInterval = 50 * time.Millisecond
	r := start(t, cfg)
	rc := connectRaw(t, r)
	pings := 0
	for {
		op, p, err := rc.readFrame(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d pings: %v, want a close frame", pings, err)
		}
		if op == opPing {
			pings++
			continue
		}
		if op != opClose {
			t.Fatalf("got opcode %#x %q, want pings then a close", op, p)
		}
		if got := closeCode(p); got != int(wire.ClosePingTimeout) || pings != 2 {
			t.Fatalf("closed with %d %q after %d pings, want %d after 2", got, p[2:], pings, wire.ClosePingTimeout)
		}
		rc.write(clientFrame(nil, opClose, p[:2])) // complete the close handshake
		if got := wire.ClosePingTimeout.Reaction(); got != wire.Reconnect {
			t.Errorf("ping_timeout's reaction is %s, want reconnect", got)
		}
		break
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.srv.Closes()[wire.ClosePingTimeout] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("closes %v, want one ping_timeout", r.srv.Closes())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOneMissedPongIsForgiven: a client that answers every other ping stays connected.
func TestOneMissedPongIsForgiven(t *testing.T) {
	cfg := baseConfig()
	// Long enough that an answered pong is never late, even on a loaded machine.
	cfg.PingInterval = 300 * time.Millisecond
	r := start(t, cfg)
	rc := connectRaw(t, r)
	for pings := 0; pings < 4; {
		op, p, err := rc.readFrame(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d pings: %v", pings, err)
		}
		if op != opPing {
			t.Fatalf("got opcode %#x %q (close code %d), want only pings", op, p, closeCode(p))
		}
		pings++
		if pings%2 == 0 {
			rc.write(clientFrame(nil, opPong, p))
		}
	}
	rc.write(clientFrame(nil, opText, []byte(`{"type":"ping","id":"alive"}`)))
	for {
		op, p, err := rc.readFrame(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the pong: %v", err)
		}
		if op == opPing {
			rc.write(clientFrame(nil, opPong, p))
			continue
		}
		if op != opText {
			t.Fatalf("got opcode %#x %q (close code %d), want the pong", op, p, closeCode(p))
		}
		if m := decodeFrame(t, p); m["type"] != "pong" || m["id"] != "alive" {
			t.Fatalf("got %v, want the pong", m)
		}
		return
	}
}
