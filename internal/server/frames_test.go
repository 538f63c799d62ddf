package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/heraldrt/herald/internal/wire"
)

// TestJSONColumnWithLineBreaksIsOneSSELine: a json column stores its text verbatim, line breaks
// between tokens and around the value included. Each change must still reach an SSE client as
// one data line that parses, with the value intact.
func TestJSONColumnWithLineBreaksIsOneSSELine(t *testing.T) {
	r, url := startWithDB(t, `CREATE TABLE items (id int PRIMARY KEY, doc json)`)
	// A node may report ready a moment before its table stream is live, and refuses a table
	// subscription meanwhile with unavailable, ending the stream: open it again until it is.
	var s *rawSSE
	for deadline := time.Now().Add(30 * time.Second); ; {
		s = openRawSSE(t, r.url+"/v1/sse?sub=feed&table=public.items")
		m := s.next()
		if m["type"] == "welcome" {
			if m = s.next(); m["type"] == "subscribed" {
				break
			}
		}
		if m["code"] != "unavailable" || time.Now().After(deadline) {
			t.Fatalf("got %v, want subscribed", m)
		}
		s.close()
		time.Sleep(50 * time.Millisecond)
	}
	defer s.close()
	docs := []struct{ sql, want string }{
		{`E'{"a":\r\n1,\r\n"b": [1,\n2]}'`, `{"a":1,"b":[1,2]}`},
		{`E'"x y"\r\n'`, `"x y"`},
		{`E'1\r\n'`, `1`},
		{`E'true\n'`, `true`},
		{`E'\r\n[\r\n]\r\n'`, `[]`},
		{`E'{"s":"line\\nbreak"}'`, `{"s":"line\nbreak"}`},
	}
	for i, d := range docs {
		testenv.Exec(t, url, `INSERT INTO items VALUES (`+string(rune('1'+i))+`, `+d.sql+`)`)
	}
	for _, d := range docs {
		m := s.next()
		row, _ := m["row"].(map[string]any)
		if m["type"] != "change" || row == nil {
			t.Fatalf("got %v, want a change", m)
		}
		got, _ := json.Marshal(row["doc"])
		var want any
		_ = json.Unmarshal([]byte(d.want), &want)
		if diff := cmp.Diff(want, row["doc"]); diff != "" {
			t.Errorf("doc %s arrived as %s (-want +got):\n%s", d.sql, got, diff)
		}
	}
}

// rawSSE reads an SSE stream line by line, as an EventSource splits it, so a frame split across
// lines is seen as such.
type rawSSE struct {
	t      *testing.T
	lines  chan string
	cancel context.CancelFunc
	done   chan struct{}
}

func openRawSSE(t *testing.T, url string) *rawSSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header = bearerHeader(t, "user-1")
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
	s := &rawSSE{t: t, lines: make(chan string, 64), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.lines)
		defer resp.Body.Close()
		// Lines end with LF, CR or CRLF alike, as an EventSource reads them.
		sc := bufio.NewScanner(resp.Body)
		sc.Split(sseLines)
		for sc.Scan() {
			select {
			case s.lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

func (s *rawSSE) close() {
	s.cancel()
	<-s.done
}

// next returns the next event's frame; a line that is not an SSE field fails the test.
func (s *rawSSE) next() map[string]any {
	s.t.Helper()
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				s.t.Fatal("stream ended")
			}
			switch {
			case line == "" || strings.HasPrefix(line, "id: ") || strings.HasPrefix(line, "retry: ") || strings.HasPrefix(line, ":"):
				continue
			case !strings.HasPrefix(line, "data: "):
				s.t.Fatalf("line %q is not an SSE field: a frame was split across lines", line)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line[len("data: "):]), &m); err != nil {
				s.t.Fatalf("data line %q is not a whole frame: %v", line, err)
			}
			return m
		case <-time.After(20 * time.Second):
			s.t.Fatal("no event within 20s")
		}
	}
}

