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
	"strconv"
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

// Where channel mode publishes when there are several nodes.
const (
	PublishRoundRobin = "round-robin" // event i through node i mod n, as a load balancer spreads them
	PublishFirst      = "first"       // every event through the first node
)

// Config is one bench run. The zero value of each optional field means its default.
type Config struct {
	// URL is the node's base URL: http://host:port (ws:// works too).
	URL string
	// URLs, when set, are several nodes' base URLs (URL empty, or the first of them):
	// subscriber i connects to URLs[i mod len(URLs)], and channel mode publishes as PublishVia
	// says. The nodes must share a Redis for every subscriber to get every event.
	URLs []string
	// PublishVia, with several nodes, is PublishRoundRobin (default) or PublishFirst.
	PublishVia string
	// Token is sent by every subscriber; empty connects anonymously.
	Token string
	// Tenants, in table mode, spreads the rows over this many organisations (org_id org_0,
	// org_1, ...) in turn; 0: 10. With Tokens it is policy mode: subscriber i sends
	// Tokens[i % len(Tokens)], which the caller made for organisation i % Tenants, and the
	// node's row rule shows each subscriber its own organisation's rows alone.
	Tenants int
	// Tokens, when set, are the subscribers' tokens in turn, instead of Token.
	Tokens []string
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
	// ServerPIDs, when set, are the nodes' processes (ServerPID 0, or the first of them): their
	// CPU times and memory are summed.
	ServerPIDs []int
	// RedisURL, when set, is the one Redis server the nodes share (redis://host:port, not a
	// Cluster): its INFO counters are read over a quiet window of RedisIdle before the first
	// event and over the run, for the commands, bytes and CPU time it spends per event.
	RedisURL string
	// RedisIdle is that quiet window. Default 2s.
	RedisIdle time.Duration
	// WarmUp, once the subscribers are connected and before anything is measured, produces one
	// event without a send time through each node channel mode publishes through (a row, in
	// table mode), and waits a second: each producing node's first look-up of the nodes that
	// hold the subscriptions, which reads every subscription's row from Redis, is then not
	// counted in the run. The subscribers count what it produced as unmarked frames.
	WarmUp bool
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
	if len(c.URLs) == 0 && c.URL != "" {
		c.URLs = []string{c.URL}
	}
	if len(c.URLs) > 0 && c.URL == "" {
		c.URL = c.URLs[0]
	}
	if c.PublishVia == "" {
		c.PublishVia = PublishRoundRobin
	}
	if len(c.ServerPIDs) == 0 && c.ServerPID > 0 {
		c.ServerPIDs = []int{c.ServerPID}
	}
	if len(c.ServerPIDs) > 0 && c.ServerPID == 0 {
		c.ServerPID = c.ServerPIDs[0]
	}
	if c.RedisIdle <= 0 {
		c.RedisIdle = 2 * time.Second
	}
	return c
}

// publishTo is where channel mode publishes: every node in turn, or the first.
func (c Config) publishTo() []string {
	if c.PublishVia == PublishFirst {
		return c.URLs[:1]
	}
	return c.URLs
}

