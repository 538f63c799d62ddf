package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/jackc/pgx/v5"
)

// Transports a subscriber can use.
const (
	TransportWebSocket = "ws"
	TransportSSE       = "sse"
)

// Config is one bench run. The zero value of each optional field means its default.
type Config struct {
	// URL is the node's base URL: http://host:port (ws:// works too).
	URL string
	// Token is sent by every subscriber; empty connects anonymously.
	Token string
	// Transport is TransportWebSocket (default) or TransportSSE.
	Transport string

	// Subs is the number of subscribers, one connection each. Default 100.
	Subs int
	// Table is the table every subscriber subscribes to, and the writer writes: table mode.
	// It must have the bench table's columns (CreateTable). Empty: channel mode.
	Table string
	// Filter is the table subscription's filter, as JSON; nil: every row.
	Filter json.RawMessage
	// Channel is the channel every subscriber subscribes to and the publisher publishes to, in
	// channel mode. Default "bench/load".
	Channel string

	// Events is how many events to produce. Default 10000.
	Events int
	// Rate is events per second; 0 produces them as fast as the server takes them.
	Rate float64
	// Updates makes every other table transaction update the rows the one before inserted.
	Updates bool
	// Duration caps the run from the first event on; it stops by itself then. Default 60s.
	Duration time.Duration
	// Drain is how long to wait, once every event is sent, for deliveries that are still
	// coming after they stop coming. Default 3s.
	Drain time.Duration

	// DatabaseURL is where table mode writes. Required in table mode.
	DatabaseURL string
	// APIKey is the node's API key, for channel mode's POST /v1/publish.
	APIKey string
	// Publishers is how many concurrent publish requests channel mode keeps going. Default 8.
	Publishers int
	// DialConcurrency bounds the connections being opened at once. Default 64.
	DialConcurrency int

	// ServerPID is the node's process, to read its CPU time and memory from /proc; 0 leaves
	// them out of the report.
	ServerPID int
	// Progress receives a line a second while events flow; nil: none.
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	if c.Transport == "" {
		c.Transport = TransportWebSocket
	}
	if c.Subs == 0 {
		c.Subs = 100
	}
	if c.Channel == "" && c.Table == "" {
		c.Channel = "bench/load"
	}
	if c.Events == 0 {
		c.Events = 10000
	}
	if c.Duration <= 0 {
		c.Duration = 60 * time.Second
	}
	if c.Drain <= 0 {
		c.Drain = 3 * time.Second
	}
	if c.Publishers <= 0 {
		c.Publishers = 8
	}
	if c.DialConcurrency <= 0 {
		c.DialConcurrency = 64
	}
	return c
}

// Validate reports a Config Run cannot use.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("bench: URL is required"))
	} else if _, err := client.Endpoint(c.URL, "/"); err != nil {
		errs = append(errs, err)
	}
	if c.Transport != TransportWebSocket && c.Transport != TransportSSE {
		errs = append(errs, fmt.Errorf("bench: transport %q: want ws or sse", c.Transport))
	}
	if c.Subs < 1 || c.Events < 1 || c.Rate < 0 {
		errs = append(errs, fmt.Errorf("bench: subs %d, events %d, rate %g: want at least 1 subscriber and 1 event, and a rate of 0 or more", c.Subs, c.Events, c.Rate))
	}
	if c.Table != "" && c.Channel != "" {
		errs = append(errs, errors.New("bench: give a table or a channel, not both"))
	}
	if c.Table != "" && c.DatabaseURL == "" {
		errs = append(errs, errors.New("bench: table mode writes through Postgres: the database URL is required"))
	}
	if c.Table == "" && c.APIKey == "" {
		errs = append(errs, errors.New("bench: channel mode publishes through POST /v1/publish: the API key is required"))
	}
	if c.Filter != nil && !json.Valid(c.Filter) {
		errs = append(errs, errors.New("bench: the filter is not valid JSON"))
	}
	return errors.Join(errs...)
}

// Stopped says what ended a run.
type Stopped string

const (
	StoppedDone     Stopped = "done"     // every expected delivery arrived
	StoppedDrained  Stopped = "drained"  // every event was sent, and deliveries stopped coming short of the expected count
	StoppedDuration Stopped = "duration" // the duration cap
	StoppedCanceled Stopped = "canceled" // the caller's context ended
)

