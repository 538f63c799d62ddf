package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// IdleConfig is one idle run: connections that connect, subscribe, and then have nothing to
// receive, while the node's CPU time and memory are measured. The zero value of each optional
// field means its default.
type IdleConfig struct {
	// URL is the node's base URL: http://host:port.
	URL string
	// Token is sent by every connection; empty connects anonymously.
	Token string
	// Transport is TransportWebSocket (default) or TransportSSE.
	Transport string
	// Subs is the number of connections, each with one channel subscription. Default 1000.
	Subs int
	// Channel every connection subscribes to; nothing is published to it. Default "bench/idle".
	Channel string
	// Settle is how long to wait after the last connection opened before the window starts,
	// so the window holds no handshake. Default 5s.
	Settle time.Duration
	// Hold is the measured window. Make it a whole number of the node's ping intervals (its
	// limits.ping_interval, 50s unless set), so every connection is pinged equally often in
	// it, whatever moment it connected at. Default 50s.
	Hold time.Duration
	// ServerPID is the node's process, whose CPU time and memory are read from /proc.
	// Required.
	ServerPID int
	// DialConcurrency bounds the connections being opened at once. Default 64.
	DialConcurrency int
	// Progress receives a line as each phase begins; nil: none.
	Progress io.Writer
}

func (c IdleConfig) withDefaults() IdleConfig {
	if c.Transport == "" {
		c.Transport = TransportWebSocket
	}
	if c.Subs == 0 {
		c.Subs = 1000
	}
	if c.Channel == "" {
		c.Channel = "bench/idle"
	}
	if c.Settle <= 0 {
		c.Settle = 5 * time.Second
	}
	if c.Hold <= 0 {
		c.Hold = 50 * time.Second
	}
	if c.DialConcurrency <= 0 {
		c.DialConcurrency = 64
	}
	return c
}

// Validate reports an IdleConfig Idle cannot use.
func (c IdleConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("bench: URL is required"))
	}
	if c.Transport != TransportWebSocket && c.Transport != TransportSSE {
		errs = append(errs, fmt.Errorf("bench: transport %q: want ws or sse", c.Transport))
	}
	if c.Subs < 1 {
		errs = append(errs, fmt.Errorf("bench: subs %d: want at least 1", c.Subs))
	}
	if c.ServerPID <= 0 {
		errs = append(errs, errors.New("bench: an idle run measures the node's process: its pid is required"))
	}
	return errors.Join(errs...)
}

// IdleReport is what an idle run measured.
type IdleReport struct {
	Transport   string `json:"transport"`
	URL         string `json:"url"`
	ServerPID   int    `json:"server_pid"`
	Subscribers int    `json:"subscribers"`
	Connected   int    `json:"connected"`

	HoldSeconds      float64 `json:"hold_seconds"`       // the measured window, wall clock
	ServerCPUSeconds float64 `json:"server_cpu_seconds"` // the node's user+system CPU in the window
	// ServerCores is ServerCPUSeconds / HoldSeconds: the share of one core the idle
	// connections cost.
	ServerCores float64 `json:"server_cores"`
	// ServerCPUPerConnMicros is the CPU per connection per second of the window, in µs.
	ServerCPUPerConnMicros  float64 `json:"server_cpu_per_conn_us_per_s"`
	ServerCPUConnectSeconds float64 `json:"server_cpu_connect_seconds"` // opening them

	// RSS of the node with no connection, once they have settled, and at the window's end.
	RSSZeroBytes    int64 `json:"rss_zero_bytes"`
	RSSSettledBytes int64 `json:"rss_settled_bytes"`
	RSSEndBytes     int64 `json:"rss_end_bytes"`
	// RSSPerConnBytes is (RSSEndBytes - RSSZeroBytes) / Connected.
	RSSPerConnBytes int64 `json:"rss_per_conn_bytes"`
	// Goroutines in the node (its go_goroutines metric) with no connection and at the end;
	// -1 when the metric could not be read.
	GoroutinesZero    int     `json:"goroutines_zero"`
	GoroutinesEnd     int     `json:"goroutines_end"`
	GoroutinesPerConn float64 `json:"goroutines_per_conn"`

	// Ended counts connections that ended before the window was over, by close code or
	// "dropped": an idle connection should not end.
	Ended            map[string]int `json:"ended,omitempty"`
	ClientCPUSeconds float64        `json:"client_cpu_seconds"` // this process, in the window
	LoadStart        string         `json:"load_average_start"`
	LoadEnd          string         `json:"load_average_end"`
}

