package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/delivery"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads /metrics, parsed by Prometheus's own text parser, into a map from each sample's
// name and labels, as `herald_session_closes_total{code="too_slow"}` with the labels in name
// order (no braces without labels), to its value.
func scrape(t testing.TB, r *running) map[string]float64 {
	t.Helper()
	m, _, err := scrapeURL(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// scrapeURL is scrape, returning the type of each sample too, and its failure.
func scrapeURL(url string) (map[string]float64, map[string]dto.MetricType, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("parse /metrics: %w", err)
	}
	values, types := map[string]float64{}, map[string]dto.MetricType{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			key := name
			if len(m.GetLabel()) > 0 {
				var b strings.Builder
				for i, l := range m.GetLabel() {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "%s=%q", l.GetName(), l.GetValue())
				}
				key += "{" + b.String() + "}"
			}
			var v float64
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				v = m.GetUntyped().GetValue()
			default:
				continue // summaries and histograms: the Go runtime's, not ours
			}
			values[key], types[key] = v, f.GetType()
		}
	}
	return values, types, nil
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

// TestCountersNeverDecreaseWhileConnectionsClose: 1,000 WebSocket connections, each subscribed
// and fed, close in waves while /metrics is scraped without pause. No counter ever reads less
// than it did at the scrape before (Prometheus would read that as a restart), and once they
// are gone each close and each session is counted exactly once.
func TestCountersNeverDecreaseWhileConnectionsClose(t *testing.T) {
	cfg := baseConfig()
	cfg.Session.Lanes = delivery.Config{MaxDataFrames: 4, MaxDataBytes: 1 << 20}
	cfg.PingInterval = time.Hour
	r := start(t, cfg)
	const conns, waves = 1000, 20
	cs := make([]*rawConn, conns)
	for i := range cs {
		cs[i] = connectRaw(t, r)
		cs[i].write(clientFrame(nil, opText, []byte(fmt.Sprintf(`{"type":"subscribe","id":"s","sub":"s","channel":"race/%d"}`, i%10))))
		cs[i].expect("subscribed")
	}
	before := scrape(t, r)

	scraped := make(chan struct{}, 1) // a token after each scrape
	stop := make(chan struct{})
	done := make(chan error, 1)
	scrapes := 0
	go func() {
		prev, _, err := scrapeURL(r.url + "/metrics")
		for err == nil {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var cur map[string]float64
			var types map[string]dto.MetricType
			cur, types, err = scrapeURL(r.url + "/metrics")
			if err != nil {
				break
			}
			scrapes++
			for k, v := range cur {
				if types[k] == dto.MetricType_COUNTER && v < prev[k] {
					err = fmt.Errorf("scrape %d: %s went from %v to %v", scrapes, k, prev[k], v)
					break
				}
			}
			prev = cur
			select {
			case scraped <- struct{}{}:
			default:
			}
		}
		done <- err
	}()

	per := conns / waves
	for w := range waves {
		// Traffic while they close: frames written, lanes overflowing into resyncs.
		for ch := range 10 {
			publish(t, r, fmt.Sprintf("race/%d", ch), `"`+strings.Repeat("x", 512)+`"`)
		}
		for _, c := range cs[w*per : (w+1)*per] {
			if w%2 == 0 {
				_ = c.c.Close() // dropped
			} else {
				c.write(clientFrame(nil, opClose, []byte{0x03, 0xE8})) // 1000: a clean close
			}
		}
		// At least one whole scrape runs while this wave's sessions end.
		select {
		case <-scraped:
		case err := <-done:
			t.Fatalf("wave %d: %v", w, err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.srv.Sessions() > 0 || r.srv.conns.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions, %d connections still live 20s after every client closed", r.srv.Sessions(), r.srv.conns.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-scraped
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := scrape(t, r)
	closes := 0.0
	for k, v := range after {
		if strings.HasPrefix(k, "herald_session_closes_total{") {
			closes += v - before[k]
		}
	}
	for _, tt := range []struct {
		what      string
		got, want float64
	}{
		{"sessions ended", closes, conns},
		{"sessions live", after[`herald_sessions{transport="ws"}`], 0},
		{"connections live", after[`herald_connections{transport="ws"}`], 0},
		{"subscriptions live", after[`herald_subscriptions{kind="channel",transport="ws"}`], 0},
		{"sessions opened", after[`herald_sessions_total{transport="ws"}`], conns},
		{"subscriptions opened", after[`herald_subscriptions_total{kind="channel",transport="ws"}`], conns},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.what, tt.got, tt.want)
		}
	}
	if after[`herald_data_frames_written_total`] == 0 {
		t.Error("no data frame was written: the connections carried no traffic as they closed")
	}
	t.Logf("%d scrapes while %d connections closed", scrapes, conns)
}
