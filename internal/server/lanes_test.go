package server

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/heraldrt/herald/internal/delivery"
)

// offsetOf reads a message's channel offset.
func offsetOf(t *testing.T, m map[string]any) uint64 {
	t.Helper()
	pos, _ := m["pos"].(map[string]any)
	if pos == nil {
		if s, ok := m["pos"].(string); ok {
			_, off, _ := strings.Cut(s, ":")
			n, err := strconv.ParseUint(off, 10, 64)
			if err != nil {
				t.Fatalf("pos %q: %v", s, err)
			}
			return n
		}
		t.Fatalf("frame %v has no pos", m)
	}
	return uint64(pos["offset"].(float64))
}

func rangeOf(t *testing.T, m map[string]any, key string) uint64 {
	t.Helper()
	v, ok := m[key]
	if !ok {
		t.Fatalf("resync %v has no %s", m, key)
	}
	return offsetOf(t, map[string]any{"pos": v})
}

// slowConfig has small lanes so a client that stops reading overflows them quickly.
func slowConfig() Config {
	cfg := baseConfig()
	cfg.Session.Lanes = delivery.Config{MaxDataFrames: 64, MaxDataBytes: 1 << 20}
	cfg.Session.SlowTimeout = time.Hour
	// A client that stops reading cannot answer pings either; these tests are about lanes.
	cfg.PingInterval = time.Hour
	return cfg
}

// TestSlowReaderIsToldEveryGap: a client stops reading while 10,000 messages are
// published. Per subscription it gets every message up to an overflow, one resync naming
// exactly the lost range, then the messages after it, with nothing from inside a range it was
// told was lost. The kernel's socket buffers absorb part of the burst and the writer drains
// into them as they empty, so a subscription may overflow more than once: each overflow is one
// resync, and every offset is either delivered or inside exactly one resync.
func TestSlowReaderIsToldEveryGap(t *testing.T) {
	r := start(t, slowConfig())
	c, _ := connect(t, r)
	for _, sub := range []string{"a", "b"} {
		c.send(fmt.Sprintf(`{"type":"subscribe","id":"%s","sub":"%s","channel":"load/%s"}`, sub, sub, sub))
		c.expect("subscribed")
	}
	payload := `"` + strings.Repeat("x", 1000) + `"`
	const n = 5000 // per channel: 10,000 in all
	for i := 0; i < n; i++ {
		publish(t, r, "load/a", payload)
		publish(t, r, "load/b", payload)
	}
	// Both subscriptions overflowed: what follows must name the gap exactly.
	st := r.srv.totalStats()
	if st.LostLaneFull == 0 {
		t.Fatalf("nothing was lost (stats %+v): the test did not overflow the lanes", st)
	}
	// Reading again: per subscription, data 1..k, one resync k+1..m, then m+1.. up to n.
	publishedAfter := 20
	seen := map[string][]string{}
	next := map[string]uint64{"a": 1, "b": 1}
	markers := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	sentTail := false
	for next["a"] <= uint64(n+publishedAfter) || next["b"] <= uint64(n+publishedAfter) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out; next expected %v, markers %v", next, markers)
		}
		m, err := c.read(5 * time.Second)
		if err != nil {
			if !sentTail {
				// The lanes drained: publish the tail that must arrive after the gap.
				for i := 0; i < publishedAfter; i++ {
					publish(t, r, "load/a", `1`)
					publish(t, r, "load/b", `1`)
				}
				sentTail = true
				continue
			}
			t.Fatalf("read: %v; next expected %v", err, next)
		}
		sub, _ := m["sub"].(string)
		switch m["type"] {
		case "message":
			if off := offsetOf(t, m); off != next[sub] {
				t.Fatalf("sub %s: message offset %d, want %d (a gap with no marker, or a frame from inside a reported gap)", sub, off, next[sub])
			}
			next[sub]++
			seen[sub] = append(seen[sub], "m")
		case "resync":
			markers[sub]++
			first, last := rangeOf(t, m, "first"), rangeOf(t, m, "last")
			if first != next[sub] || last < first || uint64(m["lost"].(float64)) != last-first+1 || m["reason"] != "lane_full" {
				t.Fatalf("sub %s: resync %v, want first=%d, last>=first, lost=last-first+1, reason lane_full", sub, m, next[sub])
			}
			next[sub] = last + 1
		default:
			t.Fatalf("unexpected frame %v", m)
		}
		if !sentTail && next["a"] > uint64(n) && next["b"] > uint64(n) {
			for i := 0; i < publishedAfter; i++ {
				publish(t, r, "load/a", `1`)
				publish(t, r, "load/b", `1`)
			}
			sentTail = true
		}
	}
	for _, sub := range []string{"a", "b"} {
		if markers[sub] == 0 {
			t.Errorf("sub %s got no resync, though its lane overflowed", sub)
		}
	}
}

// TestClientThatNeverReadsIsClosedTooSlow: past the slow timeout, the connection is closed
// with the too-slow code, after the data and the marker it could still be given.
func TestClientThatNeverReadsIsClosedTooSlow(t *testing.T) {
	cfg := slowConfig()
	cfg.Session.SlowTimeout = 300 * time.Millisecond
	r := start(t, cfg)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"a","sub":"a","channel":"load/a"}`)
	c.expect("subscribed")
	payload := `"` + strings.Repeat("x", 1000) + `"`
	for i := 0; i < 10000; i++ {
		publish(t, r, "load/a", payload)
		if i%500 == 0 && r.srv.Sessions() == 0 {
			break // already closed as too slow
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.srv.Sessions() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session was not closed as too slow")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.srv.Closes()[4000]; n != 1 {
		t.Errorf("sessions closed as too slow: %d, want 1 (closes %v)", n, r.srv.Closes())
	}
	// Whatever the client reads afterwards is contiguous up to a marker; the close frame itself
	// may not fit in a socket the client never drained, so the end may be a bare EOF.
	var next uint64 = 1
	for {
		m, err := c.read(10 * time.Second)
		if err != nil {
			if got := websocket.CloseStatus(err); got != -1 && got != 4000 {
				t.Fatalf("connection ended with %v, want close 4000 too_slow or a dropped connection", err)
			}
			return
		}
		switch m["type"] {
		case "message":
			if off := offsetOf(t, m); off != next {
				t.Fatalf("message offset %d, want %d", off, next)
			}
			next++
		case "resync":
			next = rangeOf(t, m, "last") + 1
		}
	}
}
