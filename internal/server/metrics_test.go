package server

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/delivery"
)

// scrape reads /metrics into a map from each sample's name and labels, as written
// (`herald_session_closes_total{code="too_slow"}`), to its value.
func scrape(t *testing.T, r *running) map[string]float64 {
	t.Helper()
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return out
}

// TestStuckSSEReaderIsCountedTooSlow: an SSE client that stops reading is ended as too slow,
// and the metrics count it so, as they do for WebSocket. Several streams, since how the end
// was counted hung on which of two timers at the same instant fired first.
func TestStuckSSEReaderIsCountedTooSlow(t *testing.T) {
	cfg := baseConfig()
	// A data lane too large to stall first: the blocked write is what ends the stream.
	cfg.Session.Lanes = delivery.Config{MaxDataFrames: 1 << 20, MaxDataBytes: 1 << 30}
	cfg.Session.SlowTimeout = 300 * time.Millisecond
	cfg.PingInterval = time.Hour
	r := start(t, cfg)
	const streams = 4
	for range streams {
		sr := openSSEReader(t, r.url+"/v1/sse?sub=load&channel=load", bearerHeader(t, "user-1"))
		sr.next() // welcome
		sr.next() // subscribed
	}
	payload := `"` + strings.Repeat("x", 16<<10) + `"`
	for i := 0; r.srv.Sessions() > 0; i++ {
		if i == 20000 {
			t.Fatalf("the stream outlived 20,000 publications to a client that does not read")
		}
		publish(t, r, "load", payload)
	}
	m := scrape(t, r)
	if got := m[`herald_session_closes_total{code="too_slow"}`]; got != streams {
		t.Errorf("too_slow closes %v, want %d (closes %v)", got, streams, r.srv.Closes())
	}
	if got := m[`herald_session_closes_total{code="normal"}`]; got != 0 {
		t.Errorf("normal closes %v, want 0", got)
	}
}
