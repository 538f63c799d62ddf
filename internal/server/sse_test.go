package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// sseEvent is one event of a stream.
type sseEvent struct {
	id    string
	frame map[string]any
}

type sseClient struct {
	t      *testing.T
	events chan sseEvent
	cancel context.CancelFunc
	resp   *http.Response
}

func openSSE(t *testing.T, url string, header http.Header) (*sseClient, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		return nil, resp
	}
	c := &sseClient{t: t, events: make(chan sseEvent, 1024), cancel: cancel, resp: resp}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.frame != nil {
					c.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(line[6:]), &ev.frame); err != nil {
					t.Errorf("event data %q is not JSON", line)
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return c, resp
}

func (c *sseClient) next(typ string) sseEvent {
	c.t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			c.t.Fatalf("stream ended waiting for %s", typ)
		}
		if ev.frame["type"] != typ {
			c.t.Fatalf("got %v, want %s", ev.frame, typ)
		}
		return ev
	case <-time.After(5 * time.Second):
		c.t.Fatalf("no %s event within 5s", typ)
	}
	return sseEvent{}
}

func bearerHeader(t *testing.T, sub string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token(t, sub, time.Now().Add(time.Hour))}}
}

func TestSSEStreamWithURLSubscriptionAndCommands(t *testing.T) {
	r := start(t, baseConfig())
	c, resp := openSSE(t, r.url+"/v1/sse?sub=feed&channel=news/**", bearerHeader(t, "user-1"))
	if c == nil {
		t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
	}
	if ct := c.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	w := c.next("welcome")
	session, _ := w.frame["session"].(string)
	if session == "" {
		t.Fatalf("welcome %v has no session", w.frame)
	}
	c.next("subscribed")
	publish(t, r, "news/today", `{"h":1}`)
	ev := c.next("message")
	if !strings.HasPrefix(ev.id, "feed ") || ev.frame["sub"] != "feed" {
		t.Errorf("message event id %q frame %v, want id \"feed <pos>\"", ev.id, ev.frame)
	}

	cmd := r.url + "/v1/sse/" + session
	tok := token(t, "user-1", time.Now().Add(time.Hour))
	if code, _ := postJSON(t, cmd, tok, `{"type":"subscribe","id":"s2","sub":"other","channel":"sports"}`); code != 202 {
		t.Fatalf("command: %d, want 202", code)
	}
	if ev := c.next("subscribed"); ev.frame["id"] != "s2" || ev.id != "" {
		t.Errorf("subscribed %v id %q: want id s2 and no event id (not the URL subscription)", ev.frame, ev.id)
	}
	publish(t, r, "sports", `2`)
	if ev := c.next("message"); ev.id != "" || ev.frame["sub"] != "other" {
		t.Errorf("other subscription's message: id %q frame %v", ev.id, ev.frame)
	}
	if code, _ := postJSON(t, cmd, tok, `{"type":"ping","id":"p"}`); code != 202 {
		t.Fatalf("ping command: %d", code)
	}
	c.next("pong")

	t.Run("unknown session", func(t *testing.T) {
		if code, m := postJSON(t, r.url+"/v1/sse/nope", tok, `{"type":"ping","id":"p"}`); code != 404 || m["code"] != "not_found" {
			t.Errorf("got %d %v, want 404 not_found", code, m)
		}
	})
	t.Run("another identity", func(t *testing.T) {
		other := token(t, "user-2", time.Now().Add(time.Hour))
		if code, m := postJSON(t, cmd, other, `{"type":"ping","id":"p"}`); code != 403 || m["code"] != "forbidden" {
			t.Errorf("got %d %v, want 403 forbidden", code, m)
		}
	})
	t.Run("bad frame", func(t *testing.T) {
		if code, m := postJSON(t, cmd, tok, `{"type":"subscribe"}`); code != 400 || m["code"] != "bad_frame" {
			t.Errorf("got %d %v, want 400 bad_frame", code, m)
		}
	})
}

