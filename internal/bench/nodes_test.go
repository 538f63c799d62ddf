package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/server"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/testenv"
)

// Subscriber i goes to node i mod n, and the publications go to every node in turn or to the
// first. Two nodes that share nothing tell them apart: a publication reaches the subscribers of
// the node that took it alone. With three subscribers, two are on the first node and one on the
// second; 100 events through the first reach 200 deliveries, 100 in turn reach 50 × 2 + 50 × 1.
func TestRunSpreadsOverNodes(t *testing.T) {
	a, b := startServer(t, true), startServer(t, true)
	tests := []struct {
		via  string
		want int64
	}{
		{PublishFirst, 200},
		{PublishRoundRobin, 150},
	}
	for _, tt := range tests {
		t.Run(tt.via, func(t *testing.T) {
			r, err := Run(context.Background(), Config{
				URLs: []string{a, b}, PublishVia: tt.via, APIKey: testAPIKey, Channel: "bench/spread-" + tt.via,
				Subs: 3, Events: 100, Drain: 300 * time.Millisecond,
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.Received != tt.want || r.Expected != 300 {
				t.Errorf("received %d of %d, want %d of 300", r.Received, r.Expected, tt.want)
			}
			if got := joinInts(r.ConnectedByNode, ","); got != "2,1" {
				t.Errorf("connected by node %s, want 2,1", got)
			}
			if len(r.URLs) != 2 || r.URL != a || r.PublishVia != tt.via {
				t.Errorf("urls %v, url %s, publish via %q; want both, the first, %q", r.URLs, r.URL, r.PublishVia, tt.via)
			}
		})
	}
}

func TestConfigValidateNodes(t *testing.T) {
	ok := Config{URLs: []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, APIKey: "k"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"URL is not the first of URLs", Config{URL: "http://127.0.0.1:2", URLs: []string{"http://127.0.0.1:1"}, APIKey: "k"}, "different first nodes"},
		{"ServerPID is not the first of ServerPIDs", Config{URL: "http://127.0.0.1:1", ServerPID: 2, ServerPIDs: []int{1}, APIKey: "k"}, "different first processes"},
		{"unknown publish", Config{URLs: []string{"http://127.0.0.1:1"}, PublishVia: "random", APIKey: "k"}, "publish via"},
		{"a bad URL among them", Config{URLs: []string{"http://127.0.0.1:1", "ftp://x"}, APIKey: "k"}, "ftp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// startClusterServer runs an in-process node sharing redisURL under prefix.
func startClusterServer(t *testing.T, redisURL, prefix string) string {
	t.Helper()
	srv, err := server.New(server.Config{
		Listen:          "127.0.0.1:0",
		ShutdownTimeout: 5 * time.Second,
		APIKeys:         []string{testAPIKey},
		Auth:            auth.Config{AllowAnonymous: true},
		Session:         session.Config{MaxSubscriptions: 4},
		Policy:          policy.Open(),
		Cluster:         server.ClusterConfig{RedisURL: redisURL, RedisPrefix: prefix},
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server Run: %v", err)
		}
	})
	select {
	case <-srv.Listening():
	case err := <-done:
		t.Fatalf("server Run: %v", err)
	}
	return "http://" + srv.Addr()
}

// Two nodes on one Redis: every subscriber gets every publication whichever node took it, each
// publication crosses once to the other node (the nodes' own counters say so), and Redis's
// counters are read around the run. The Redis may be shared with other tests, so its figures
// are checked only against what this run must at least have cost it.
func TestRunOverNodesSharingRedis(t *testing.T) {
	redisURL := testenv.RedisURL(t)
	prefix := "herald-bench-test-" + RandomID()
	a, b := startClusterServer(t, redisURL, prefix), startClusterServer(t, redisURL, prefix)
	const subs, events = 4, 60
	r, err := Run(context.Background(), Config{
		URLs: []string{a, b}, APIKey: testAPIKey, Channel: "bench/redis", Subs: subs, Events: events,
		RedisURL: redisURL, RedisIdle: 200 * time.Millisecond, WarmUp: true,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.Received != subs*events || r.Stopped != StoppedDone || r.Resyncs != 0 {
		t.Errorf("received %d of %d, stopped %s, resyncs %d; want %d, done, none", r.Received, r.Expected, r.Stopped, r.Resyncs, subs*events)
	}
	// The warm-up: one publication through each node, to every subscriber.
	if r.WarmUpEvents != 2 || r.Unmarked != 2*subs {
		t.Errorf("warm-up events %d, unmarked frames %d; want 2 and %d", r.WarmUpEvents, r.Unmarked, 2*subs)
	}
	// Both nodes hold the channel: each publication goes once to the node that did not take it.
	if r.ClusterItemsSent["channel"] != events || r.ClusterItemsReceived["channel"] != events {
		t.Errorf("items between nodes: sent %v, received %v; want %d channel items each way", r.ClusterItemsSent, r.ClusterItemsReceived, events)
	}
	x := r.Redis
	if x == nil {
		t.Fatal("no Redis report")
	}
	// Each publication takes its offset in one script call, and is appended once to the other
	// node's stream.
	if x.Run.Scripts < events || x.Run.ByCommand["xadd"] < events || x.Run.InputBytes <= 0 || x.Run.OutputBytes <= 0 {
		t.Errorf("over the run: %d scripts, %d XADDs, %d B in, %d B out; want at least %d, %d, and some bytes",
			x.Run.Scripts, x.Run.ByCommand["xadd"], x.Run.InputBytes, x.Run.OutputBytes, events, events)
	}
	if x.Run.Seconds <= 0 || x.Idle.Seconds < 0.2 {
		t.Errorf("run window %g s, idle window %g s", x.Run.Seconds, x.Idle.Seconds)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	for _, want := range []string{"nodes        2, subscribers in turn (2, 2 connected)", "redis        per publication:", "between nodes items sent channel 60 (1.00 per event)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}