// Validate reports a Config Run cannot use.
func (c Config) Validate() error {
	var errs []error
	if len(c.URLs) > 0 && c.URL != "" && c.URL != c.URLs[0] {
		errs = append(errs, errors.New("bench: URL and URLs name different first nodes: give URLs alone"))
	}
	if len(c.ServerPIDs) > 0 && c.ServerPID != 0 && c.ServerPID != c.ServerPIDs[0] {
		errs = append(errs, errors.New("bench: ServerPID and ServerPIDs name different first processes: give ServerPIDs alone"))
	}
	c = c.withDefaults()
	if c.URL == "" {
		errs = append(errs, errors.New("bench: URL is required"))
	}
	for _, u := range c.URLs {
		if _, err := client.Endpoint(u, "/"); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PublishVia != PublishRoundRobin && c.PublishVia != PublishFirst {
		errs = append(errs, fmt.Errorf("bench: publish via %q: want %s or %s", c.PublishVia, PublishRoundRobin, PublishFirst))
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
	if len(c.Tokens) > 0 && (c.Tenants < 1 || c.Table == "") {
		errs = append(errs, errors.New("bench: policy mode (Tokens) is table mode, with the number of organisations (Tenants) the tokens were made for"))
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
	if len(cfg.URLs) > 1 {
		r.URLs = cfg.URLs
	}
	if len(cfg.ServerPIDs) > 1 {
		r.ServerPIDs = cfg.ServerPIDs
	}
	spec := subSpec{table: cfg.Table, filter: cfg.Filter, channel: cfg.Channel, token: cfg.Token}
	var snd sender
	if cfg.Table != "" {
		r.Mode = "table"
		table, err := ParseTable(cfg.Table)
		if err != nil {
			return nil, err
		}
		snd = &writer{dbURL: cfg.DatabaseURL, table: table, updates: cfg.Updates, tenants: cfg.Tenants}
	} else {
		if len(cfg.URLs) > 1 {
			r.PublishVia = cfg.PublishVia
		}
		snd = &publisher{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Publishers}},
			bases: cfg.publishTo(), apiKey: cfg.APIKey, channel: cfg.Channel, workers: cfg.Publishers}
	}
	r.Target = r.Mode + " " + cfg.Table + cfg.Channel

	if len(cfg.Tokens) > 0 {
		r.Tenants = cfg.Tenants
		r.Target += fmt.Sprintf(" under a row rule, %d organisations", cfg.Tenants)
		spec.token = cfg.Tokens[0]
	}
	var probe *redisProbe
	if cfg.RedisURL != "" {
		var err error
		if probe, err = dialRedisProbe(ctx, cfg.RedisURL); err != nil {
			return nil, err
		}
		defer probe.close()
	}
	if cfg.Table != "" {
		for _, u := range cfg.URLs {
			if err := warmUp(ctx, cfg, u, spec); err != nil {
				return nil, err
			}
		}
	}
	before := r.sample(cfg.ServerPIDs)
	subs, byNode, err := connect(ctx, cfg, spec)
	r.Connected = len(subs)
	if len(cfg.URLs) > 1 {
		r.ConnectedByNode = byNode
	}
	if err != nil {
		closeAll(subs)
		return nil, err
	}
	if cfg.WarmUp {
		if r.WarmUpEvents, err = warmUpRoutes(ctx, cfg); err != nil {
			closeAll(subs)
			return nil, err
		}
		time.Sleep(time.Second)
	}
	// The memory of the connections, not of a collection that has not run yet: a moment for
	// the server to settle.
	time.Sleep(200 * time.Millisecond)
	var idleStart, runStart redisSample
	var items clusterCounters
	if probe != nil {
		// What Redis does with nothing flowing, to take off the run's figures; then the items
		// between the nodes, whose counters start the run.
		if idleStart, err = probe.sample(); err == nil {
			time.Sleep(cfg.RedisIdle)
			runStart, err = probe.sample()
		}
		if err == nil {
			items, err = readClusterCounters(ctx, cfg.URLs)
		}
		if err != nil {
			closeAll(subs)
			return nil, err
		}
	}
	connected := r.sample(cfg.ServerPIDs)

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
	after := r.sample(cfg.ServerPIDs)
	var runEnd redisSample
	var itemsEnd clusterCounters
	var probeErr error
	if probe != nil {
		if runEnd, probeErr = probe.sample(); probeErr == nil {
			itemsEnd, probeErr = readClusterCounters(context.WithoutCancel(ctx), cfg.URLs)
		}
	}
	closeAll(subs)
	wg.Wait()

	if sendEnd.IsZero() {
		sendEnd = end
	}
	r.Stopped = stopped
	r.SendSeconds = sendEnd.Sub(start).Seconds()
	r.RunSeconds = end.Sub(start).Seconds()
	r.fill(&t, sent.sent.Load(), start, before, connected, after)
	if cfg.Table == "" {
		r.PublishMS = sent.answer.latency()
	} else {
		r.Transactions = sent.transactions.Load()
	}
	r.Abandoned = sent.issued.Load() - sent.sent.Load()
	if cfg.Filter != nil {
		r.Expected = 0 // a filter passes an unknown share of the rows
	}
	if len(cfg.Tokens) > 0 {
		// Each row reaches its organisation's subscribers: a Tenants-th of them, exactly when
		// Tenants divides both the events and the subscribers.
		r.Expected /= int64(cfg.Tenants)
	}
	if probe != nil && probeErr == nil {
		r.Redis = newRedisReport(window(idleStart, runStart), window(runStart, runEnd), r.Sent, r.Received)
		if items.ok && itemsEnd.ok {
			r.ClusterItemsSent, r.ClusterItemsReceived = itemsEnd.sub(items)
		}
	}
	r.Ended = ends
	r.LoadEnd = loadAverage()
	if err == nil {
		err = probeErr
	}
	return r, err
}

// connect opens cfg.Subs subscriptions, DialConcurrency at a time, subscriber i to node
// i mod len(cfg.URLs); it returns them and how many each node took. On error it returns those
// it opened, for the caller to close.
func connect(ctx context.Context, cfg Config, spec subSpec) ([]subscriber, []int, error) {
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: -1, // every connection is a stream or an upgrade: none idles
		DisableCompression:  true,
	}}
	endpoints := make([]string, len(cfg.URLs))
	for k, u := range cfg.URLs {
		var err error
		if endpoints[k], err = client.Endpoint(u, "/v1/ws"); err != nil {
			return nil, nil, err
		}
		if _, err := sseURL(httpBase(u), spec); err != nil {
			return nil, nil, err
		}
	}
	var (
		mu     sync.Mutex
		subs   = make([]subscriber, 0, cfg.Subs) // guarded by mu
		byNode = make([]int, len(cfg.URLs))      // guarded by mu
		first  error                             // guarded by mu
		sem    = make(chan struct{}, cfg.DialConcurrency)
		wg     sync.WaitGroup
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
			spec := spec
			if len(cfg.Tokens) > 0 {
				spec.token = cfg.Tokens[i%len(cfg.Tokens)]
			}
			node := i % len(cfg.URLs)
			if cfg.Transport == TransportSSE {
				streamURL, _ := sseURL(httpBase(cfg.URLs[node]), spec) // checked above, with another token
				s, err = dialSSE(ctx, hc, streamURL)
			} else {
				s, err = dialWS(ctx, hc, endpoints[node], spec)
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
			byNode[node]++
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = fmt.Errorf("connect %d subscribers: %w", cfg.Subs, ctx.Err())
	}
	return subs, byNode, first
}