func TestSSERefusals(t *testing.T) {
	r := start(t, baseConfig())
	tests := []struct {
		name   string
		url    string
		header http.Header
		status int
		code   string
	}{
		{"no token", "/v1/sse", nil, 401, "unauthorized"},
		{"bad subscription", "/v1/sse?sub=feed", bearerHeader(t, "u"), 400, "bad_frame"},
		{"bad Last-Event-ID", "/v1/sse?sub=feed&channel=x", http.Header{"Authorization": bearerHeader(t, "u")["Authorization"], "Last-Event-Id": {"garbage"}}, 400, "bad_frame"},
		{"Last-Event-ID without a URL subscription", "/v1/sse", http.Header{"Authorization": bearerHeader(t, "u")["Authorization"], "Last-Event-Id": {"feed 16/B374D848.3"}}, 400, "bad_position"},
		{"garbled last_event_id without a URL subscription", "/v1/sse?last_event_id=garbage", bearerHeader(t, "u"), 400, "bad_frame"},
		{"token not valid yet", "/v1/sse", http.Header{"Authorization": {"Bearer " + tokenClaims(t, jwt.MapClaims{"sub": "u", "exp": time.Now().Add(2 * time.Hour).Unix(), "nbf": time.Now().Add(time.Hour).Unix()})}}, 401, "token_expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp := openSSE(t, r.url+tt.url, tt.header)
			if c != nil {
				t.Fatalf("stream opened, want %d", tt.status)
			}
			defer resp.Body.Close()
			var body struct{ Code string }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("body: %v", err)
			}
			if resp.StatusCode != tt.status || body.Code != tt.code {
				t.Errorf("status %d, code %q, want %d, %q", resp.StatusCode, body.Code, tt.status, tt.code)
			}
		})
	}
}