// sseLines splits a stream into lines the way the SSE format defines them: ended by CRLF, LF
// or CR.
func sseLines(data []byte, atEOF bool) (int, []byte, error) {
	for i, c := range data {
		switch c {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 == len(data) && !atEOF {
				return 0, nil, nil // a CRLF may be split across reads
			}
			if i+1 < len(data) && data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// TestPublishAPIIsAsStrictAsAFrame: POST /v1/publish reads its body with a publish frame's
// rules. A body two JSON readers could read two ways (a gateway that authorizes on the first
// "channel", Herald publishing to the last) is refused, and nothing is published.
func TestPublishAPIIsAsStrictAsAFrame(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	for _, ch := range []string{"allowed", "secret"} {
		c.send(`{"type":"subscribe","id":"` + ch + `","sub":"` + ch + `","channel":"` + ch + `"}`)
		c.expect("subscribed")
	}
	tests := []struct {
		name, body string
		field, id  string
	}{
		{"duplicate channel", `{"channel":"allowed","channel":"secret","data":1}`, "channel", ""},
		{"duplicate data", `{"id":"p","channel":"allowed","data":1,"data":2}`, "data", "p"},
		{"keys are case-sensitive", `{"CHANNEL":"secret","Data":1}`, "channel", ""},
		{"id with a space", `{"id":"a b","channel":"allowed","data":1}`, "id", ""},
		{"invalid UTF-8 in data", "{\"channel\":\"allowed\",\"data\":\"\xff\"}", "", ""},
		{"nested too deep", `{"channel":"allowed","data":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, "", ""},
		{"type of another frame", `{"type":"subscribe","channel":"allowed","data":1}`, "type", ""},
		{"data null", `{"channel":"allowed","data":null}`, "data", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, tt.body)
			field, _ := m["field"].(string)
			id, _ := m["id"].(string)
			if code != 400 || m["code"] != "bad_frame" || field != tt.field || id != tt.id {
				t.Errorf("got %d %v, want 400 bad_frame with field %q and id %q", code, m, tt.field, tt.id)
			}
		})
	}
	code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"id":"ok-1","channel":"allowed","data":{"n": 1}}`)
	if code != 200 || m["type"] != "published" || m["id"] != "ok-1" {
		t.Fatalf("a valid publish: %d %v", code, m)
	}
	// The refused bodies published nothing: the valid one is the first message.
	if msg := c.expect("message"); msg["sub"] != "allowed" || fmt.Sprint(msg["data"]) != "map[n:1]" {
		t.Errorf("first message %v, want the valid publication", msg)
	}
}

// TestMaxPublishBytesBindsEveryPublisher: limits.max_publish_bytes bounds a publication's data
// whichever way it comes: the HTTP API, a WebSocket frame or an SSE command.
func TestMaxPublishBytesBindsEveryPublisher(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxPublishBytes = 64
	cfg.Session.ClientPublish = true
	r := start(t, cfg)
	fits := `"` + strings.Repeat("a", 62) + `"`   // 64 bytes
	tooBig := `"` + strings.Repeat("a", 63) + `"` // 65 bytes

	t.Run("HTTP", func(t *testing.T) {
		if code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"x","data":`+tooBig+`}`); code != 413 || m["code"] != "frame_too_large" || m["field"] != "data" {
			t.Errorf("over the limit: %d %v, want 413 frame_too_large on data", code, m)
		}
		if code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"x","data":`+fits+`}`); code != 200 {
			t.Errorf("at the limit: %d %v, want 200", code, m)
		}
	})
	t.Run("WebSocket", func(t *testing.T) {
		c, _ := connect(t, r)
		c.send(`{"type":"publish","id":"p1","channel":"x","data":` + tooBig + `}`)
		if m := c.expectError("frame_too_large", "p1"); m["field"] != "data" {
			t.Errorf("error %v, want field data", m)
		}
		c.send(`{"type":"publish","id":"p2","channel":"x","data":` + fits + `}`)
		if m := c.expect("published"); m["id"] != "p2" {
			t.Errorf("published %v, want id p2", m)
		}
	})
	t.Run("SSE", func(t *testing.T) {
		s, resp := openSSE(t, r.url+"/v1/sse", bearerHeader(t, "user-1"))
		if s == nil {
			t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
		}
		session, _ := s.next("welcome").frame["session"].(string)
		tok := token(t, "user-1", time.Now().Add(time.Hour))
		if code, m := postJSON(t, r.url+"/v1/sse/"+session, tok, `{"type":"publish","id":"p1","channel":"x","data":`+tooBig+`}`); code != 202 {
			t.Fatalf("command: %d %v, want 202", code, m)
		}
		if ev := s.next("error"); ev.frame["code"] != "frame_too_large" || ev.frame["id"] != "p1" || ev.frame["field"] != "data" {
			t.Errorf("error %v, want frame_too_large for p1 on data", ev.frame)
		}
	})
}

// expectCloseWith reads until the connection closes and checks the close code and that the
// reason is Herald's: the code's name, ": ", and a message.
func (c *client) expectCloseWith(code websocket.StatusCode, name string) {
	c.t.Helper()
	for {
		_, err := c.read(10 * time.Second)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			c.t.Fatalf("connection ended with %v, want close %d", err, code)
		}
		if ce.Code != code || !strings.HasPrefix(ce.Reason, name+": ") || len(ce.Reason) <= len(name)+2 {
			c.t.Fatalf("closed with %d %q, want %d with a reason %q followed by a message", ce.Code, ce.Reason, code, name+": ")
		}
		return
	}
}

// TestWebSocketProtocolViolationsClose: what the connection cannot survive is answered with an
// error frame and a close in Herald's form, over a real WebSocket.
func TestWebSocketProtocolViolationsClose(t *testing.T) {
	cfg := baseConfig()
	cfg.Session.MaxFrameBytes = 1024
	r := start(t, cfg)
	big := `{"type":"ping","id":"big","pad":"` + strings.Repeat("a", 2000) + `"}`
	t.Run("text that is not UTF-8", func(t *testing.T) {
		c, _ := connect(t, r)
		c.send("{\"type\":\"ping\",\"id\":\"p\",\"x\":\"\xff\"}")
		c.expectError("bad_frame", "")
		c.expectCloseWith(4500, "bad_frame")
	})
	t.Run("a message over max_frame_bytes", func(t *testing.T) {
		c, _ := connect(t, r)
		c.send(big)
		c.expectError("frame_too_large", "")
		c.expectCloseWith(websocket.StatusMessageTooBig, "frame_too_large")
	})
	t.Run("a connect over max_frame_bytes", func(t *testing.T) {
		c := dial(t, r)
		c.send(big)
		c.expectError("frame_too_large", "")
		c.expectCloseWith(websocket.StatusMessageTooBig, "frame_too_large")
	})
	t.Run("a message at max_frame_bytes is read", func(t *testing.T) {
		c, _ := connect(t, r)
		f := `{"type":"ping","id":"p","pad":"`
		f += strings.Repeat("a", 1024-len(f)-2) + `"}`
		c.send(f)
		c.expect("pong")
	})
	t.Run("a first frame other than connect", func(t *testing.T) {
		c := dial(t, r)
		c.send(`{"type":"ping","id":"p"}`)
		c.expectError("bad_frame", "")
		c.expectCloseWith(4500, "bad_frame")
	})
	t.Run("connect timeout", func(t *testing.T) {
		cfg := baseConfig()
		cfg.ConnectTimeout = 100 * time.Millisecond
		c := dial(t, start(t, cfg))
		c.expectCloseWith(4002, "connect_timeout")
	})
}

// rawFrame encodes one client frame by hand, for what no client library sends: an unmasked
// frame, reserved bits, a fragment. Masked frames use a zero key, which leaves the payload as
// it is.
func rawFrame(fin bool, op byte, masked bool, payload string) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	f := clientFrame(nil, op, []byte(payload))
	f[0] = b0
	if !masked {
		// Drop the mask bit and the four key bytes after the length.
		f[1] &^= 0x80
		n := 2
		switch f[1] & 0x7F {
		case 126:
			n = 4
		case 127:
			n = 10
		}
		f = append(f[:n], f[n+4:]...)
	}
	return f
}