// Run connects the subscribers, produces the events, waits for their deliveries and reports.
// Once the subscribers are connected it returns a report, even when the run stopped early
// (with the error that stopped it); a failure to connect them returns no report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &Report{
		Mode: "channel", Transport: cfg.Transport, URL: cfg.URL, Subscribers: cfg.Subs,
		Events: cfg.Events, Rate: cfg.Rate, ServerPID: cfg.ServerPID, LoadStart: loadAverage(),
	}
	spec := subSpec{table: cfg.Table, filter: cfg.Filter, channel: cfg.Channel, token: cfg.Token}
	var snd sender
	if cfg.Table != "" {
		r.Mode = "table"
		table, err := ParseTable(cfg.Table)
		if err != nil {
			return nil, err
		}
		snd = &writer{dbURL: cfg.DatabaseURL, table: table, updates: cfg.Updates}
	} else {
		snd = &publisher{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Publishers}},
			base: cfg.URL, apiKey: cfg.APIKey, channel: cfg.Channel, workers: cfg.Publishers}
	}
	r.Target = r.Mode + " " + cfg.Table + cfg.Channel

	if cfg.Table != "" {
		if err := warmUp(ctx, cfg, spec); err != nil {
			return nil, err
		}
	}
	before := r.sample(cfg.ServerPID)
	subs, err := connect(ctx, cfg, spec)
	r.Connected = len(subs)
	if err != nil {
		closeAll(subs)
		return nil, err
	}
	// The memory of the connections, not of a collection that has not run yet: a moment for
	// the server to settle.
	time.Sleep(200 * time.Millisecond)
	connected := r.sample(cfg.ServerPID)

	var (
		t      tally
		wg     sync.WaitGroup
		endsMu sync.Mutex
		ends   = map[string]int{} // guarded by endsMu: connections that ended during the run, by how
	)
	for _, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(&t); err != nil {
				endsMu.Lock()
				ends[closeReason(err)]++
				endsMu.Unlock()
			}
		}()
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	sendCtx, abandon := context.WithCancel(ctx)
	defer abandon()
	var sent counts
	sendErr := make(chan error, 1)
	start := time.Now()
	go func() { sendErr <- snd.send(sendCtx, runCtx.Done(), cfg.Events, cfg.Rate, &sent) }()

	stopped, sendEnd, err := watch(runCtx, ctx, cfg, &t, &sent.sent, sendErr, start)
	if sendEnd.IsZero() {
		abandon()
		<-sendErr
	}
	end := time.Now()
	after := r.sample(cfg.ServerPID)
	closeAll(subs)
	wg.Wait()

	if sendEnd.IsZero() {
		sendEnd = end
	}
	r.Stopped = stopped
	r.SendSeconds = sendEnd.Sub(start).Seconds()
	r.RunSeconds = end.Sub(start).Seconds()
	r.fill(&t, sent.sent.Load(), start, before, connected, after)
	r.Abandoned = sent.issued.Load() - sent.sent.Load()
	if cfg.Filter != nil {
		r.Expected = 0 // a filter passes an unknown share of the rows
	}
	r.Ended = ends
	r.LoadEnd = loadAverage()
	return r, err
}

// connect opens cfg.Subs subscriptions, DialConcurrency at a time. On error it returns those
// it opened, for the caller to close.
func connect(ctx context.Context, cfg Config, spec subSpec) ([]subscriber, error) {
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: -1, // every connection is a stream or an upgrade: none idles
		DisableCompression:  true,
	}}
	endpoint, err := client.Endpoint(cfg.URL, "/v1/ws")
	if err != nil {
		return nil, err
	}
	streamURL, err := sseURL(httpBase(cfg.URL), spec)
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		subs  = make([]subscriber, 0, cfg.Subs) // guarded by mu
		first error                             // guarded by mu
		sem   = make(chan struct{}, cfg.DialConcurrency)
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(cfg.Subs)*5*time.Millisecond)
	defer cancel()
	for i := 0; i < cfg.Subs; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var s subscriber
			var err error
			if cfg.Transport == TransportSSE {
				s, err = dialSSE(ctx, hc, streamURL)
			} else {
				s, err = dialWS(ctx, hc, endpoint, spec)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("subscriber %d: %w", i, err)
					cancel()
				}
				return
			}
			subs = append(subs, s)
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = fmt.Errorf("connect %d subscribers: %w", cfg.Subs, ctx.Err())
	}
	return subs, first
}

