package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/bench"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestBenchStartsItsOwnNode runs herald bench as a person would: it starts herald serve as a
// child, measures it through /proc, and stops it.
func TestBenchStartsItsOwnNode(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(herald(t), "bench", "--subs", "5", "--events", "200", "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(cmd.Environ(), "HERALD_URL=ws://ignored:1") // herald serve must not see it
	if err := cmd.Run(); err != nil {
		t.Fatalf("herald bench: %v\nstderr:\n%s", err, stderr.String())
	}
	var r bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, stdout.String())
	}
	if r.Mode != "channel" || r.Connected != 5 || r.Sent != 200 || r.Received != 1000 || r.Expected != 1000 || r.Stopped != bench.StoppedDone {
		t.Errorf("report %+v: want 5 connected, 200 sent, 1000 of 1000 received, done", r)
	}
	l := r.LatencyMS
	if !(l.P50 <= l.P99 && l.P99 <= l.Max && l.Max > 0) {
		t.Errorf("latency %+v", l)
	}
	if r.ServerPID <= 0 || r.ServerRSSIdleBytes <= 0 || r.RSSPerConnBytes <= 0 {
		t.Errorf("server pid %d, rss idle %d, per connection %d: the child was not measured", r.ServerPID, r.ServerRSSIdleBytes, r.RSSPerConnBytes)
	}
	if !strings.Contains(stderr.String(), "node pid") {
		t.Errorf("stderr lacks the node's pid:\n%s", stderr.String())
	}
}

// TestBenchIdle runs herald bench --idle with a node started from --node-binary, as
// scripts/bench-idle does.
func TestBenchIdle(t *testing.T) {
	bin := herald(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "bench", "--idle", "--subs", "4", "--settle", "100ms", "--hold", "500ms", "--transport", "sse", "--node-binary", bin, "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("herald bench --idle: %v\nstderr:\n%s", err, stderr.String())
	}
	var r bench.IdleReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, stdout.String())
	}
	if r.Connected != 4 || r.Transport != "sse" || r.ServerPID <= 0 || r.RSSZeroBytes <= 0 || r.HoldSeconds < 0.5 || len(r.Ended) != 0 {
		t.Errorf("report %+v: want 4 SSE connections held 0.5 s on a measured node, none ended", r)
	}
	// One goroutine a stream: the reader of its connection, taken over from net/http (the
	// session's writer runs only while there is something to write). Give or take two: the
	// node's own connections for readiness and metrics come and go.
	if d := r.GoroutinesEnd - r.GoroutinesZero; d < 2 || d > 6 {
		t.Errorf("goroutines %d with none, %d with 4 idle streams: want 4 more, give or take 2", r.GoroutinesZero, r.GoroutinesEnd)
	}
}

// TestBenchFloor runs herald bench --floor: the floor's server is a child of this binary, its
// CPU is measured, and every message reaches its group.
func TestBenchFloor(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(herald(t), "bench", "--floor", "--subs", "6", "--events", "50", "--group", "4", "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("herald bench --floor: %v\nstderr:\n%s", err, stderr.String())
	}
	var r bench.FloorReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, stdout.String())
	}
	if r.Mode != "floor" || r.Received != 200 || r.Expected != 200 || r.Stopped != bench.StoppedDone || r.ServerPID <= 0 {
		t.Errorf("report %+v: want 200 of 200 received, done, from a measured child", r)
	}
	if l := r.LatencyMS; !(l.P50 <= l.P99 && l.P99 <= l.Max) {
		t.Errorf("latency %+v", l)
	}
}

func TestBenchUsage(t *testing.T) {
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"bench", "--table", "t", "--channel", "c"}, "not both"},
		{[]string{"bench", "--table", "a.b.c"}, "want schema.table"},
		{[]string{"bench", "--target", "http://10.1.2.3:8080"}, "--allow-remote"},
		{[]string{"bench", "--pid", "1"}, "go with --target"},
		{[]string{"bench", "--target", "http://127.0.0.1:1", "--transport", "quic"}, "transport"},
		{[]string{"bench", "extra"}, "unexpected argument"},
		{[]string{"bench", "--idle", "--table", "public.t"}, "not with --table"},
		{[]string{"bench", "--idle", "--target", "http://127.0.0.1:1"}, "--target needs --pid"},
		{[]string{"bench", "--target", "http://127.0.0.1:1", "--node-binary", "/bin/true"}, "give one of them"},
		{[]string{"bench", "--nodes", "3"}, "needs --redis-url"},
		{[]string{"bench", "--nodes", "0"}, "at least 1"},
		{[]string{"bench", "--nodes", "2", "--target", "http://127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1"}, "list the running nodes"},
		{[]string{"bench", "--target", "http://127.0.0.1:1,http://10.1.2.3:8080"}, "--allow-remote"},
		{[]string{"bench", "--idle", "--target", "http://127.0.0.1:1,http://127.0.0.1:2", "--pid", "1,2"}, "measures one node"},
		{[]string{"bench", "--target", "http://127.0.0.1:1", "--pid", "1,x"}, "process ids"},
		{[]string{"bench", "--publish", "random"}, "round-robin or first"},
		{[]string{"bench", "--floor", "--group", "-1"}, "--group"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(tt.args, &out, &errOut); code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tt.stderr)
			}
		})
	}
}

// TestBenchSeveralNodes runs herald bench --nodes 2 on the private Redis: two herald serve
// children sharing it, the subscribers spread over them, the CPU of both measured, and Redis's
// counters read around the run.
func TestBenchSeveralNodes(t *testing.T) {
	redisURL := testenv.RedisURL(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(herald(t), "bench", "--nodes", "2", "--redis-url", redisURL, "--redis-idle", "300ms", "--warm-up",
		"--subs", "4", "--events", "50", "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("herald bench: %v\nstderr:\n%s", err, stderr.String())
	}
	var r bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, stdout.String())
	}
	if r.Received != 200 || r.Stopped != bench.StoppedDone || len(r.URLs) != 2 || len(r.ServerPIDs) != 2 || len(r.ServerCPUSecondsByNode) != 2 {
		t.Errorf("report %+v: want 200 received, done, over 2 nodes and 2 measured processes", r)
	}
	if r.Redis == nil || r.Redis.Run.Scripts < 50 || r.ClusterItemsSent["channel"] != 50 {
		t.Errorf("redis %+v, items sent %v: want at least 50 script calls and 50 channel items between the nodes", r.Redis, r.ClusterItemsSent)
	}
	if strings.Count(stderr.String(), "node pid") != 2 {
		t.Errorf("stderr lacks the two nodes' pids:\n%s", stderr.String())
	}
}
