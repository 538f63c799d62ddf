package bench

import (
	"context"
	"encoding/json"
	"github.com/heraldrt/herald/internal/policy"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/server"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/testenv"
)

// startTableServer creates the bench table in a fresh database and runs an in-process node
// streaming it, returning once the node is ready.
func startTableServer(t *testing.T) (url, dbURL string) {
	t.Helper()
	// Open to everyone, written out: a server without rules is closed.
	return startTableServerWith(t, policy.Open("public.bench_items"), "")
}

// startTableServerWith is startTableServer with a policy, and a token secret when set.
func startTableServerWith(t *testing.T, rules policy.Rules, secret string) (url, dbURL string) {
	t.Helper()
	dbURL = testenv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table, _ := ParseTable("public.bench_items")
	if err := CreateTable(ctx, dbURL, table); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		Listen:          "127.0.0.1:0",
		ShutdownTimeout: 5 * time.Second,
		Auth:            authConfig(secret),
		Session:         session.Config{MaxSubscriptions: 4},
		Changefeed: &changefeed.Config{
			DatabaseURL:    dbURL,
			Tables:         []string{"public.bench_items"},
			Slot:           slotFor(t, dbURL),
			StatusInterval: 200 * time.Millisecond,
			SilenceTimeout: 5 * time.Second,
		},
		Policy: rules,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	t.Cleanup(func() {
		for deadline := time.Now().Add(2 * time.Second); srv.Sessions() > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("server Run: %v", err)
		}
	})
	select {
	case <-srv.Listening():
	case err := <-done:
		t.Fatalf("server Run: %v", err)
	}
	url = "http://" + srv.Addr()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the node was not ready within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return url, dbURL
}

func TestRunTable(t *testing.T) {
	url, dbURL := startTableServer(t)
	tests := []struct {
		name      string
		cfg       Config
		wantRecv  int64
		wantState Stopped
	}{
		{"inserts", Config{Subs: 5, Events: 200}, 1000, StoppedDone},
		{"inserts and updates at a rate", Config{Subs: 5, Events: 200, Rate: 2000, Updates: true, Transport: TransportSSE}, 1000, StoppedDone},
		{"a filter that passes every row", Config{Subs: 3, Events: 100, Filter: json.RawMessage(`{"like":["org_id","org_%"]}`), Drain: 500 * time.Millisecond}, 300, StoppedDrained},
		{"a filter that passes none", Config{Subs: 3, Events: 100, Filter: json.RawMessage(`{"eq":["org_id","nobody"]}`), Drain: 500 * time.Millisecond}, 0, StoppedDrained},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.URL, cfg.DatabaseURL, cfg.Table = url, dbURL, "public.bench_items"
			r, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.Mode != "table" || r.Sent != int64(cfg.Events) || r.Received != tt.wantRecv || r.Stopped != tt.wantState {
				t.Errorf("mode %s, sent %d, received %d, stopped %s; want table, %d, %d, %s",
					r.Mode, r.Sent, r.Received, r.Stopped, cfg.Events, tt.wantRecv, tt.wantState)
			}
			if cfg.Filter == nil && r.Expected != tt.wantRecv {
				t.Errorf("expected %d, want %d", r.Expected, tt.wantRecv)
			}
			if r.Resyncs != 0 || r.ErrorFrames != 0 || r.Unmarked != 0 {
				t.Errorf("resyncs %d, error frames %d, unmarked %d; want none", r.Resyncs, r.ErrorFrames, r.Unmarked)
			}
			if tt.wantRecv > 0 {
				checkLatency(t, r)
			}
		})
	}
}

// slotFor is a replication slot name of the test's own: slots (and the leader lock named after
// one) are global to the PostgreSQL cluster that concurrent tests share. The fresh database's
// name is unique.
func slotFor(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := neturl.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

func authConfig(secret string) auth.Config {
	c := auth.Config{AllowAnonymous: true}
	if secret != "" {
		c.Secrets = []string{secret}
	}
	return c
}

// TestRunTablePolicy: policy mode. Under the row rule, each subscriber receives exactly its
// own organisation's rows: a quarter of them with four organisations, and the run ends done,
// with every expected delivery and nothing else.
func TestRunTablePolicy(t *testing.T) {
	secret := PolicySecret()
	url, dbURL := startTableServerWith(t, policy.Rules{Tables: map[string]policy.TableRules{"public.bench_items": {Row: PolicyRowRule}}}, secret)
	tokens, err := PolicyTokens(secret, 4)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), Config{URL: url, DatabaseURL: dbURL, Table: "public.bench_items",
		Subs: 8, Events: 200, Tenants: 4, Tokens: tokens, Drain: time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.Received != 400 || r.Expected != 400 || r.Stopped != StoppedDone || r.Tenants != 4 {
		t.Errorf("received %d of %d, stopped %s, tenants %d; want 400 of 400, done, 4", r.Received, r.Expected, r.Stopped, r.Tenants)
	}
	if r.Resyncs != 0 || r.ErrorFrames != 0 {
		t.Errorf("resyncs %d, error frames %d; want none", r.Resyncs, r.ErrorFrames)
	}
}