// warmUp waits until a subscription to the table succeeds. A node whose changefeed has routed
// no transaction yet has no position to start a subscription at, and answers subscribed
// without one; then warmUp commits one row without a send time, before any subscriber
// connects, and waits for the node to route it.
func warmUp(ctx context.Context, cfg Config, spec subSpec) error {
	endpoint, err := client.Endpoint(cfg.URL, "/v1/ws")
	if err != nil {
		return err
	}
	const limit = 30 * time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	wrote := false
	var last error
	for {
		s, err := dialWS(ctx, http.DefaultClient, endpoint, spec)
		if err == nil {
			s.close()
			return nil
		}
		var e *client.Error
		if errors.As(err, &e) {
			return fmt.Errorf("subscribe to %s: %w", cfg.Table, err)
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return fmt.Errorf("no subscription to %s within %s: the node routed no transaction of it (last: %w)", cfg.Table, limit, last)
		}
		last = err
		if !wrote {
			if err := writeWarmUp(ctx, cfg); err != nil {
				return err
			}
			wrote = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func writeWarmUp(ctx context.Context, cfg Config) error {
	table, err := ParseTable(cfg.Table)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to the bench database: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "INSERT INTO "+table.Sanitize()+" (org_id) VALUES ('warm-up')"); err != nil {
		return fmt.Errorf("write to %s: %w", table.Sanitize(), err)
	}
	return nil
}

// httpBase is the node's base URL over http or https.
func httpBase(raw string) string {
	u, err := client.Endpoint(raw, "/")
	if err != nil {
		return raw
	}
	p, err := url.Parse(u)
	if err != nil {
		return raw
	}
	if p.Scheme == "wss" {
		return "https://" + p.Host
	}
	return "http://" + p.Host
}

func closeAll(subs []subscriber) {
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.close()
		}()
	}
	wg.Wait()
}

// watch prints progress and decides when the run is over. It returns what stopped it and
// when the sender finished (zero if it did not).
func watch(runCtx, ctx context.Context, cfg Config, t *tally, sent *atomic.Int64, sendErr <-chan error, start time.Time) (Stopped, time.Time, error) {
	poll := time.NewTicker(25 * time.Millisecond)
	defer poll.Stop()
	var (
		sendEnd          time.Time
		lastGot          int64
		lastMove         = time.Now()
		printed, printAt = int64(0), start
		err              error
	)
	for {
		select {
		case e := <-sendErr:
			sendEnd, err = time.Now(), e
			sendErr = nil
			if err == nil && runCtx.Err() != nil && ctx.Err() == nil {
				return StoppedDuration, sendEnd, nil
			}
		case <-runCtx.Done():
			if ctx.Err() != nil {
				return StoppedCanceled, sendEnd, ctx.Err()
			}
			if sendEnd.IsZero() {
				// The sender issues no more events; those in flight finish, so that sent
				// counts every event the subscribers may still receive.
				select {
				case e := <-sendErr:
					sendEnd = time.Now()
					if err == nil {
						err = e
					}
				case <-time.After(10 * time.Second):
				case <-ctx.Done():
				}
			}
			return StoppedDuration, sendEnd, err
		case <-poll.C:
		}
		now := time.Now()
		got := t.received.Load()
		if got != lastGot {
			lastGot, lastMove = got, now
		}
		if cfg.Progress != nil && now.Sub(printAt) >= time.Second {
			fmt.Fprintf(cfg.Progress, "[%3.0fs] sent %d/%d  received %d (%.0f/s)  resyncs %d  errors %d\n",
				now.Sub(start).Seconds(), sent.Load(), cfg.Events, got, float64(got-printed)/now.Sub(printAt).Seconds(),
				t.resyncs.Load(), t.errors.Load())
			printed, printAt = got, now
		}
		if sendEnd.IsZero() {
			continue
		}
		if err != nil {
			return StoppedDrained, sendEnd, err
		}
		expected := sent.Load() * int64(cfg.Subs)
		switch {
		case cfg.Filter == nil && got+t.lost.Load() >= expected:
			return StoppedDone, sendEnd, nil
		case now.Sub(lastMove) > cfg.Drain:
			return StoppedDrained, sendEnd, nil
		}
	}
}

