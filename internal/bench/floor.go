package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A floor run measures the machine, not Herald: the same shape of load as a bench run (so many
// subscribers, so many messages at a rate, each to every subscriber or to a rotating group of
// them), served by a plain TCP server in a child process that does nothing but write each
// message to each of its subscribers, one write(2) per subscriber per message, with no framing,
// no encoding, no lanes and no protocol. What that costs in CPU and latency is the floor under
// any server on this machine with one connection per subscriber: a node's figures read against
// it, not against zero.

// FloorMessage is the size of a floor message in bytes: about a small publication's frame. It
// starts with the send time (unix ns) and the message's number, both little-endian uint64.
const FloorMessage = 100

// FloorConfig is one floor run. The server side (FloorServe) and the client side (Floor) take
// the same one.
type FloorConfig struct {
	Subs   int
	Events int
	Rate   float64 // messages per second; 0: as fast as the server writes them
	// Group, when above 0, sends each message to this many subscribers only, the next ones in
	// turn (message k to subscribers k*Group, k*Group+1, ... mod Subs), as a row rule or a filter
	// spreads changes over tenants; 0 sends each message to every subscriber.
	Group int

	// Client side.
	Addr      string        // the floor server's address
	ServerPID int           // the floor server's process, for its CPU time
	Drain     time.Duration // stop once nothing has arrived for this long after the last message is due (default 5s)
	Duration  time.Duration // stop at this long from the first message (default 60s)
	Progress  io.Writer     // progress lines; nil: none
}

// perMessage is how many subscribers each message goes to.
func (c FloorConfig) perMessage() int {
	if c.Group > 0 && c.Group < c.Subs {
		return c.Group
	}
	return c.Subs
}

// Validate says what is wrong with the run's shape, for a person.
func (c FloorConfig) Validate() error {
	switch {
	case c.Subs < 1:
		return errors.New("--subs: at least 1 subscriber")
	case c.Events < 1:
		return errors.New("--events: at least 1 message")
	case c.Rate < 0:
		return errors.New("--rate: 0 (as fast as possible) or more messages per second")
	case c.Group < 0:
		return errors.New("--group: 0 (every subscriber) or a number of subscribers per message")
	}
	return nil
}

// FloorServe is the floor's server: it listens on a loopback port, writes the address to out as
// one line, accepts cfg.Subs connections, waits for one byte on the first, sends cfg.Events
// messages at cfg.Rate and then closes every connection. The writes are shared over one
// goroutine per processor, each owning the connections whose index is its own modulo their
// number, so a connection's messages stay in order and no message is handed between goroutines
// per subscriber.
func FloorServe(ctx context.Context, cfg FloorConfig, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if _, err := fmt.Fprintf(out, "%s\n", ln.Addr()); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conns := make([]net.Conn, 0, cfg.Subs)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for len(conns) < cfg.Subs {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accepting subscriber %d of %d: %w", len(conns)+1, cfg.Subs, err)
		}
		conns = append(conns, c)
	}
	var start [1]byte
	if _, err := io.ReadFull(conns[0], start[:]); err != nil {
		return fmt.Errorf("waiting for the start: %w", err)
	}

	workers := min(runtime.GOMAXPROCS(0), len(conns))
	queues := make([]chan floorEvent, workers)
	var wg sync.WaitGroup
	for w := range queues {
		queues[w] = make(chan floorEvent, 1024)
		wg.Add(1)
		go func(w int, q <-chan floorEvent) {
			defer wg.Done()
			for ev := range q {
				for i := 0; i < ev.count; i++ {
					k := (ev.first + i) % len(conns)
					if k%workers == w {
						conns[k].Write(ev.msg) // a subscriber that left is the client's to count
					}
				}
			}
		}(w, queues[w])
	}
	per := cfg.perMessage()
	began := time.Now()
	for k := 0; k < cfg.Events && ctx.Err() == nil; k++ {
		if cfg.Rate > 0 {
			at := began.Add(time.Duration(float64(k) / cfg.Rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
		}
		msg := make([]byte, FloorMessage)
		binary.LittleEndian.PutUint64(msg, uint64(time.Now().UnixNano()))
		binary.LittleEndian.PutUint64(msg[8:], uint64(k))
		ev := floorEvent{msg: msg, first: k * per % len(conns), count: per}
		for _, q := range queues {
			q <- ev
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	return ctx.Err()
}

type floorEvent struct {
	msg          []byte
	first, count int
}

// FloorReport is what a floor run measured.
type FloorReport struct {
	Mode        string  `json:"mode"` // "floor"
	Subscribers int     `json:"subscribers"`
	Events      int     `json:"events"`
	Rate        float64 `json:"rate"`
	Group       int     `json:"group,omitempty"`
	Stopped     Stopped `json:"stopped"`

	Expected            int64   `json:"expected"`
	Received            int64   `json:"received"`
	Seconds             float64 `json:"seconds"` // from the start to the last receipt
	DeliveriesPerSecond float64 `json:"deliveries_per_second"`
	LatencyMS           Latency `json:"latency_ms"`

	ServerPID                  int     `json:"server_pid"`
	ServerCPUSeconds           float64 `json:"server_cpu_seconds"`
	ServerCPUPerDeliveryMicros float64 `json:"server_cpu_us_per_delivery"`
	ClientCPUSeconds           float64 `json:"client_cpu_seconds"`
	ClientCPUPerDeliveryMicros float64 `json:"client_cpu_us_per_delivery"`

	LoadStart string `json:"load_average_start"`
	LoadEnd   string `json:"load_average_end"`
}

// Floor is the floor's client: it connects cfg.Subs subscribers to the floor server at
// cfg.Addr, one goroutine reading each, starts it, and measures each message from its send
// time to its receipt, and both processes' CPU time, until every message has arrived, nothing
// has for cfg.Drain, or cfg.Duration has passed.
func Floor(ctx context.Context, cfg FloorConfig) (*FloorReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 5 * time.Second
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 60 * time.Second
	}
	rep := &FloorReport{Mode: "floor", Subscribers: cfg.Subs, Events: cfg.Events, Rate: cfg.Rate, Group: cfg.Group,
		ServerPID: cfg.ServerPID, Expected: int64(cfg.Events) * int64(cfg.perMessage()), LoadStart: loadAverage()}
	var d net.Dialer
	conns := make([]net.Conn, 0, cfg.Subs)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for len(conns) < cfg.Subs {
		c, err := d.DialContext(ctx, "tcp", cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("connecting subscriber %d of %d to %s: %w", len(conns)+1, cfg.Subs, cfg.Addr, err)
		}
		conns = append(conns, c)
	}
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "herald bench --floor: %d subscribers connected\n", len(conns))
	}

	var (
		hist     histogram
		received atomic.Int64
		lastNS   atomic.Int64
		wg       sync.WaitGroup
	)
	for _, c := range conns {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			r := bufio.NewReaderSize(c, 4*FloorMessage)
			var msg [FloorMessage]byte
			for {
				if _, err := io.ReadFull(r, msg[:]); err != nil {
					return
				}
				now := time.Now().UnixNano()
				hist.record(time.Duration(now - int64(binary.LittleEndian.Uint64(msg[:]))))
				received.Add(1)
				lastNS.Store(now)
			}
		}(c)
	}

	serverBefore, _ := procCPU(cfg.ServerPID)
	clientBefore := selfCPU()
	start := time.Now()
	if _, err := conns[0].Write([]byte{1}); err != nil {
		return nil, fmt.Errorf("starting the floor server: %w", err)
	}
	rep.Stopped = floorWatch(ctx, cfg, rep.Expected, &received, start)
	serverAfter, err := procCPU(cfg.ServerPID)
	clientAfter := selfCPU()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()

	rep.Received = received.Load()
	if last := lastNS.Load(); last > 0 {
		rep.Seconds = time.Unix(0, last).Sub(start).Seconds()
	}
	if rep.Seconds > 0 {
		rep.DeliveriesPerSecond = float64(rep.Received) / rep.Seconds
	}
	rep.LatencyMS = *hist.latency()
	rep.ClientCPUSeconds = (clientAfter - clientBefore).Seconds()
	if err == nil {
		rep.ServerCPUSeconds = (serverAfter - serverBefore).Seconds()
	}
	if rep.Received > 0 {
		rep.ServerCPUPerDeliveryMicros = 1e6 * rep.ServerCPUSeconds / float64(rep.Received)
		rep.ClientCPUPerDeliveryMicros = 1e6 * rep.ClientCPUSeconds / float64(rep.Received)
	}
	rep.LoadEnd = loadAverage()
	return rep, ctx.Err()
}

