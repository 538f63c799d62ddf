package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/heraldrt/herald/internal/delivery"
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

// pipelineConfig has a small control lane, so a burst of requests outgrows it at once, and no
// slow or ping limit that could end a connection while a test holds its reading back.
func pipelineConfig() Config {
	cfg := baseConfig()
	cfg.Session.Lanes = delivery.Config{MaxDataFrames: 64, MaxDataBytes: 1 << 20, MaxControlFrames: 16}
	cfg.Session.SlowTimeout = time.Hour
	cfg.PingInterval = time.Hour
	return cfg
}

// fillPipe publishes to channel until the session's writer is stuck on a client that is not
// reading: its data lane overflowed, which it only does once the socket takes no more.
func fillPipe(t *testing.T, r *running, channel string) {
	t.Helper()
	payload := `"` + strings.Repeat("x", 16<<10) + `"`
	for i := 0; r.srv.totalStats().LostLaneFull == 0; i++ {
		if i == 10000 {
			t.Fatalf("10,000 publications did not fill the pipe (stats %+v)", r.srv.totalStats())
		}
		publish(t, r, channel, payload)
	}
}

// TestPipelinedRequestsAllGetReplies: a client that sends 1,000 requests in one write and then
// reads is read only as fast as it takes the replies, and gets every one of them, in order,
// whether it reads as they come or only once the server's writer had been stuck on it.
func TestPipelinedRequestsAllGetReplies(t *testing.T) {
	for _, tt := range []struct {
		name     string
		fillPipe bool
	}{
		{"reading as they come", false},
		{"reading after a full pipe", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := start(t, pipelineConfig())
			rc := connectRaw(t, r)
			rc.write(clientFrame(nil, opText, []byte(`{"type":"subscribe","id":"s","sub":"load","channel":"load"}`)))
			rc.expect("subscribed")
			if tt.fillPipe {
				fillPipe(t, r, "load")
			}
			const n = 1000
			var burst []byte
			for i := range n {
				burst = clientFrame(burst, opText, fmt.Appendf(nil, `{"type":"ping","id":"p%d"}`, i))
			}
			wrote := make(chan error, 1)
			go func() {
				_ = rc.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				_, err := rc.c.Write(burst)
				wrote <- err
			}()
			next := 0
			for next < n {
				op, p, err := rc.readFrame(30 * time.Second)
				if err != nil {
					t.Fatalf("after %d pongs: %v (closes %v)", next, err, r.srv.Closes())
				}
				if op != opText {
					t.Fatalf("after %d pongs: opcode %#x %q (close code %d), want every pong", next, op, p, closeCode(p))
				}
				m := decodeFrame(t, p)
				switch m["type"] {
				case "message", "resync":
				case "pong":
					if want := fmt.Sprintf("p%d", next); m["id"] != want {
						t.Fatalf("pong %v, want id %s", m, want)
					}
					next++
				default:
					t.Fatalf("after %d pongs: %v", next, m)
				}
			}
			if err := <-wrote; err != nil {
				t.Fatalf("write the burst: %v", err)
			}
			if c := r.srv.Closes(); len(c) != 0 {
				t.Errorf("closes %v, want none", c)
			}
		})
	}
}

// sseReader reads an SSE stream one event at a time, only when asked: between reads it leaves
// the stream unread, as a client that stopped reading would.
type sseReader struct {
	t    *testing.T
	ask  chan struct{}
	got  chan sseEvent
	stop context.CancelFunc
}

func openSSEReader(t *testing.T, url string, header http.Header) *sseReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header = header.Clone()
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		resp.Body.Close()
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	sr := &sseReader{t: t, ask: make(chan struct{}), got: make(chan sseEvent), stop: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(sr.got)
		br := bufio.NewReaderSize(resp.Body, 1<<20)
		for range sr.ask {
			var ev sseEvent
			for ev.frame == nil {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimSuffix(line, "\n")
				switch {
				case strings.HasPrefix(line, "id: "):
					ev.id = line[4:]
				case strings.HasPrefix(line, "data: "):
					if err := json.Unmarshal([]byte(line[6:]), &ev.frame); err != nil {
						ev.frame = map[string]any{"type": "invalid JSON: " + line}
					}
				}
			}
			sr.got <- ev
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		close(sr.ask)
		<-done
	})
	return sr
}

