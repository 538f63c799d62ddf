package client

import (
	"context"
	"github.com/heraldrt/herald/internal/policy"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/server"
	"github.com/heraldrt/herald/internal/session"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testSecret = "0123456789abcdef0123456789abcdef-client-test"
	testAPIKey = "api-key-0123456789abcdef-client"
)

// node is an in-process server under test.
type node struct {
	srv  *server.Server
	url  string // ws://host:port
	http string // http://host:port
	stop context.CancelFunc
	done chan error
}

func baseConfig() server.Config {
	return server.Config{
		Listen:          "127.0.0.1:0",
		ShutdownTimeout: 5 * time.Second,
		APIKeys:         []string{testAPIKey},
		ConnectTimeout:  2 * time.Second,
		PingInterval:    5 * time.Second,
		Auth:            auth.Config{Secrets: []string{testSecret}},
		Session:         session.Config{MaxSubscriptions: 8, ClientPublish: true},
		// Open to everyone, written out: a server without rules is closed.
		Policy: policy.Open("public.items"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func startNode(t *testing.T, cfg server.Config) *node {
	t.Helper()
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{srv: srv, stop: cancel, done: make(chan error, 1)}
	go func() { n.done <- srv.Run(ctx) }()
	select {
	case <-srv.Listening():
	case err := <-n.done:
		cancel()
		t.Fatalf("Run: %v", err)
	}
	n.url = "ws://" + srv.Addr()
	n.http = "http://" + srv.Addr()
	t.Cleanup(func() { n.halt(t) })
	return n
}

// halt stops the server and waits for it; a second call returns at once.
func (n *node) halt(t *testing.T) {
	t.Helper()
	n.stop()
	select {
	case err, ok := <-n.done:
		if ok && err != nil {
			t.Errorf("Run after stop: %v", err)
		}
		if ok {
			close(n.done)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context ending")
	}
}

func token(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).
		SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dial connects with a valid token and closes the connection at the end of the test.
func dial(t *testing.T, n *node) *Conn {
	t.Helper()
	c, err := Dial(ctxFor(t, 5*time.Second), n.url, Options{Token: token(t, "user-1", time.Now().Add(time.Hour))})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// next returns the next data frame within 5s.
func next(t *testing.T, c *Conn) (Frame, []byte) {
	t.Helper()
	f, raw, err := c.Next(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return f, raw
}