// TestWebSocketFraming: fragmented messages and the control frames between them are read as
// RFC 6455 says, and a frame it forbids is answered like the other violations the connection
// cannot survive: an error bad_frame, then close 4500.
func TestWebSocketFraming(t *testing.T) {
	cfg := baseConfig()
	cfg.Session.MaxFrameBytes = 1024
	r := start(t, cfg)
	t.Run("fragments with a ping between them", func(t *testing.T) {
		rc := connectRaw(t, r)
		rc.write(bytes.Join([][]byte{
			rawFrame(false, opText, true, `{"type":"ping",`),
			rawFrame(true, opPing, true, "are you there"),
			rawFrame(false, 0x0, true, `"id":`),
			rawFrame(true, 0x0, true, `"frag"}`),
		}, nil))
		op, p, err := rc.readFrame(5 * time.Second)
		if err != nil || op != opPong || string(p) != "are you there" {
			t.Fatalf("read %#x %q %v, want the pong to the ping", op, p, err)
		}
		if m := rc.expect("pong"); m["id"] != "frag" {
			t.Errorf("pong %v, want id frag", m)
		}
	})
	t.Run("fragments over max_frame_bytes together", func(t *testing.T) {
		rc := connectRaw(t, r)
		rc.write(rawFrame(false, opText, true, `{"type":"ping","id":"p","pad":"`+strings.Repeat("a", 1000)))
		rc.write(rawFrame(true, 0x0, true, strings.Repeat("a", 100)+`"}`))
		rc.expectErrorThenClose("frame_too_large", int(wire.CloseFrameTooLarge))
	})
	for _, tt := range []struct {
		name  string
		frame []byte
	}{
		{"an unmasked frame", rawFrame(true, opText, false, `{"type":"ping","id":"p"}`)},
		{"reserved bits", func() []byte { f := rawFrame(true, opText, true, `{}`); f[0] |= 0x40; return f }()},
		{"a reserved opcode", rawFrame(true, 0x3, true, `{}`)},
		{"a continuation with nothing to continue", rawFrame(true, 0x0, true, `{}`)},
		{"a fragmented ping", rawFrame(false, opPing, true, "p")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := connectRaw(t, r)
			rc.write(tt.frame)
			rc.expectErrorThenClose("bad_frame", int(wire.CloseBadFrame))
		})
	}
}

// expectErrorThenClose reads an error frame with code, then a close frame with close code
// want and a reason in Herald's form, and completes the close handshake.
func (rc *rawConn) expectErrorThenClose(code string, want int) {
	rc.t.Helper()
	if m := rc.expect("error"); m["code"] != code {
		rc.t.Fatalf("error %v, want code %s", m, code)
	}
	op, p, err := rc.readFrame(5 * time.Second)
	if err != nil || op != opClose {
		rc.t.Fatalf("read %#x %q %v, want a close frame", op, p, err)
	}
	if got, reason := closeCode(p), string(p[2:]); got != want || !strings.HasPrefix(reason, wire.CloseCode(want).String()+": ") {
		rc.t.Fatalf("closed with %d %q, want %d and a reason in Herald's form", got, reason, want)
	}
	rc.write(clientFrame(nil, opClose, p[:2]))
}