// next reads the next event; ok is false when the stream ended.
func (sr *sseReader) next() (ev sseEvent, ok bool) {
	sr.t.Helper()
	select {
	case sr.ask <- struct{}{}:
	case <-time.After(30 * time.Second):
		sr.t.Fatal("the stream reader is stuck")
	}
	select {
	case ev, ok = <-sr.got:
		return ev, ok
	case <-time.After(30 * time.Second):
		sr.t.Fatal("no event within 30s")
	}
	return sseEvent{}, false
}

// TestSSECommandsBeyondUnreadRepliesAreRateLimited: SSE commands that arrive while the stream's
// replies pile up unread are refused 429 rate_limited; the stream does not end, and every
// command taken gets its reply.
func TestSSECommandsBeyondUnreadRepliesAreRateLimited(t *testing.T) {
	r := start(t, pipelineConfig())
	h := bearerHeader(t, "user-1")
	sr := openSSEReader(t, r.url+"/v1/sse?sub=load&channel=load", h)
	w, _ := sr.next()
	session, _ := w.frame["session"].(string)
	limits, _ := w.frame["limits"].(map[string]any)
	if session == "" || limits["max_unread_replies"] != float64(12) {
		t.Fatalf("welcome %v, want a session and limits.max_unread_replies 12 (a lane of 16, less room for one request's replies)", w.frame)
	}
	if ev, _ := sr.next(); ev.frame["type"] != "subscribed" {
		t.Fatalf("got %v, want subscribed", ev.frame)
	}
	fillPipe(t, r, "load")

	const n, workers = 1000, 8
	cmd := r.url + "/v1/sse/" + session
	tok := strings.TrimPrefix(h.Get("Authorization"), "Bearer ")
	type answer struct {
		id   string
		code int
		body map[string]any
	}
	answers := make(chan answer, n)
	ids := make(chan string, n)
	for i := range n {
		ids <- fmt.Sprintf("p%d", i)
	}
	close(ids)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				a := answer{id: id}
				req, _ := http.NewRequest(http.MethodPost, cmd, strings.NewReader(`{"type":"ping","id":"`+id+`"}`))
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					a.body = map[string]any{"error": err.Error()}
				} else {
					a.code = resp.StatusCode
					_ = json.NewDecoder(resp.Body).Decode(&a.body)
					resp.Body.Close()
				}
				answers <- a
			}
		}()
	}
	wg.Wait()
	close(answers)
	taken := map[string]bool{}
	limited := 0
	for a := range answers {
		switch {
		case a.code == http.StatusAccepted:
			taken[a.id] = true
		case a.code == http.StatusTooManyRequests && a.body["code"] == "rate_limited" && a.body["id"] == a.id:
			limited++
		default:
			t.Fatalf("command %s answered %d %v, want 202, or 429 rate_limited", a.id, a.code, a.body)
		}
	}
	if len(taken) == 0 || limited == 0 {
		t.Fatalf("%d commands taken, %d rate limited: want some of each", len(taken), limited)
	}
	for len(taken) > 0 {
		ev, ok := sr.next()
		if !ok {
			t.Fatalf("the stream ended with %d pongs still owed (closes %v)", len(taken), r.srv.Closes())
		}
		switch ev.frame["type"] {
		case "message", "resync":
		case "pong":
			id, _ := ev.frame["id"].(string)
			if !taken[id] {
				t.Fatalf("pong %v answers no command that was taken", ev.frame)
			}
			delete(taken, id)
		default:
			t.Fatalf("got %v with %d pongs still owed", ev.frame, len(taken))
		}
	}
	// The stream lives on: a command sent now is taken and answered.
	if code, body := postJSON(t, cmd, tok, `{"type":"ping","id":"after"}`); code != http.StatusAccepted {
		t.Fatalf("a command after the replies were read: %d %v, want 202", code, body)
	}
	for {
		ev, ok := sr.next()
		if !ok {
			t.Fatal("the stream ended before the last pong")
		}
		if ev.frame["type"] == "pong" && ev.frame["id"] == "after" {
			break
		}
		if ev.frame["type"] != "message" && ev.frame["type"] != "resync" {
			t.Fatalf("got %v, want the last pong", ev.frame)
		}
	}
}

// TestShutdownClosesConnectionsBeforeConnect: at shutdown, a socket that has not sent connect
// yet is told to reconnect elsewhere (1012) like a connected one, not dropped.
func TestShutdownClosesConnectionsBeforeConnect(t *testing.T) {
	r := start(t, baseConfig())
	pending := dial(t, r)
	live, _ := connect(t, r)
	go r.stop()
	for name, c := range map[string]*client{"before connect": pending, "connected": live} {
		t.Run(name, func(t *testing.T) { c.expectClose(websocket.StatusServiceRestart) })
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		r.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
}
