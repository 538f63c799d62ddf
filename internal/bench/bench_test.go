package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/heraldrt/herald/internal/policy"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/server"
	"github.com/heraldrt/herald/internal/session"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testAPIKey = "bench-test-api-key-0123456789"

// startServer runs an in-process node with anonymous connections and an API key.
func startServer(t *testing.T, anonymous bool) string {
	t.Helper()
	srv, err := server.New(server.Config{
		Listen:          "127.0.0.1:0",
		ShutdownTimeout: 5 * time.Second,
		APIKeys:         []string{testAPIKey},
		Auth:            auth.Config{AllowAnonymous: anonymous, Secrets: []string{"0123456789abcdef0123456789abcdef-bench"}},
		Session:         session.Config{MaxSubscriptions: 4},
		// Open to everyone, written out: a server without rules is closed.
		Policy: policy.Open(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		// SSE sessions end a few ms after their client left; a shutdown that starts before
		// they have waits out its whole drain.
		for deadline := time.Now().Add(2 * time.Second); srv.Sessions() > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
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

func TestRunChannel(t *testing.T) {
	url := startServer(t, true)
	for _, transport := range []string{TransportWebSocket, TransportSSE} {
		t.Run(transport, func(t *testing.T) {
			var progress bytes.Buffer
			r, err := Run(context.Background(), Config{
				URL: url, APIKey: testAPIKey, Transport: transport, Channel: "bench/" + transport,
				Subs: 5, Events: 200, ServerPID: os.Getpid(), Progress: &progress,
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.Connected != 5 || r.Sent != 200 || r.Expected != 1000 || r.Received != 1000 || r.Stopped != StoppedDone {
				t.Errorf("connected %d, sent %d, expected %d, received %d, stopped %s; want 5, 200, 1000, 1000, done",
					r.Connected, r.Sent, r.Expected, r.Received, r.Stopped)
			}
			if r.Resyncs != 0 || r.ErrorFrames != 0 || r.Unmarked != 0 || len(r.Ended) != 0 {
				t.Errorf("resyncs %d, error frames %d, unmarked %d, ended %v; want none", r.Resyncs, r.ErrorFrames, r.Unmarked, r.Ended)
			}
			checkLatency(t, r)
			if r.DeliveriesPerSecond <= 0 || r.Seconds <= 0 || r.Seconds > r.RunSeconds {
				t.Errorf("deliveries/s %g over %g s (run %g s)", r.DeliveriesPerSecond, r.Seconds, r.RunSeconds)
			}
			// The server is this process, so these measure the test; they must at least be read.
			if r.ServerRSSIdleBytes <= 0 || r.ServerRSSConnectedBytes <= 0 || r.ServerCPUSeconds < 0 {
				t.Errorf("server rss %d/%d, cpu %g", r.ServerRSSIdleBytes, r.ServerRSSConnectedBytes, r.ServerCPUSeconds)
			}
			var text bytes.Buffer
			r.WriteText(&text)
			for _, want := range []string{"deliveries   1000 of 1000 (100.00%)", "p99", "per connection", "load average"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, text.String())
				}
			}
		})
	}
}

func checkLatency(t *testing.T, r *Report) {
	t.Helper()
	l := r.LatencyMS
	if !(0 <= l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max && l.Max < 10_000 && l.Mean <= l.Max) {
		t.Errorf("latency %+v: want 0 <= p50 <= p95 <= p99 <= max < 10 s", l)
	}
	if l.Max == 0 {
		t.Errorf("latency %+v: all zero", l)
	}
}

func TestRunAtARate(t *testing.T) {
	url := startServer(t, true)
	r, err := Run(context.Background(), Config{URL: url, APIKey: testAPIKey, Subs: 3, Events: 100, Rate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if r.Received != 300 || r.Stopped != StoppedDone {
		t.Errorf("received %d, stopped %s", r.Received, r.Stopped)
	}
	// 100 events at 1000/s: the last is due 99 ms after the first.
	if r.SendSeconds < 0.098 {
		t.Errorf("sent 100 events at 1000/s in %.3f s, want at least 0.099 s", r.SendSeconds)
	}
}

func TestRunStopsAtItsDuration(t *testing.T) {
	url := startServer(t, true)
	start := time.Now()
	r, err := Run(context.Background(), Config{URL: url, APIKey: testAPIKey, Subs: 2, Events: 1000, Rate: 20, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stopped != StoppedDuration || r.Sent >= 1000 || r.Sent == 0 {
		t.Errorf("stopped %s after sending %d", r.Stopped, r.Sent)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a 300 ms run took %v", d)
	}
}

func TestRunRefused(t *testing.T) {
	closed := startServer(t, false)
	open := startServer(t, true)
	tests := []struct {
		name string
		cfg  Config
		code client.Code
	}{
		{"anonymous not allowed", Config{URL: closed, APIKey: testAPIKey, Subs: 3, Events: 10}, "unauthorized"},
		{"sse, anonymous not allowed", Config{URL: closed, APIKey: testAPIKey, Subs: 3, Events: 10, Transport: TransportSSE}, "unauthorized"},
		{"bad channel", Config{URL: open, APIKey: testAPIKey, Subs: 3, Events: 10, Channel: "a//b"}, "bad_frame"},
		{"sse, bad channel", Config{URL: open, APIKey: testAPIKey, Subs: 3, Events: 10, Channel: "a//b", Transport: TransportSSE}, "bad_frame"},
		{"table not streamed", Config{URL: open, Subs: 3, Events: 10, Table: "public.nope", DatabaseURL: "postgres://unused"}, "unknown_table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Run(context.Background(), tt.cfg)
			if r != nil {
				t.Errorf("a run whose subscribers could not connect has a report: %+v", r)
			}
			var e *client.Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Errorf("Run = %v, want code %s", err, tt.code)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no URL", Config{APIKey: "k"}, "URL is required"},
		{"bad transport", Config{URL: "http://h", APIKey: "k", Transport: "grpc"}, "transport"},
		{"table without database", Config{URL: "http://h", Table: "public.t"}, "database URL"},
		{"channel without key", Config{URL: "http://h"}, "API key"},
		{"both", Config{URL: "http://h", Table: "t", Channel: "c", DatabaseURL: "x", APIKey: "k"}, "not both"},
		{"negative rate", Config{URL: "http://h", APIKey: "k", Rate: -1}, "rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	if err := (Config{URL: "http://h", APIKey: "k"}).Validate(); err != nil {
		t.Errorf("a channel config: %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for in, want := range map[string]bool{
		"http://127.0.0.1:8080": true, "ws://localhost:1": true, "http://[::1]:80": true,
		"127.0.0.2:9": true, "http://10.0.0.1": false, "https://example.com": false, "": false,
	} {
		if got := IsLoopback(in); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestProc(t *testing.T) {
	cpu, err := procCPU(os.Getpid())
	if err != nil || cpu < 0 {
		t.Errorf("procCPU = %v, %v", cpu, err)
	}
	rss, err := procRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("procRSS = %d, %v", rss, err)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("procCPU(-1) succeeded")
	}
	if loadAverage() == "" {
		t.Error("no load average")
	}
	if n, err := RaiseFileLimit(64); err != nil || n < 64 {
		t.Errorf("RaiseFileLimit = %d, %v", n, err)
	}
}

func TestIdle(t *testing.T) {
	url := startServer(t, true)
	for _, transport := range []string{TransportWebSocket, TransportSSE} {
		t.Run(transport, func(t *testing.T) {
			r, err := Idle(context.Background(), IdleConfig{
				URL: url, Transport: transport, Subs: 4, Settle: 10 * time.Millisecond, Hold: 200 * time.Millisecond,
				ServerPID: os.Getpid(),
			})
			if err != nil {
				t.Fatalf("Idle: %v", err)
			}
			if r.Connected != 4 || r.HoldSeconds < 0.2 || len(r.Ended) != 0 {
				t.Errorf("connected %d, held %g s, ended %v; want 4, at least 0.2 s, none", r.Connected, r.HoldSeconds, r.Ended)
			}
			// The server is this process, so these measure the test; they must at least be read.
			if r.RSSZeroBytes <= 0 || r.RSSEndBytes <= 0 || r.ServerCPUSeconds < 0 || r.GoroutinesZero < 0 || r.GoroutinesEnd < 0 {
				t.Errorf("rss %d/%d, cpu %g, goroutines %d/%d: not measured", r.RSSZeroBytes, r.RSSEndBytes, r.ServerCPUSeconds, r.GoroutinesZero, r.GoroutinesEnd)
			}
			var text bytes.Buffer
			r.WriteText(&text)
			for _, want := range []string{"4 connected", "cores", "per connection", "goroutines"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, text.String())
				}
			}
		})
	}
	if _, err := Idle(context.Background(), IdleConfig{URL: url}); err == nil || !strings.Contains(err.Error(), "pid") {
		t.Errorf("Idle without a pid = %v, want an error naming the pid", err)
	}
}

// The node's CPU per delivery is its CPU over the run (not the connecting) divided by what was
// received; without a sample of the node, or without a delivery, it is not made up.
func TestFillCPUPerDelivery(t *testing.T) {
	var tl tally
	tl.received.Store(400_000)
	start := time.Now()
	before := sample{serverCPU: []time.Duration{1 * time.Second}, rss: 10 << 20, ok: true}
	connected := sample{serverCPU: []time.Duration{1500 * time.Millisecond}, rss: 14 << 20, ok: true}
	after := sample{serverCPU: []time.Duration{2700 * time.Millisecond}, rss: 15 << 20, ok: true}

	r := &Report{Connected: 1000, RunSeconds: 2}
	r.fill(&tl, 400, start, before, connected, after)
	if r.ServerCPUSeconds != 1.2 || r.ServerCPUConnectSeconds != 0.5 {
		t.Errorf("cpu %g s over the run, %g s connecting; want 1.2 and 0.5", r.ServerCPUSeconds, r.ServerCPUConnectSeconds)
	}
	if got, want := r.ServerCPUPerDeliveryMicros, 3.0; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("cpu per delivery %g µs, want %g (1.2 s / 400,000)", got, want)
	}
	var text bytes.Buffer
	r.ServerPID = 1
	r.WriteText(&text)
	if !strings.Contains(text.String(), "cpu 3.00 µs per delivery") {
		t.Errorf("report lacks the CPU per delivery:\n%s", text.String())
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"server_cpu_us_per_delivery":3`) {
		t.Errorf("JSON lacks server_cpu_us_per_delivery: %s", b)
	}

	r = &Report{Connected: 1000, RunSeconds: 2}
	r.fill(&tally{}, 0, start, before, connected, after)
	if r.ServerCPUPerDeliveryMicros != 0 {
		t.Errorf("no delivery, yet %g µs per delivery", r.ServerCPUPerDeliveryMicros)
	}
	tl2 := tally{}
	tl2.received.Store(10)
	r = &Report{Connected: 1000, RunSeconds: 2}
	r.fill(&tl2, 1, start, sample{}, sample{}, sample{})
	if r.ServerCPUPerDeliveryMicros != 0 {
		t.Errorf("no sample of the node, yet %g µs per delivery", r.ServerCPUPerDeliveryMicros)
	}
}

// With several nodes the CPU per delivery is over every node's CPU time: the sum, not one
// node's, and the memory per connection over the summed memory.
func TestFillCPUPerDeliverySumsTheNodes(t *testing.T) {
	var tl tally
	tl.received.Store(300_000)
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for k, n := range v {
			out[k] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	before := sample{serverCPU: ms(100, 200, 300), rss: 30 << 20, ok: true}
	connected := sample{serverCPU: ms(200, 300, 400), rss: 33 << 20, ok: true}
	after := sample{serverCPU: ms(500, 700, 900), rss: 34 << 20, ok: true}
	r := &Report{Connected: 3072, RunSeconds: 2, ServerPID: 1, ServerPIDs: []int{1, 2, 3}, URLs: []string{"a", "b", "c"}, ConnectedByNode: []int{1024, 1024, 1024}}
	r.fill(&tl, 100, time.Now(), before, connected, after)
	if got, want := r.ServerCPUSecondsByNode, []float64{0.3, 0.4, 0.5}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("cpu by node %v, want %v", got, want)
	}
	if got, want := r.ServerCPUPerDeliveryMicros, 4.0; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("cpu per delivery %g µs, want %g (1.2 s over three nodes / 300,000)", got, want)
	}
	if r.ServerCPUConnectSeconds < 0.3-1e-9 || r.ServerCPUConnectSeconds > 0.3+1e-9 || r.RSSPerConnBytes != 1024 {
		t.Errorf("connect cpu %g s, rss per connection %d; want 0.3 s and 1024", r.ServerCPUConnectSeconds, r.RSSPerConnBytes)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	for _, want := range []string{"pids 1, 2, 3: cpu 1.20 s (0.30 + 0.40 + 0.50)", "cpu 4.00 µs per delivery, all of them", "1024, 1024, 1024 connected"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}