// TestSSELastEventIDResumes: an EventSource that reconnects sends the id of the last event it
// saw, and its URL subscription resumes right after it, as from does: within the channel's
// history it is replayed what it missed (each event with its id), then live; beyond it, a
// resync says what it missed.
func TestSSELastEventIDResumes(t *testing.T) {
	r := start(t, historyConfig(3))
	first := publish(t, r, "feed", `1`)
	publish(t, r, "feed", `2`)
	publish(t, r, "feed", `3`)
	pos := first["pos"].(map[string]any)
	epoch := pos["epoch"].(string)
	at := func(off int) string { return fmt.Sprintf("%s:%d", epoch, off) }
	open := func(t *testing.T, last string) *sseClient {
		h := bearerHeader(t, "u")
		h.Set("Last-Event-ID", last)
		c, resp := openSSE(t, r.url+"/v1/sse?sub=feed&channel=feed", h)
		if c == nil {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
		c.next("welcome")
		if sev := c.next("subscribed"); sev.id != last {
			t.Errorf("subscribed event id %q, want %q: a reconnect must resume where the stream starts", sev.id, last)
		}
		return c
	}

	t.Run("within the history", func(t *testing.T) {
		c := open(t, "feed "+at(1))
		for _, off := range []int{2, 3} {
			if ev := c.next("message"); ev.id != "feed "+at(off) || fmt.Sprint(ev.frame["data"]) != fmt.Sprint(off) {
				t.Errorf("replayed event id %q data %v, want id %q and data %d", ev.id, ev.frame["data"], "feed "+at(off), off)
			}
		}
		publish(t, r, "feed", `4`)
		if ev := c.next("message"); ev.id != "feed "+at(4) {
			t.Errorf("live event id %q, want %q", ev.id, "feed "+at(4))
		}
	})
	t.Run("beyond the history", func(t *testing.T) {
		// The history holds 2..4 now: from 0, the first is gone.
		c := open(t, "feed "+at(0))
		ev := c.next("resync")
		if ev.frame["reason"] != "history_expired" || ev.frame["lost"] != float64(4) {
			t.Errorf("resync %v, want 4 lost, history_expired", ev.frame)
		}
		if ev.id != "feed "+at(4) {
			t.Errorf("resync event id %q, want the URL subscription's and its last position, %q", ev.id, "feed "+at(4))
		}
		publish(t, r, "feed", `5`)
		if ev := c.next("message"); ev.id != "feed "+at(5) {
			t.Errorf("live event id %q after the resync, want %q", ev.id, "feed "+at(5))
		}
	})
}

// TestSSELastEventIDResumesEverySubscription: with ended streams kept (limits.sse_resume_window),
// every subscription's frames carry an id naming the stream and each live subscription's last
// position; a reconnect with the last id received takes up the URL subscription and every one
// added by command, each after its own position, so nothing published meanwhile is lost or
// repeated. A subscription ended by unsubscribe is not taken up; another identity, or a stream
// not kept, is told not_found for each; a pattern is told it cannot resume.
func TestSSELastEventIDResumesEverySubscription(t *testing.T) {
	cfg := historyConfig(10)
	cfg.SSEResumeWindow = time.Minute
	r := start(t, cfg)
	tok := token(t, "u", time.Now().Add(time.Hour))

	c, resp := openSSE(t, r.url+"/v1/sse?sub=feed&channel=feed", bearerHeader(t, "u"))
	if c == nil {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	session := c.next("welcome").frame["session"].(string)
	if ev := c.next("subscribed"); !strings.HasPrefix(ev.id, "feed ") {
		t.Errorf("URL subscription's subscribed id %q: while it is the only one, the short form", ev.id)
	}
	cmd := r.url + "/v1/sse/" + session
	for _, f := range []string{
		`{"type":"subscribe","id":"1","sub":"inbox","channel":"inbox"}`,
		`{"type":"subscribe","id":"2","sub":"gone","channel":"gone"}`,
		`{"type":"subscribe","id":"3","sub":"many","channel":"rooms/*"}`,
	} {
		if code, m := postJSON(t, cmd, tok, f); code != 202 {
			t.Fatalf("command %s: %d %v", f, code, m)
		}
		c.next("subscribed")
	}
	if code, _ := postJSON(t, cmd, tok, `{"type":"unsubscribe","id":"4","sub":"gone"}`); code != 202 {
		t.Fatal("unsubscribe")
	}
	if ev := c.next("unsubscribed"); strings.Contains(ev.id, " gone ") || !strings.HasPrefix(ev.id, "@"+session+" ") {
		t.Errorf("unsubscribed event id %q: the long form, without the ended subscription", ev.id)
	}
	publish(t, r, "feed", `1`)
	publish(t, r, "inbox", `1`)
	var last string
	for range 2 {
		last = c.next("message").id
	}
	want := func(sub string) {
		if !strings.Contains(last+" ", " "+sub+" ") {
			t.Errorf("last id %q does not name %s", last, sub)
		}
	}
	want("feed")
	want("inbox")
	want("many")
	c.cancel()

	// Published while the client is away.
	publish(t, r, "feed", `2`)
	publish(t, r, "inbox", `2`)
	publish(t, r, "inbox", `3`)

	reconnect := func(t *testing.T, who, lastID string) map[string][]string {
		h := bearerHeader(t, who)
		h.Set("Last-Event-ID", lastID)
		c, resp := openSSE(t, r.url+"/v1/sse?sub=feed&channel=feed", h)
		if c == nil {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
		c.next("welcome")
		got := map[string][]string{}
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-c.events:
				sub, _ := ev.frame["sub"].(string)
				typ := ev.frame["type"].(string)
				if typ == "message" {
					typ += " " + fmt.Sprint(ev.frame["data"])
				}
				if code, ok := ev.frame["code"].(string); ok {
					typ += " " + code
				}
				got[sub] = append(got[sub], typ)
			case <-time.After(300 * time.Millisecond):
				return got
			case <-deadline:
				t.Fatal("the stream did not settle")
			}
		}
	}
	t.Run("another identity", func(t *testing.T) {
		got := reconnect(t, "mallory", last)
		if fmt.Sprint(got["inbox"]) != "[unsubscribed not_found]" || len(got["gone"]) != 0 {
			t.Errorf("another identity got %v; want inbox ended not_found, and nothing of the ended one", got)
		}
	})
	t.Run("the same identity", func(t *testing.T) {
		got := reconnect(t, "u", last)
		if fmt.Sprint(got["feed"]) != "[subscribed message 2]" {
			t.Errorf("feed: %v, want subscribed then message 2", got["feed"])
		}
		if fmt.Sprint(got["inbox"]) != "[subscribed message 2 message 3]" {
			t.Errorf("inbox: %v, want subscribed then messages 2 and 3", got["inbox"])
		}
		if fmt.Sprint(got["many"]) != "[unsubscribed bad_position]" {
			t.Errorf("many: %v, want unsubscribed bad_position (a pattern has no position)", got["many"])
		}
		if len(got["gone"]) != 0 {
			t.Errorf("gone: %v, want nothing: it was unsubscribed", got["gone"])
		}
	})
	t.Run("taken once", func(t *testing.T) {
		got := reconnect(t, "u", last)
		if fmt.Sprint(got["inbox"]) != "[unsubscribed not_found]" {
			t.Errorf("inbox on a second reconnect with the same id: %v, want unsubscribed not_found", got["inbox"])
		}
	})
}