// warmUp waits until a subscription to the table on the node at url succeeds. A node whose
// changefeed has routed no transaction yet has no position to start a subscription at, and
// answers subscribed without one; then warmUp commits one row without a send time, before any
// subscriber connects, and waits for the node to route it.
func warmUp(ctx context.Context, cfg Config, url string, spec subSpec) error {
	endpoint, err := client.Endpoint(url, "/v1/ws")
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

// warmUpRoutes produces Config.WarmUp's events and returns how many: a publication through
// each node the run publishes through, or one row.
func warmUpRoutes(ctx context.Context, cfg Config) (int, error) {
	if cfg.Table != "" {
		return 1, writeWarmUp(ctx, cfg)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	to := cfg.publishTo()
	for _, base := range to {
		pub := client.Publication{Channel: cfg.Channel, Data: json.RawMessage(`{"warm_up":true}`)}
		if _, err := client.PublishHTTP(ctx, hc, base, cfg.APIKey, pub); err != nil {
			return 0, fmt.Errorf("warm-up publication through %s: %w", base, err)
		}
	}
	return len(to), nil
}

// writeWarmUp commits one row without a send time.
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
	// Flushed at commit, so the changefeed sees it now (see writer.send).
	if _, err := conn.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		return fmt.Errorf("write to %s: %w", table.Sanitize(), err)
	}
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
		if len(cfg.Tokens) > 0 {
			expected /= int64(cfg.Tenants)
		}
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

	// With several nodes: their URLs, the subscribers connected to each (in turn), and where
	// channel mode published.
	URLs            []string `json:"urls,omitempty"`
	ConnectedByNode []int    `json:"connected_by_node,omitempty"`
	PublishVia      string   `json:"publish_via,omitempty"`

	Sent int64 `json:"sent"`
	// Abandoned are events issued but not confirmed when the run stopped at its cap: the
	// server may have delivered them, beyond Expected.
	Abandoned   int64   `json:"abandoned,omitempty"`
	SendSeconds float64 `json:"send_seconds"` // from the first event to the last one sent
	SentPerSec  float64 `json:"sent_per_second"`
	// Transactions (table mode) are the transactions the events were committed in.
	Transactions int64   `json:"transactions,omitempty"`
	RunSeconds   float64 `json:"run_seconds"` // from the first event to the end of the run, drain included

	Expected            int64   `json:"expected"`          // sent x subscribers (/ tenants in policy mode); 0 with a filter
	Tenants             int     `json:"tenants,omitempty"` // policy mode: the organisations the subscribers and rows are spread over
	Received            int64   `json:"received"`
	Unmarked            int64   `json:"unmarked,omitempty"`       // data frames without a send time
	WarmUpEvents        int     `json:"warm_up_events,omitempty"` // produced by Config.WarmUp, unmarked
	Seconds             float64 `json:"seconds"`                  // from the first event to the last receipt
	DeliveriesPerSecond float64 `json:"deliveries_per_second"`
	Resyncs             int64   `json:"resyncs"`
	Lost                int64   `json:"lost"` // items the resyncs said were lost
	// ResyncReasons counts the resyncs by reason (lane_full: a subscriber read too slowly;
	// upstream_gap: items lost or too late between nodes).
	ResyncReasons map[string]int64 `json:"resync_reasons,omitempty"`
	ErrorFrames   int64            `json:"error_frames"`
	// Ended counts connections that ended during the run, by close code or "dropped".
	Ended map[string]int `json:"ended,omitempty"`

	LatencyMS Latency `json:"latency_ms"`
	// PublishMS is how long POST /v1/publish took to answer (channel mode): its round trip.
	PublishMS *Latency `json:"publish_ms,omitempty"`

	ServerPID int `json:"server_pid,omitempty"`
	// ServerPIDs, with several nodes, are their processes; the CPU and memory figures below are
	// their sums, and ServerCPUSecondsByNode each one's CPU time over the run.
	ServerPIDs              []int     `json:"server_pids,omitempty"`
	ServerCPUSecondsByNode  []float64 `json:"server_cpu_seconds_by_node,omitempty"`
	ServerCPUSeconds        float64   `json:"server_cpu_seconds"`         // over RunSeconds
	ServerCPUPercent        float64   `json:"server_cpu_percent"`         // of one core, over RunSeconds
	ServerCPUConnectSeconds float64   `json:"server_cpu_connect_seconds"` // opening the connections
	// ServerCPUPerDeliveryMicros is ServerCPUSeconds over Received, in µs: what the node spent
	// per delivery, publishing and connection upkeep included. 0 when either is unknown.
	ServerCPUPerDeliveryMicros float64 `json:"server_cpu_us_per_delivery"`
	ServerRSSIdleBytes         int64   `json:"server_rss_idle_bytes"`
	ServerRSSConnectedBytes    int64   `json:"server_rss_connected_bytes"`
	ServerRSSEndBytes          int64   `json:"server_rss_end_bytes"`
	RSSPerConnBytes            int64   `json:"rss_per_conn_bytes"`
	ClientCPUSeconds           float64 `json:"client_cpu_seconds"` // this process, over RunSeconds

	// Redis is what the Redis the nodes share did over the run (Config.RedisURL).
	Redis *RedisReport `json:"redis,omitempty"`
	// ClusterItemsSent and ClusterItemsReceived are the items that crossed between the nodes
	// over the run, by kind, summed over the nodes' herald_cluster_items_sent_total (one per
	// item and destination) and herald_cluster_items_received_total. With Config.RedisURL.
	ClusterItemsSent     map[string]int64 `json:"cluster_items_sent,omitempty"`
	ClusterItemsReceived map[string]int64 `json:"cluster_items_received,omitempty"`

	LoadStart string `json:"load_average_start"`
	LoadEnd   string `json:"load_average_end"`
}

