package server

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/heraldrt/herald/internal/policy"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/session"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testSecret = "0123456789abcdef0123456789abcdef-test-secret"
const testAPIKey = "api-key-0123456789abcdef"

// running is a server under test.
type running struct {
	srv  *Server
	url  string // http://host:port
	stop context.CancelFunc
	done chan error
}

func baseConfig() Config {
	return Config{
		Listen:          "127.0.0.1:0",
		ShutdownTimeout: 5 * time.Second,
		APIKeys:         []string{testAPIKey},
		ConnectTimeout:  2 * time.Second,
		PingInterval:    5 * time.Second,
		Auth:            auth.Config{Secrets: []string{testSecret}},
		Session:         session.Config{MaxSubscriptions: 4},
		// Open to everyone, written out: a server without rules is closed.
		Policy: policy.Open("public.items"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Run(ctx) }()
	select {
	case <-srv.Listening():
	case err := <-r.done:
		t.Fatalf("Run: %v", err)
	}
	r.url = "http://" + srv.Addr()
	t.Cleanup(func() { r.halt(t) })
	return r
}

func (r *running) halt(t *testing.T) {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run after stop: %v", err)
		}
		r.done <- nil
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context ending")
	}
}

func token(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	return tokenClaims(t, jwt.MapClaims{"sub": sub, "exp": exp.Unix()})
}

func tokenClaims(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// client is a WebSocket client speaking herald.v1.
type client struct {
	t *testing.T
	c *websocket.Conn
}

func dial(t *testing.T, r *running, opts ...func(*websocket.DialOptions)) *client {
	t.Helper()
	o := &websocket.DialOptions{Subprotocols: []string{"herald.v1"}}
	for _, f := range opts {
		f(o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(r.url, "http")+"/v1/ws", o)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &client{t: t, c: c}
}

// connect dials and completes the connect handshake with a valid token.
func connect(t *testing.T, r *running) (*client, map[string]any) {
	t.Helper()
	c := dial(t, r)
	c.send(`{"type":"connect","id":"c1","token":"` + token(t, "user-1", time.Now().Add(time.Hour)) + `"}`)
	w := c.expect("welcome")
	return c, w
}

func (c *client) send(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		c.t.Fatalf("send %s: %v", frame, err)
	}
}

// read returns the next frame, or the close error.
func (c *client) read(timeout time.Duration) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, b, err := c.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("server sent invalid JSON %q: %v", b, err)
	}
	return m, nil
}

// expect reads the next frame and checks its type.
func (c *client) expect(typ string) map[string]any {
	c.t.Helper()
	m, err := c.read(5 * time.Second)
	if err != nil {
		c.t.Fatalf("waiting for %s: %v", typ, err)
	}
	if m["type"] != typ {
		c.t.Fatalf("got %v, want a %s frame", m, typ)
	}
	return m
}

// expectError reads an error frame and checks its code and id.
func (c *client) expectError(code, id string) map[string]any {
	c.t.Helper()
	m := c.expect("error")
	if m["code"] != code || (id != "" && m["id"] != id) {
		c.t.Fatalf("got error %v, want code %s id %q", m, code, id)
	}
	if msg, _ := m["message"].(string); msg == "" {
		c.t.Fatalf("error %v has no message", m)
	}
	return m
}

// expectClose reads until the connection closes and checks the close code.
func (c *client) expectClose(code websocket.StatusCode) {
	c.t.Helper()
	for {
		_, err := c.read(10 * time.Second)
		if err == nil {
			continue
		}
		if got := websocket.CloseStatus(err); got != code {
			c.t.Fatalf("connection ended with %v (status %d), want close %d", err, got, code)
		}
		return
	}
}

func postJSON(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("POST %s answered %d with non-JSON %q", url, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, m
}

func publish(t *testing.T, r *running, channel, data string) map[string]any {
	t.Helper()
	code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"`+channel+`","data":`+data+`}`)
	if code != 200 {
		t.Fatalf("publish to %s: %d %v", channel, code, m)
	}
	return m
}

var errTimeout = errors.New("timeout")
