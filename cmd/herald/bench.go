package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/bench"
)

const benchUsage = `usage: herald bench [--subs 100] [--events 10000] [--rate 0] [--duration 60s]
         [--table public.bench_items [--filter JSON] [--updates] | --channel bench/load]
         [--policy N] [--transport ws|sse] [--target URL[,URL...] [--allow-remote] [--pid N[,N...]] [--api-key K] [--database-url URL]]
         [--nodes N] [--redis-url URL [--redis-idle 2s]] [--publish round-robin|first] [--warm-up]
         [--json]
       herald bench --idle [--subs 1000] [--hold 50s] [--settle 5s] [--transport ws|sse] [--json]
       herald bench --floor [--subs 1000] [--events 300] [--rate 10] [--group 0] [--json]

Measures a Herald node: opens --subs subscriber connections, produces --events events at --rate
per second (0: as fast as the node takes them), and reports deliveries per second, the latency
from commit (table mode) or publish (channel mode) to receipt, resyncs, and the node's CPU time
and memory per connection. It stops by itself: when every delivery has arrived, when they stop
coming, or after --duration.

Without --target it starts the node itself, as a child process: this binary's "herald serve"
on a free loopback port, measured through /proc. Table mode (--table) also starts a private
PostgreSQL (as herald dev does), creates the bench table there,
  <table>(id bigserial primary key, org_id text, payload text, sent_at timestamptz),
and has the node stream that table alone; events are INSERTs (and UPDATEs with --updates),
committed a few rows per transaction at the rate, each row carrying its send time. Channel mode
(the default) publishes through POST /v1/publish.

With --target it measures a node already running: loopback only unless --allow-remote; CPU and
memory only with --pid; channel mode needs --api-key, table mode --database-url (env
HERALD_DATABASE_URL) of the database the node streams and a table with the columns above that
the node streams (herald bench creates it if missing, but a node reads its tables when it
starts).

--idle measures what idle connections cost instead: --subs connections, each subscribed to one
channel nothing is published to, are opened and left to settle, and the node's CPU time over
--hold (make it a whole number of ping intervals, 50s unless the node sets another), its memory
per connection and its goroutines per connection are reported.

--floor measures this machine instead of a node: the same shape of load (--subs, --events at
--rate, each to every subscriber, or with --group G to G subscribers in turn, as a row rule
spreading changes over tenants does) served by a plain TCP server in a child process that writes
each 100-byte message to each subscriber with one write(2) and nothing else: no framing, no
encoding, no protocol. Its latency and CPU per delivery are what any server with one connection
per subscriber starts from on this machine; read a node's figures against them.

--policy N (table mode, own node) measures the policy gate: the node's config gives the table
the row rule "row.org_id == auth.org_id", the rows are spread over N organisations in turn, and
subscriber i connects with a token for organisation i mod N, so each row reaches a N-th of the
subscribers (those the rule allows), and the deliveries expected are events x subs / N.

--node-binary starts the node from another herald binary than this one, e.g. to compare two
builds under the same client.

Several nodes: --nodes N starts N nodes sharing the Redis at --redis-url (keys under a fresh
prefix), one after the other (in table mode the first leads the changefeed and the others
follow it, all on one private PostgreSQL); --target a,b,c measures running ones (--pid with
their process ids, in any number: CPU and memory are summed over the processes given).
Subscriber i connects to node i mod N; channel mode publishes through each node in turn
(--publish round-robin, as a load balancer spreads requests) or through the first (--publish
first). Deliveries are counted at the subscribers and latency runs from publish (or commit) to
receipt whichever node a subscriber is on; CPU per delivery is over all the nodes' CPU time.

--redis-url, with one node or several, also reads that Redis's INFO counters (one server, not a
Cluster): over --redis-idle with every subscriber connected and nothing flowing, then over the
run. The report gives its commands (those its scripts run included), script calls, bytes in and
out per event with the idle rate taken off, its CPU per delivery, and the items the nodes sent
each other (herald_cluster_items_*_total from their /metrics).

--warm-up, once every subscriber is connected, produces one event without a send time through
each node that publishes (or commits one row) and waits a second before measuring: a node's
first look-up of which nodes hold a channel or table reads every subscription's row from Redis,
a cost per change of subscriptions rather than per event.

Progress goes to stderr every second; the report to stdout (--json: one JSON object).

flags:
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var (
		cfg         bench.Config
		filter      string
		target      = fs.String("target", "", "measure this running node (http://127.0.0.1:8080) instead of starting one")
		allowRemote = fs.Bool("allow-remote", false, "allow a --target that is not on this machine")
		asJSON      = fs.Bool("json", false, "print the report as one JSON object")
		nodeLog     = fs.Bool("node-log", false, "pass the started node's log through to stderr")
		cpuProfile  = fs.String("cpuprofile", "", "write this process's CPU profile (the subscribers and the sender) to a file")
		idle        = fs.Bool("idle", false, "measure idle connections: no events, the node's CPU over --hold and its memory per connection")
		hold        = fs.Duration("hold", 50*time.Second, "with --idle: the measured window")
		settle      = fs.Duration("settle", 5*time.Second, "with --idle: the wait between the last connection and the window")
		nodeBinary  = fs.String("node-binary", "", "start the node from this herald binary instead of this one")
		floor       = fs.Bool("floor", false, "measure this machine's floor: the same load over plain TCP, with no Herald")
		floorServe  = fs.Bool("floor-serve", false, "the floor's server (started by --floor)")
		group       = fs.Int("group", 0, "with --floor: each message to this many subscribers in turn; 0: to every one")
		tenants     = fs.Int("policy", 0, "table mode, policy mode: the node's row rule shows each subscriber its own organisation's rows ("+bench.PolicyRowRule+"), with the subscribers and the rows spread over this many organisations")
	)
	fs.IntVar(&cfg.Subs, "subs", 100, "subscribers, one connection each")
	fs.IntVar(&cfg.Events, "events", 10000, "events to produce")
	fs.Float64Var(&cfg.Rate, "rate", 0, "events per second; 0: as fast as possible")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "stop after this long from the first event")
	fs.StringVar(&cfg.Table, "table", "", "table mode: subscribe to and write this table, e.g. public.bench_items")
	fs.StringVar(&filter, "filter", "", "table mode: the subscriptions' filter, as JSON")
	fs.BoolVar(&cfg.Updates, "updates", false, "table mode: every other transaction updates the rows the one before inserted")
	fs.StringVar(&cfg.Channel, "channel", "", "channel mode: the channel (default bench/load)")
	fs.StringVar(&cfg.Transport, "transport", "ws", "ws (WebSocket) or sse")
	fs.StringVar(&cfg.Token, "token", "", "access token every subscriber sends; none: anonymous")
	fs.IntVar(&cfg.Publishers, "publishers", 8, "channel mode: concurrent publish requests")
	fs.Var(intList{&cfg.ServerPIDs}, "pid", "with --target: the nodes' process ids, comma-separated, to measure their CPU and memory")
	nodes := fs.Int("nodes", 1, "start this many nodes sharing --redis-url; subscribers go to them in turn")
	fs.StringVar(&cfg.RedisURL, "redis-url", "", "the Redis the nodes share: started nodes use it; its INFO counters are read around the run")
	fs.DurationVar(&cfg.RedisIdle, "redis-idle", 2*time.Second, "with --redis-url: the quiet window before the first event whose Redis traffic is taken off the run's")
	fs.BoolVar(&cfg.WarmUp, "warm-up", false, "once connected, produce one unmeasured event through each node that publishes (a row in table mode), so first look-ups are not measured")
	fs.StringVar(&cfg.PublishVia, "publish", bench.PublishRoundRobin, "channel mode with several nodes: round-robin (each node in turn) or first")
	fs.StringVar(&cfg.APIKey, "api-key", "", "with --target, channel mode: the node's API key")
	fs.StringVar(&cfg.DatabaseURL, "database-url", os.Getenv("HERALD_DATABASE_URL"), "with --target, table mode: the database the node streams; env HERALD_DATABASE_URL")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q; see herald bench -h", fs.Arg(0))}
	}
	if filter != "" {
		cfg.Filter = json.RawMessage(filter)
	}
	if cfg.Table != "" && cfg.Channel != "" {
		return usageError{"give --table or --channel, not both"}
	}
	if *floor || *floorServe {
		fc := bench.FloorConfig{Subs: cfg.Subs, Events: cfg.Events, Rate: cfg.Rate, Group: *group, Duration: cfg.Duration}
		if err := fc.Validate(); err != nil {
			return usageError{err.Error()}
		}
		if *floorServe {
			return bench.FloorServe(ctx, fc, stdout)
		}
		return runFloor(ctx, fc, *asJSON, stdout, stderr)
	}
	if cfg.Table != "" {
		if _, err := bench.ParseTable(cfg.Table); err != nil {
			return usageError{err.Error()}
		}
	}
	var targets []string
	if *target != "" {
		targets = strings.Split(*target, ",")
	}
	if *target == "" && (len(cfg.ServerPIDs) != 0 || cfg.APIKey != "") {
		return usageError{"--pid and --api-key go with --target; without it herald bench starts and measures its own node"}
	}
	if *target != "" && *nodeBinary != "" {
		return usageError{"--node-binary starts a node; --target measures a running one: give one of them"}
	}
	if *tenants < 0 || *tenants > 0 && (cfg.Table == "" || *target != "") {
		return usageError{"--policy goes with --table, on a node herald bench starts (it makes the node's token secret)"}
	}
	if *idle && (cfg.Table != "" || *target != "" && len(cfg.ServerPIDs) == 0) {
		return usageError{"--idle subscribes to a channel and measures the node's process: not with --table, and --target needs --pid"}
	}
	if *nodes < 1 || *nodes > 1 && *target != "" {
		return usageError{"--nodes starts that many nodes (at least 1); with --target, list the running nodes' URLs instead"}
	}
	if *nodes > 1 && cfg.RedisURL == "" {
		return usageError{"--nodes above 1 needs --redis-url: the nodes share their state through Redis"}
	}
	if *idle && (*nodes > 1 || len(targets) > 1 || cfg.RedisURL != "") {
		return usageError{"--idle measures one node: not with --nodes, several targets or --redis-url"}
	}
	if *tenants > 0 && *nodes > 1 {
		return usageError{"--policy measures one node: not with --nodes"}
	}
	if cfg.PublishVia != bench.PublishRoundRobin && cfg.PublishVia != bench.PublishFirst {
		return usageError{fmt.Sprintf("--publish %s: want round-robin or first", cfg.PublishVia)}
	}

	// Every subscriber holds a descriptor here and one in the node (which inherits this limit).
	if n, err := bench.RaiseFileLimit(uint64(cfg.Subs) + 4096); err != nil {
		fmt.Fprintf(stderr, "herald bench: could not raise the open file limit: %v\n", err)
	} else if n < uint64(cfg.Subs)+256 {
		fmt.Fprintf(stderr, "herald bench: the open file limit is %d, too few for %d subscribers; raise the hard limit (ulimit -Hn)\n", n, cfg.Subs)
	}

	if *target != "" {
		for _, t := range targets {
			if !*allowRemote && !bench.IsLoopback(t) {
				return usageError{fmt.Sprintf("--target %s is not on this machine; pass --allow-remote to load another host", t)}
			}
		}
		cfg.URLs = targets
		if cfg.Table != "" && cfg.DatabaseURL != "" {
			table, _ := bench.ParseTable(cfg.Table)
			if err := bench.CreateTable(ctx, cfg.DatabaseURL, table); err != nil {
				return err
			}
		}
	} else {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary to start a node with: %w", err)
		}
		if *nodeBinary != "" {
			exe = *nodeBinary
		}
		nc := bench.NodeConfig{Binary: exe, Table: cfg.Table, MaxConnections: cfg.Subs + 1000, RedisURL: cfg.RedisURL}
		if cfg.RedisURL != "" {
			nc.RedisPrefix = "herald-bench-" + bench.RandomID()
		}
		if *tenants > 0 {
			nc.RowRule, nc.Secret = bench.PolicyRowRule, bench.PolicySecret()
			if cfg.Tokens, err = bench.PolicyTokens(nc.Secret, *tenants); err != nil {
				return err
			}
			cfg.Tenants = *tenants
		}
		if *nodeLog {
			nc.Log = stderr
			nc.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		what := "a node"
		if *nodes > 1 {
			what = fmt.Sprintf("%d nodes", *nodes)
		}
		if cfg.RedisURL != "" {
			what += " sharing Redis (keys under " + nc.RedisPrefix + ")"
		}
		if cfg.Table != "" {
			what = "a private PostgreSQL and " + what + " streaming " + cfg.Table
		}
		fmt.Fprintf(stderr, "herald bench: starting %s ...\n", what)
		started, err := bench.StartNodes(ctx, nc, *nodes)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := bench.StopNodes(sctx, started); err != nil {
				fmt.Fprintf(stderr, "herald bench: stop the nodes: %v\n", err)
			}
		}()
		for _, node := range started {
			cfg.URLs = append(cfg.URLs, node.URL)
			cfg.ServerPIDs = append(cfg.ServerPIDs, node.PID)
			fmt.Fprintf(stderr, "herald bench: node pid %d on %s\n", node.PID, node.URL)
		}
		cfg.APIKey, cfg.DatabaseURL = started[0].APIKey, started[0].DatabaseURL
	}
	if len(cfg.URLs) > 0 {
		cfg.URL = cfg.URLs[0]
	}
	if len(cfg.ServerPIDs) > 0 {
		cfg.ServerPID = cfg.ServerPIDs[0]
	}
	if *idle {
		return runIdle(ctx, bench.IdleConfig{URL: cfg.URL, Token: cfg.Token, Transport: cfg.Transport, Subs: cfg.Subs, Channel: cfg.Channel,
			Hold: *hold, Settle: *settle, ServerPID: cfg.ServerPID, Progress: stderr}, *asJSON, stdout)
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	cfg.Progress = stderr
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintf(stderr, "herald bench: connecting %d subscribers ...\n", cfg.Subs)
	rep, err := bench.Run(ctx, cfg)
	if rep != nil {
		if *asJSON {
			b, _ := json.Marshal(rep)
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			rep.WriteText(stdout)
		}
	}
	return err
}

// runFloor starts the floor's server as a child process of this binary, runs the floor's client
// against it and reports.
func runFloor(ctx context.Context, fc bench.FloorConfig, asJSON bool, stdout, stderr io.Writer) error {
	if n, err := bench.RaiseFileLimit(uint64(fc.Subs) + 4096); err != nil || n < uint64(fc.Subs)+256 {
		fmt.Fprintf(stderr, "herald bench: the open file limit (%d) is too low for %d subscribers: raise the hard limit (ulimit -Hn)\n", n, fc.Subs)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to start the floor server with: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(sctx, exe, "bench", "--floor-serve", "--subs", strconv.Itoa(fc.Subs),
		"--events", strconv.Itoa(fc.Events), "--rate", strconv.FormatFloat(fc.Rate, 'g', -1, 64), "--group", strconv.Itoa(fc.Group))
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the floor server: %w", err)
	}
	defer cmd.Wait()
	defer cancel()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the floor server did not say its address: %w", err)
	}
	fc.Addr, fc.ServerPID, fc.Progress = strings.TrimSpace(addr), cmd.Process.Pid, stderr
	rep, err := bench.Floor(ctx, fc)
	if rep != nil {
		if asJSON {
			b, _ := json.Marshal(rep)
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			rep.WriteText(stdout)
		}
	}
	return err
}

// intList is a flag of comma-separated whole numbers.
type intList struct{ v *[]int }

func (l intList) String() string {
	if l.v == nil {
		return ""
	}
	s := make([]string, len(*l.v))
	for k, n := range *l.v {
		s[k] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l intList) Set(s string) error {
	*l.v = (*l.v)[:0]
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("%q: want process ids, comma-separated", s)
		}
		*l.v = append(*l.v, n)
	}
	return nil
}

func runIdle(ctx context.Context, cfg bench.IdleConfig, asJSON bool, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	rep, err := bench.Idle(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		b, _ := json.Marshal(rep)
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		rep.WriteText(stdout)
	}
	return nil
}
