package server

import (
	"bufio"
	"fmt"
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

// TestLaneTotalsNeverDecrease: the lane counters behind /metrics only grow, while sessions end
// concurrently with the scrapes (a Prometheus counter that goes down reads as a reset).
func TestLaneTotalsNeverDecrease(t *testing.T) {
	r := start(t, baseConfig())
	stop := make(chan struct{})
	failed := make(chan string, 1)
	scraped := make(chan int)
	go func() {
		var prev delivery.Stats
		prevLost := map[delivery.DropReason]uint64{}
		n := 0
		defer func() { scraped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			cur, lost := r.srv.laneTotals()
			n++
			var bad string
			switch {
			case cur.DataWritten < prev.DataWritten:
				bad = fmt.Sprintf("data frames written went from %d to %d", prev.DataWritten, cur.DataWritten)
			case cur.MarkersEmitted < prev.MarkersEmitted:
				bad = fmt.Sprintf("markers went from %d to %d", prev.MarkersEmitted, cur.MarkersEmitted)
			}
			for reason, v := range lost {
				if v < prevLost[reason] {
					bad = fmt.Sprintf("frames lost (%s) went from %d to %d", reason, prevLost[reason], v)
				}
			}
			if bad != "" {
				failed <- bad
				return
			}
			prev, prevLost = cur, lost
		}
	}()

	const rounds, clients = 20, 8
	for round := range rounds {
		cs := make([]*client, clients)
		for i := range cs {
			cs[i], _ = connect(t, r)
			cs[i].send(`{"type":"subscribe","id":"s","sub":"s","channel":"m"}`)
			cs[i].expect("subscribed")
		}
		publish(t, r, "m", fmt.Sprint(round))
		for _, c := range cs {
			c.expect("message")
			_ = c.c.CloseNow() // the sessions end while the scraper runs
		}
		select {
		case bad := <-failed:
			t.Fatalf("round %d: %s", round, bad)
		default:
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.srv.Sessions() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	n := <-scraped
	select {
	case bad := <-failed:
		t.Fatalf("%s", bad)
	default:
	}
	if total, _ := r.srv.laneTotals(); total.DataWritten < rounds*clients {
		t.Errorf("data frames written %d after %d scrapes, want at least %d", total.DataWritten, n, rounds*clients)
	}
}
