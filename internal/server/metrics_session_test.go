package server

import (
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/testenv"
)

// TestMetricsAfterAScriptedSession: one client connects, subscribes to a channel and a table,
// receives a publication and a change, stops reading until its data lane overflows, reads on
// through the resync, and closes. Every series the session should move moved by exactly what
// the client saw, and the gauges are back where they started.
func TestMetricsAfterAScriptedSession(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL)
	cfg := baseConfig()
	cfg.Changefeed = feedConfig(t, url)
	cfg.Session.Lanes = delivery.Config{MaxDataFrames: 64, MaxDataBytes: 1 << 20, MaxControlFrames: 16}
	cfg.Session.SlowTimeout = time.Hour
	cfg.PingInterval = time.Hour
	r := start(t, cfg)
	waitReady(t, r)
	before := scrape(t, r)
	began := time.Now()

	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"m","sub":"m","channel":"m"}`)
	c.expect("subscribed")
	tableSub(c, "t", "", "")
	mid := scrape(t, r)
	publish(t, r, "m", `"first"`)
	c.expect("message")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	if m := c.expect("change"); m["sub"] != "t" {
		t.Fatalf("change %v, want one for sub t", m)
	}
	published := 1
	// The client stops reading: publications fill the socket, then the lane, which overflows.
	payload := `"` + strings.Repeat("x", 16<<10) + `"`
	for r.srv.totalStats().LostLaneFull == 0 {
		if published == 10000 {
			t.Fatalf("10,000 publications did not overflow the lane")
		}
		publish(t, r, "m", payload)
		published++
	}
	// Read to the end: every offset is a message or inside a resync.
	messages, resyncs, lost := 1, 0, 0
	for next := uint64(2); next <= uint64(published); {
		m, err := c.read(10 * time.Second)
		if err != nil {
			t.Fatalf("read: %v (next offset %d of %d)", err, next, published)
		}
		switch m["type"] {
		case "message":
			if off := offsetOf(t, m); off != next {
				t.Fatalf("message at %d, want %d", off, next)
			}
			messages++
			next++
		case "resync":
			if m["reason"] != "lane_full" {
				t.Fatalf("resync %v, want reason lane_full", m)
			}
			resyncs++
			lost += int(m["lost"].(float64))
			next = rangeOf(t, m, "last") + 1
		default:
			t.Fatalf("unexpected frame %v", m)
		}
	}
	if err := c.c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Fatalf("close: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var after map[string]float64
	for {
		after = scrape(t, r)
		if after[`herald_connections{transport="ws"}`] == 0 && after[`herald_sessions{transport="ws"}`] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session is still counted live 10s after it closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ended := time.Now()

	// While subscribed: both subscriptions live, on the WebSocket transport.
	for _, tt := range []struct {
		series string
		want   float64
	}{
		{`herald_sessions{transport="ws"}`, 1},
		{`herald_connections{transport="ws"}`, 1},
		{`herald_subscriptions{kind="channel",transport="ws"}`, 1},
		{`herald_subscriptions{kind="table",transport="ws"}`, 1},
		{`herald_subscriptions{kind="table",transport="sse"}`, 0},
		{`herald_table_subscriptions`, 1},
	} {
		if got := mid[tt.series]; got != tt.want {
			t.Errorf("while subscribed: %s = %v, want %v", tt.series, got, tt.want)
		}
	}

	// Moved by what the client saw, and nothing else.
	moved := []struct {
		series string
		by     float64
	}{
		{`herald_sessions_total{transport="ws"}`, 1},
		{`herald_sessions_total{transport="sse"}`, 0},
		{`herald_session_closes_total{code="normal"}`, 1},
		{`herald_subscriptions_total{kind="channel",transport="ws"}`, 1},
		{`herald_subscriptions_total{kind="table",transport="ws"}`, 1},
		{`herald_channel_publications_total`, float64(published)},
		{`herald_bus_deliveries_total`, float64(published + 1)},
		{`herald_data_frames_written_total`, float64(messages + 1)},
		{`herald_frames_lost_total{reason="lane_full"}`, float64(lost)},
		{`herald_frames_lost_total{reason="too_large"}`, 0},
		{`herald_resync_markers_total{reason="lane_full"}`, float64(resyncs)},
		{`herald_resync_markers_total{reason="upstream_gap"}`, 0},
		{`herald_control_frames_written_total`, 3}, // welcome, subscribed, subscribed
		{`herald_router_deliveries_total`, 1},
		{`herald_changefeed_transactions_total`, 1},
		{`herald_changefeed_changes_total`, 1},
		{`herald_unavailable_total{op="channel_subscribe"}`, 0},
		{`herald_unavailable_total{op="table_subscribe"}`, 0},
		{`herald_unavailable_total{op="publish"}`, 0},
		{`herald_policy_table_refusals_total{code="forbidden",table="public.items"}`, 0},
		{`herald_policy_channel_refusals_total{action="subscribe",code="forbidden"}`, 0},
	}
	for _, tt := range moved {
		b, ok1 := before[tt.series]
		a, ok2 := after[tt.series]
		if !ok1 || !ok2 {
			t.Errorf("%s missing from /metrics (before %v, after %v)", tt.series, ok1, ok2)
			continue
		}
		if a-b != tt.by {
			t.Errorf("%s moved by %v (%v to %v), want %v", tt.series, a-b, b, a, tt.by)
		}
	}
	if resyncs == 0 || lost == 0 {
		t.Errorf("the client saw %d resyncs losing %d frames: the lane did not overflow", resyncs, lost)
	}
	if got, want := after[`herald_data_frames_written_total`]-before[`herald_data_frames_written_total`]+float64(lost), float64(published+1); got != want {
		t.Errorf("frames written and lost add up to %v, want every publication and the change: %v", got, want)
	}

	// Back where they started, or as the stream stands.
	for _, tt := range []struct {
		series string
		want   float64
	}{
		{`herald_sessions{transport="ws"}`, 0},
		{`herald_subscriptions{kind="channel",transport="ws"}`, 0},
		{`herald_subscriptions{kind="table",transport="ws"}`, 0},
		{`herald_table_subscriptions`, 0},
		{`herald_ready`, 1},
		{`herald_changefeed_streaming`, 1},
		{`herald_changefeed_leader`, 1},
		{`herald_changefeed_confirm_failures_consecutive`, 0},
	} {
		if got, ok := after[tt.series]; !ok || got != tt.want {
			t.Errorf("after: %s = %v (present %v), want %v", tt.series, got, ok, tt.want)
		}
	}
	// The commit time is the database's clock, which is this machine's.
	commit := after[`herald_changefeed_last_commit_timestamp_seconds`]
	if at := time.Unix(0, int64(commit*1e9)); at.Before(began.Add(-time.Minute)) || at.After(ended.Add(time.Minute)) {
		t.Errorf("last commit time %v, want the insert's, between %v and %v", at, began, ended)
	}
	// The slot's state is read every 15s, once at start: the slot exists by then or soon
	// after; it is Herald's, and streamed from.
	waitMetric(t, r, `herald_replication_slot_up`, 1)
	waitMetric(t, r, `herald_replication_slot_active`, 1)
	if m := scrape(t, r); m[`herald_replication_slot_wal_status{status="lost"}`] != 0 || m[`herald_replication_slot_retained_wal_bytes`] < 0 {
		t.Errorf("slot: lost %v, retained %v; want 0 and a size", m[`herald_replication_slot_wal_status{status="lost"}`], m[`herald_replication_slot_retained_wal_bytes`])
	}
}

// waitMetric waits until series reads want, for a value read on a timer of the node's own.
func waitMetric(t *testing.T, r *running, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(2*slotPoll + 5*time.Second)
	for {
		got, ok := scrape(t, r)[series]
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (present %v), want %v", series, got, ok, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