// Latency is a distribution of times in milliseconds: from send to receipt, or a publish's
// round trip.
type Latency struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// sample is the servers' CPU and memory, and this process's CPU, at one moment.
type sample struct {
	serverCPU []time.Duration // by server process
	rss       int64           // summed over the server processes
	clientCPU time.Duration
	ok        bool
}

func (r *Report) sample(pids []int) sample {
	s := sample{clientCPU: selfCPU(), ok: len(pids) > 0}
	for _, pid := range pids {
		cpu, err1 := procCPU(pid)
		rss, err2 := procRSS(pid)
		s.serverCPU = append(s.serverCPU, cpu)
		s.rss += rss
		s.ok = s.ok && err1 == nil && err2 == nil
	}
	return s
}

// cpuSince is the servers' CPU time between an earlier sample and this one: summed, and by
// process.
func (s sample) cpuSince(earlier sample) (time.Duration, []time.Duration) {
	var sum time.Duration
	by := make([]time.Duration, len(s.serverCPU))
	for k := range s.serverCPU {
		by[k] = s.serverCPU[k] - earlier.serverCPU[k]
		sum += by[k]
	}
	return sum, by
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
	if r.Resyncs > 0 {
		r.ResyncReasons = t.resyncReasons()
	}
	r.LatencyMS = *t.latency.latency()
	r.ClientCPUSeconds = (after.clientCPU - connected.clientCPU).Seconds()
	if before.ok && connected.ok && after.ok {
		connecting, _ := connected.cpuSince(before)
		running, byNode := after.cpuSince(connected)
		r.ServerCPUConnectSeconds = connecting.Seconds()
		r.ServerCPUSeconds = running.Seconds()
		if len(byNode) > 1 {
			for _, d := range byNode {
				r.ServerCPUSecondsByNode = append(r.ServerCPUSecondsByNode, d.Seconds())
			}
		}
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
	fmt.Fprintf(w, "herald bench: %s, %d %s subscribers (%d connected), %d events %s; stopped: %s\n",
		r.Target, r.Subscribers, tr, r.Connected, r.Events, rateText(r.Rate), r.Stopped)
	if len(r.URLs) > 1 {
		fmt.Fprintf(w, "  nodes        %d, subscribers in turn (%s connected)", len(r.URLs), joinInts(r.ConnectedByNode, ", "))
		switch r.PublishVia {
		case PublishRoundRobin:
			fmt.Fprint(w, "; publishing through each in turn")
		case PublishFirst:
			fmt.Fprint(w, "; publishing through the first")
		}
		fmt.Fprintln(w)
	}
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
	if p := r.PublishMS; p != nil {
		fmt.Fprintf(w, "  publish      answered in: p50 %.2f ms  p95 %.2f ms  p99 %.2f ms  max %.2f ms  mean %.2f ms\n", p.P50, p.P95, p.P99, p.Max, p.Mean)
	}
	fmt.Fprintf(w, "  resyncs      %d (lost %d)  error frames %d", r.Resyncs, r.Lost, r.ErrorFrames)
	if len(r.ResyncReasons) > 0 {
		fmt.Fprintf(w, "  by reason %v", r.ResyncReasons)
	}
	if r.Unmarked > 0 {
		fmt.Fprintf(w, "  other data frames %d", r.Unmarked)
		if r.WarmUpEvents > 0 {
			fmt.Fprintf(w, " (the warm-up's %d event(s) among them)", r.WarmUpEvents)
		}
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
	switch {
	case len(r.ServerPIDs) > 1:
		by := make([]string, len(r.ServerCPUSecondsByNode))
		for k, c := range r.ServerCPUSecondsByNode {
			by[k] = fmt.Sprintf("%.2f", c)
		}
		fmt.Fprintf(w, "  servers      pids %s: cpu %.2f s (%s) over the %.1f s run (%.0f%% of one core), %.2f s to connect\n",
			joinInts(r.ServerPIDs, ", "), r.ServerCPUSeconds, strings.Join(by, " + "), r.RunSeconds, r.ServerCPUPercent, r.ServerCPUConnectSeconds)
		fmt.Fprintf(w, "               cpu %.2f µs per delivery, all of them\n", r.ServerCPUPerDeliveryMicros)
		fmt.Fprintf(w, "               rss %s idle, %s connected, %s at the end, all of them: %s per connection\n",
			mib(r.ServerRSSIdleBytes), mib(r.ServerRSSConnectedBytes), mib(r.ServerRSSEndBytes), kib(r.RSSPerConnBytes))
	case r.ServerPID > 0:
		fmt.Fprintf(w, "  server       pid %d: cpu %.2f s over the %.1f s run (%.0f%% of one core), %.2f s to connect\n",
			r.ServerPID, r.ServerCPUSeconds, r.RunSeconds, r.ServerCPUPercent, r.ServerCPUConnectSeconds)
		fmt.Fprintf(w, "               cpu %.2f µs per delivery\n", r.ServerCPUPerDeliveryMicros)
		fmt.Fprintf(w, "               rss %s idle, %s connected, %s at the end: %s per connection\n",
			mib(r.ServerRSSIdleBytes), mib(r.ServerRSSConnectedBytes), mib(r.ServerRSSEndBytes), kib(r.RSSPerConnBytes))
	}
	if x := r.Redis; x != nil {
		event := "publication"
		if r.Mode == "table" {
			event = "change"
		}
		fmt.Fprintf(w, "  redis        per %s: %.2f commands (%.2f of them scripts), %.0f B in, %.0f B out; cpu %.2f µs per delivery\n",
			event, x.CommandsPerEvent, x.ScriptsPerEvent, x.InputBytesPerEvent, x.OutputBytesPerEvent, x.CPUMicrosPerDelivery)
		if r.Transactions > 0 {
			per := float64(r.Sent) / float64(r.Transactions)
			fmt.Fprintf(w, "               per transaction (%.1f changes): %.2f commands, %.0f B in, %.0f B out\n",
				per, per*x.CommandsPerEvent, per*x.InputBytesPerEvent, per*x.OutputBytesPerEvent)
		}
		fmt.Fprintf(w, "               by command, per %s: %s\n", event, topCommands(x.ByCommandPerEvent, 8, func(v float64) string { return fmt.Sprintf("%.2f", v) }))
		fmt.Fprintf(w, "               over the run: %d commands, %d B in, %d B out in %.1f s; idle beforehand: %d commands in %.1f s (its rate taken off the figures per %s)\n",
			x.Run.Commands, x.Run.InputBytes, x.Run.OutputBytes, x.Run.Seconds, x.Idle.Commands, x.Idle.Seconds, event)
	}
	if len(r.ClusterItemsSent) > 0 || len(r.ClusterItemsReceived) > 0 {
		fmt.Fprintf(w, "  between nodes items sent %s; received %s\n", kinds(r.ClusterItemsSent, r.Sent), kinds(r.ClusterItemsReceived, r.Sent))
	}
	fmt.Fprintf(w, "  client       cpu %.2f s over the run (this process: subscribers and sender)\n", r.ClientCPUSeconds)
	fmt.Fprintf(w, "  load average %s at the start, %s at the end (1, 5, 15 min)\n", r.LoadStart, r.LoadEnd)
}

// joinInts prints whole numbers with a separator.
func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for k, n := range v {
		s[k] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

// kinds prints counts by kind, each with its share per event.
func kinds(m map[string]int64, events int64) string {
	if len(m) == 0 {
		return "none"
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for i, k := range ks {
		ks[i] = fmt.Sprintf("%s %d", k, m[k])
		if events > 0 {
			ks[i] += fmt.Sprintf(" (%.2f per event)", float64(m[k])/float64(events))
		}
	}
	return strings.Join(ks, ", ")
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
