package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/changefeed"
)

// readyz asks url's /readyz: its status and its reason ("" when ready).
func readyz(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ""
	}
	var body struct{ Status, Reason string }
	if err := json.Unmarshal(b, &body); err != nil || body.Status != "unavailable" || body.Reason == "" {
		t.Fatalf("/readyz answered %d %q: want a JSON status unavailable with a reason", resp.StatusCode, b)
	}
	return resp.StatusCode, body.Reason
}

// TestReadyzFailsBeforeTheDrainClosesConnections: once shutdown begins, /readyz answers 503
// draining by the time a connected client is told to go (close 1012), and /healthz still
// answers 200 while the process is up.
func TestReadyzFailsBeforeTheDrainClosesConnections(t *testing.T) {
	cfg := baseConfig()
	cfg.AdminListen = "127.0.0.1:0"
	r := start(t, cfg)
	admin := "http://" + r.srv.AdminAddr()
	if code, reason := readyz(t, admin); code != http.StatusOK {
		t.Fatalf("/readyz before shutdown: %d %s", code, reason)
	}
	if m := scrape(t, r); m["herald_ready"] != 1 {
		t.Fatalf("herald_ready before shutdown: %v, want 1", m["herald_ready"])
	}
	c := connectRaw(t, r)
	r.stop()
	// The client is told to go; it does not answer the close, which holds the drain open (the
	// server waits for the answer a few seconds) while the admin listener still serves.
	for {
		op, p, err := c.readFrame(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the close: %v", err)
		}
		if op != opClose {
			continue
		}
		if code := closeCode(p); code != 1012 {
			t.Fatalf("closed with %d, want 1012", code)
		}
		break
	}
	code, reason := readyz(t, admin)
	if code != http.StatusServiceUnavailable || !strings.Contains(reason, "draining") {
		t.Errorf("/readyz as the client is told to go: %d %q, want 503 draining", code, reason)
	}
	resp, err := http.Get(admin + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz during the drain: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz during the drain: %d, want 200", resp.StatusCode)
	}
	m, _, err := scrapeURL(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if m["herald_ready"] != 0 {
		t.Errorf("herald_ready during the drain: %v, want 0", m["herald_ready"])
	}
}

// TestNotReadyReasons: the reasons a lone node without a changefeed gives, in order: draining
// before the Ready hook's.
func TestNotReadyReasons(t *testing.T) {
	hook := errors.New("the hook says no")
	cfg := baseConfig()
	var fail bool
	cfg.Ready = func() error {
		if fail {
			return hook
		}
		return nil
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.notReady(); err != nil {
		t.Errorf("notReady = %v, want nil", err)
	}
	fail = true
	if err := s.notReady(); !errors.Is(err, hook) {
		t.Errorf("notReady = %v, want the hook's", err)
	}
	s.draining.Store(true)
	if err := s.notReady(); !errors.Is(err, errDraining) {
		t.Errorf("notReady while draining = %v, want %v", err, errDraining)
	}
}

// TestFeedReadiness: a node with a changefeed, alone and among many. Its own stream going down
// is said with its cause, while its beacon outlives the stream and once no beacon is left;
// following another node's live stream is ready once the router is.
func TestFeedReadiness(t *testing.T) {
	noBeacon := errors.New("no node replicates the database yet (no live replicator's beacon in Redis)")
	failed := changefeed.Stats{Failure: "replication slot dropped"}
	for _, tc := range []struct {
		name string
		in   feedReadiness
		want string // "" for ready
	}{
		{"alone, streaming", feedReadiness{feed: changefeed.Stats{Leader: true, Streaming: true}}, ""},
		{"alone, down", feedReadiness{feed: failed}, "the replication stream is down: replication slot dropped"},
		{"alone, starting", feedReadiness{feed: changefeed.Stats{Leader: true}}, "the replication stream is starting"},
		{"replicating", feedReadiness{feed: changefeed.Stats{Leader: true, Streaming: true}, cluster: true, replicatorIsThis: true, routerLive: true}, ""},
		{"following", feedReadiness{feed: changefeed.Stats{}, cluster: true, routerLive: true}, ""},
		{"following, router not live yet", feedReadiness{cluster: true}, "this node is starting to follow it"},
		{"following, after a failed attempt of its own", feedReadiness{feed: failed, cluster: true, routerLive: true}, ""},
		{"its own stream down, its beacon still live", feedReadiness{feed: failed, cluster: true, replicatorIsThis: true, routerLive: true},
			"the replication stream is down: replication slot dropped"},
		{"its own stream down, no beacon left", feedReadiness{feed: failed, cluster: true, peersErr: noBeacon},
			"no node replicates the database yet (no live replicator's beacon in Redis); this node's replication stream is down: replication slot dropped"},
		{"no beacon, nothing failed here", feedReadiness{cluster: true, peersErr: noBeacon}, noBeacon.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.notReady()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("notReady = %v, want ready", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("notReady = %v, want %q", err, tc.want)
			}
		})
	}
}