// floorWatch waits for the end of a floor run and says why it ended, printing progress each
// second.
func floorWatch(ctx context.Context, cfg FloorConfig, expected int64, received *atomic.Int64, start time.Time) Stopped {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, lastMove, lastPrint := int64(0), time.Now(), time.Now()
	// The server sends on a schedule the client knows: nothing arriving between two paced
	// messages is no drain, however long the interval.
	lastSent := start
	if cfg.Rate > 0 {
		lastSent = start.Add(time.Duration(float64(cfg.Events-1) / cfg.Rate * float64(time.Second)))
	}
	for {
		select {
		case <-ctx.Done():
			return StoppedCanceled
		case now := <-tick.C:
			got := received.Load()
			if got != last {
				last, lastMove = got, now
			}
			if cfg.Progress != nil && now.Sub(lastPrint) >= time.Second {
				lastPrint = now
				fmt.Fprintf(cfg.Progress, "herald bench --floor: %d of %d received\n", got, expected)
			}
			switch {
			case got >= expected:
				return StoppedDone
			case now.Sub(start) > cfg.Duration:
				return StoppedDuration
			case now.Sub(lastMove) > cfg.Drain && now.Sub(lastSent) > cfg.Drain:
				return StoppedDrained
			}
		}
	}
}

// WriteText writes the report for a person.
func (r *FloorReport) WriteText(w io.Writer) {
	to := "every subscriber"
	if r.Group > 0 && r.Group < r.Subscribers {
		to = fmt.Sprintf("%d subscribers in turn", r.Group)
	}
	fmt.Fprintf(w, "floor: plain TCP, no Herald; %d subscribers, %d messages %s, each to %s\n",
		r.Subscribers, r.Events, rateText(r.Rate), to)
	fmt.Fprintf(w, "stopped: %s\n", r.Stopped)
	fmt.Fprintf(w, "received: %d of %d in %.2fs (%.0f deliveries/s)\n", r.Received, r.Expected, r.Seconds, r.DeliveriesPerSecond)
	l := r.LatencyMS
	fmt.Fprintf(w, "latency send->receipt (ms): p50 %.1f  p95 %.1f  p99 %.1f  max %.1f\n", l.P50, l.P95, l.P99, l.Max)
	fmt.Fprintf(w, "server CPU: %.2fs, %.2f µs per delivery\n", r.ServerCPUSeconds, r.ServerCPUPerDeliveryMicros)
	fmt.Fprintf(w, "client CPU: %.2fs, %.2f µs per delivery\n", r.ClientCPUSeconds, r.ClientCPUPerDeliveryMicros)
	fmt.Fprintf(w, "load average: %s -> %s\n", r.LoadStart, r.LoadEnd)
}

// rateText says a run's rate for a person.
func rateText(rate float64) string {
	if rate == 0 {
		return "as fast as possible"
	}
	return fmt.Sprintf("at %g/s", rate)
}