// Report is what a run measured.
type Report struct {
	Mode        string  `json:"mode"` // "table" or "channel"
	Target      string  `json:"target"`
	Transport   string  `json:"transport"`
	URL         string  `json:"url"`
	Subscribers int     `json:"subscribers"`
	Connected   int     `json:"connected"`
	Events      int     `json:"events"`
	Rate        float64 `json:"rate"` // asked for; 0: as fast as possible
	Stopped     Stopped `json:"stopped"`

	Sent int64 `json:"sent"`
	// Abandoned are events issued but not confirmed when the run stopped at its cap: the
	// server may have delivered them, beyond Expected.
	Abandoned   int64   `json:"abandoned,omitempty"`
	SendSeconds float64 `json:"send_seconds"` // from the first event to the last one sent
	SentPerSec  float64 `json:"sent_per_second"`
	RunSeconds  float64 `json:"run_seconds"` // from the first event to the end of the run, drain included

	Expected            int64   `json:"expected"` // sent x subscribers; 0 with a filter
	Received            int64   `json:"received"`
	Unmarked            int64   `json:"unmarked,omitempty"` // data frames without a send time
	Seconds             float64 `json:"seconds"`            // from the first event to the last receipt
	DeliveriesPerSecond float64 `json:"deliveries_per_second"`
	Resyncs             int64   `json:"resyncs"`
	Lost                int64   `json:"lost"` // items the resyncs said were lost
	ErrorFrames         int64   `json:"error_frames"`
	// Ended counts connections that ended during the run, by close code or "dropped".
	Ended map[string]int `json:"ended,omitempty"`

	LatencyMS Latency `json:"latency_ms"`

	ServerPID               int     `json:"server_pid,omitempty"`
	ServerCPUSeconds        float64 `json:"server_cpu_seconds"`         // over RunSeconds
	ServerCPUPercent        float64 `json:"server_cpu_percent"`         // of one core, over RunSeconds
	ServerCPUConnectSeconds float64 `json:"server_cpu_connect_seconds"` // opening the connections
	// ServerCPUPerDeliveryMicros is ServerCPUSeconds over Received, in µs: what the node spent
	// per delivery, publishing and connection upkeep included. 0 when either is unknown.
	ServerCPUPerDeliveryMicros float64 `json:"server_cpu_us_per_delivery"`
	ServerRSSIdleBytes         int64   `json:"server_rss_idle_bytes"`
	ServerRSSConnectedBytes    int64   `json:"server_rss_connected_bytes"`
	ServerRSSEndBytes          int64   `json:"server_rss_end_bytes"`
	RSSPerConnBytes            int64   `json:"rss_per_conn_bytes"`
	ClientCPUSeconds           float64 `json:"client_cpu_seconds"` // this process, over RunSeconds

	LoadStart string `json:"load_average_start"`
	LoadEnd   string `json:"load_average_end"`
}

// Latency is the distribution of send-to-receipt times, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// sample is the server's CPU and memory, and this process's CPU, at one moment.
type sample struct {
	serverCPU time.Duration
	rss       int64
	clientCPU time.Duration
	ok        bool
}

func (r *Report) sample(pid int) sample {
	s := sample{clientCPU: selfCPU()}
	if pid <= 0 {
		return s
	}
	cpu, err1 := procCPU(pid)
	rss, err2 := procRSS(pid)
	s.serverCPU, s.rss, s.ok = cpu, rss, err1 == nil && err2 == nil
	return s
}

func (r *Report) fill(t *tally, sent int64, start time.Time, before, connected, after sample) {
	r.Sent = sent
	if r.SendSeconds > 0 {
		r.SentPerSec = float64(sent) / r.SendSeconds
	}
	r.Expected = sent * int64(r.Connected)
	r.Received = t.received.Load()
	r.Unmarked = t.unmarked.Load()
	if last := t.lastNS.Load(); last > 0 {
		r.Seconds = time.Unix(0, last).Sub(start).Seconds()
	}
	if r.Seconds > 0 {
		r.DeliveriesPerSecond = float64(r.Received) / r.Seconds
	}
	r.Resyncs, r.Lost, r.ErrorFrames = t.resyncs.Load(), t.lost.Load(), t.errors.Load()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	h := &t.latency
	r.LatencyMS = Latency{P50: ms(h.quantile(0.50)), P95: ms(h.quantile(0.95)), P99: ms(h.quantile(0.99)),
		Max: ms(time.Duration(h.max.Load()) * time.Microsecond), Mean: ms(h.mean())}
	r.ClientCPUSeconds = (after.clientCPU - connected.clientCPU).Seconds()
	if before.ok && connected.ok && after.ok {
		r.ServerCPUConnectSeconds = (connected.serverCPU - before.serverCPU).Seconds()
		r.ServerCPUSeconds = (after.serverCPU - connected.serverCPU).Seconds()
		if r.RunSeconds > 0 {
			r.ServerCPUPercent = 100 * r.ServerCPUSeconds / r.RunSeconds
		}
		if r.Received > 0 {
			r.ServerCPUPerDeliveryMicros = 1e6 * r.ServerCPUSeconds / float64(r.Received)
		}
		r.ServerRSSIdleBytes, r.ServerRSSConnectedBytes, r.ServerRSSEndBytes = before.rss, connected.rss, after.rss
		if r.Connected > 0 {
			r.RSSPerConnBytes = (connected.rss - before.rss) / int64(r.Connected)
		}
	}
}