// Idle opens cfg.Subs connections, each subscribed to one channel nothing is published to,
// waits cfg.Settle, then measures the node over cfg.Hold. Every connection is read throughout,
// so a WebSocket client answers the node's pings and an SSE stream's keepalives are taken in,
// as a live client's would be. It closes them all before it returns.
func Idle(ctx context.Context, cfg IdleConfig) (*IdleReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &IdleReport{Transport: cfg.Transport, URL: cfg.URL, ServerPID: cfg.ServerPID, Subscribers: cfg.Subs,
		LoadStart: loadAverage()}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	zeroCPU, err := procCPU(cfg.ServerPID)
	if err != nil {
		return nil, err
	}
	if r.RSSZeroBytes, err = procRSS(cfg.ServerPID); err != nil {
		return nil, err
	}
	r.GoroutinesZero = goroutines(ctx, cfg.URL)

	progress("herald bench: connecting %d idle %s subscribers ...", cfg.Subs, cfg.Transport)
	spec := subSpec{channel: cfg.Channel, token: cfg.Token}
	subs, _, err := connect(ctx, Config{URLs: []string{cfg.URL}, Transport: cfg.Transport, Subs: cfg.Subs, DialConcurrency: cfg.DialConcurrency}, spec)
	r.Connected = len(subs)
	if err != nil {
		closeAll(subs)
		return nil, err
	}
	var (
		t      tally
		wg     sync.WaitGroup
		endsMu sync.Mutex
		ends   = map[string]int{} // guarded by endsMu
	)
	for _, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(&t); err != nil { // nil once closeAll closed it
				endsMu.Lock()
				ends[closeReason(err)]++
				endsMu.Unlock()
			}
		}()
	}
	defer func() {
		closeAll(subs)
		wg.Wait()
	}()

	progress("herald bench: %d connected; settling for %s ...", len(subs), cfg.Settle)
	if err := sleep(ctx, cfg.Settle); err != nil {
		return nil, err
	}
	startCPU, err := procCPU(cfg.ServerPID)
	if err != nil {
		return nil, err
	}
	if r.RSSSettledBytes, err = procRSS(cfg.ServerPID); err != nil {
		return nil, err
	}
	r.ServerCPUConnectSeconds = (startCPU - zeroCPU).Seconds()
	clientStart, start := selfCPU(), time.Now()

	progress("herald bench: measuring the node over %s ...", cfg.Hold)
	if err := sleep(ctx, cfg.Hold); err != nil {
		return nil, err
	}
	endCPU, err := procCPU(cfg.ServerPID)
	if err != nil {
		return nil, err
	}
	hold := time.Since(start)
	r.ClientCPUSeconds = (selfCPU() - clientStart).Seconds()
	if r.RSSEndBytes, err = procRSS(cfg.ServerPID); err != nil {
		return nil, err
	}
	r.GoroutinesEnd = goroutines(ctx, cfg.URL)

	r.HoldSeconds = hold.Seconds()
	r.ServerCPUSeconds = (endCPU - startCPU).Seconds()
	r.ServerCores = r.ServerCPUSeconds / r.HoldSeconds
	r.ServerCPUPerConnMicros = r.ServerCores * 1e6 / float64(r.Connected)
	r.RSSPerConnBytes = (r.RSSEndBytes - r.RSSZeroBytes) / int64(r.Connected)
	if r.GoroutinesZero >= 0 && r.GoroutinesEnd >= 0 {
		r.GoroutinesPerConn = float64(r.GoroutinesEnd-r.GoroutinesZero) / float64(r.Connected)
	}
	endsMu.Lock()
	if len(ends) > 0 {
		r.Ended = ends
	}
	endsMu.Unlock()
	r.LoadEnd = loadAverage()
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// goroutines reads the node's go_goroutines metric, or returns -1.
func goroutines(ctx context.Context, base string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpBase(base)+"/metrics", nil)
	if err != nil {
		return -1
	}
	// No keep-alive: a connection left idle would be one more goroutine in the next count.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1
			}
			return int(n)
		}
	}
	return -1
}

// WriteText writes the report for a person.
func (r *IdleReport) WriteText(w io.Writer) {
	tr := "WebSocket"
	if r.Transport == TransportSSE {
		tr = "SSE"
	}
	fmt.Fprintf(w, "herald bench --idle: %d %s connections (%d connected), one channel subscription each, nothing flowing\n",
		r.Subscribers, tr, r.Connected)
	fmt.Fprintf(w, "  server cpu   %.2f s over %.1f s: %.4f cores (%.2f%% of one), %.2f µs per connection per second; %.2f s to connect\n",
		r.ServerCPUSeconds, r.HoldSeconds, r.ServerCores, 100*r.ServerCores, r.ServerCPUPerConnMicros, r.ServerCPUConnectSeconds)
	fmt.Fprintf(w, "  server rss   %s with none, %s settled, %s at the end: %s per connection\n",
		mib(r.RSSZeroBytes), mib(r.RSSSettledBytes), mib(r.RSSEndBytes), kib(r.RSSPerConnBytes))
	if r.GoroutinesZero >= 0 && r.GoroutinesEnd >= 0 {
		fmt.Fprintf(w, "  goroutines   %d with none, %d at the end: %.2f per connection\n", r.GoroutinesZero, r.GoroutinesEnd, r.GoroutinesPerConn)
	}
	if len(r.Ended) > 0 {
		var ks []string
		for k, v := range r.Ended {
			ks = append(ks, fmt.Sprintf("%s x%d", k, v))
		}
		fmt.Fprintf(w, "  ended early  %s\n", strings.Join(ks, ", "))
	}
	fmt.Fprintf(w, "  client       cpu %.2f s in the window\n", r.ClientCPUSeconds)
	fmt.Fprintf(w, "  load average %s at the start, %s at the end (1, 5, 15 min)\n", r.LoadStart, r.LoadEnd)
}