// WriteText writes the report for a person.
func (r *Report) WriteText(w io.Writer) {
	tr := "WebSocket"
	if r.Transport == TransportSSE {
		tr = "SSE"
	}
	rate := "as fast as possible"
	if r.Rate > 0 {
		rate = fmt.Sprintf("at %g/s", r.Rate)
	}
	fmt.Fprintf(w, "herald bench: %s, %d %s subscribers (%d connected), %d events %s; stopped: %s\n",
		r.Target, r.Subscribers, tr, r.Connected, r.Events, rate, r.Stopped)
	fmt.Fprintf(w, "  sent         %d in %.1f s (%.0f/s)", r.Sent, r.SendSeconds, r.SentPerSec)
	if r.Abandoned > 0 {
		fmt.Fprintf(w, "; %d more in flight when the run stopped, not counted", r.Abandoned)
	}
	fmt.Fprintln(w)
	pct := 0.0
	if r.Expected > 0 {
		pct = 100 * float64(r.Received) / float64(r.Expected)
	}
	fmt.Fprintf(w, "  deliveries   %d of %d (%.2f%%) in %.1f s: %.0f/s\n", r.Received, r.Expected, pct, r.Seconds, r.DeliveriesPerSecond)
	from := "publish"
	if r.Mode == "table" {
		from = "commit"
	}
	l := r.LatencyMS
	fmt.Fprintf(w, "  latency      %s to receipt: p50 %.2f ms  p95 %.2f ms  p99 %.2f ms  max %.2f ms  mean %.2f ms\n", from, l.P50, l.P95, l.P99, l.Max, l.Mean)
	fmt.Fprintf(w, "  resyncs      %d (lost %d)  error frames %d", r.Resyncs, r.Lost, r.ErrorFrames)
	if r.Unmarked > 0 {
		fmt.Fprintf(w, "  other data frames %d", r.Unmarked)
	}
	fmt.Fprintln(w)
	if len(r.Ended) > 0 {
		var ks []string
		for k, v := range r.Ended {
			ks = append(ks, fmt.Sprintf("%s x%d", k, v))
		}
		sort.Strings(ks)
		fmt.Fprintf(w, "  ended early  %s\n", strings.Join(ks, ", "))
	}
	if r.ServerPID > 0 {
		fmt.Fprintf(w, "  server       pid %d: cpu %.2f s over the %.1f s run (%.0f%% of one core), %.2f s to connect\n",
			r.ServerPID, r.ServerCPUSeconds, r.RunSeconds, r.ServerCPUPercent, r.ServerCPUConnectSeconds)
		fmt.Fprintf(w, "               cpu %.2f µs per delivery\n", r.ServerCPUPerDeliveryMicros)
		fmt.Fprintf(w, "               rss %s idle, %s connected, %s at the end: %s per connection\n",
			mib(r.ServerRSSIdleBytes), mib(r.ServerRSSConnectedBytes), mib(r.ServerRSSEndBytes), kib(r.RSSPerConnBytes))
	}
	fmt.Fprintf(w, "  client       cpu %.2f s over the run (this process: subscribers and sender)\n", r.ClientCPUSeconds)
	fmt.Fprintf(w, "  load average %s at the start, %s at the end (1, 5, 15 min)\n", r.LoadStart, r.LoadEnd)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func kib(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10)) }

// IsLoopback reports whether a URL's host is this machine: localhost or a loopback address.
func IsLoopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		if u2, err2 := url.Parse("ws://" + raw); err2 == nil {
			u = u2
		} else {
			return false
		}
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
