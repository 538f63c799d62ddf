// Package server is Herald's composition root: it builds the verifier, the channel hub and the
// transports from one Config, serves them over HTTP, and shuts them down in order.
//
// Run owns the listener, the HTTP server and every session's goroutines (through the
// handlers), and returns only once all of them have ended. Shutdown is ordered: stop
// accepting; tell every client to reconnect elsewhere (close 1012); let their writers drain
// within ShutdownTimeout; then close whatever is left.
package server

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/snapshot"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/transport/sse"
	"github.com/heraldrt/herald/internal/transport/websocket"
	"github.com/heraldrt/herald/internal/wire"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a server. The zero value of each optional field means its default.
type Config struct {
	// Listen is the address to serve on. Default 127.0.0.1:8080.
	Listen string
	// AdminListen, when set, is a second address serving only /healthz, /readyz and
	// /metrics, with descriptors of its own: it answers while client sockets are at their cap.
	// The main address serves them too.
	AdminListen string
	// ListenBacklog is the accept backlog asked of the kernel, which caps it at
	// net.core.somaxconn. Default 0: the kernel's maximum.
	ListenBacklog int
	// FDReserve is how many of the process's open files are kept from client sockets, for
	// Postgres, Redis, peers, logs and the admin listener. Default 256.
	FDReserve int
	// ShutdownTimeout bounds the drain of a graceful shutdown. Default 10s.
	ShutdownTimeout time.Duration
	// APIKeys guard the HTTP publish API; none disables it.
	APIKeys []string
	// MaxConnections per node. Default 10000.
	MaxConnections int
	// MaxPublishBytes bounds the data of one publish, compacted, by a client or the HTTP API.
	// Default 64 KiB.
	MaxPublishBytes int
	// ConnectTimeout and PingInterval: see the websocket transport.
	ConnectTimeout, PingInterval time.Duration
	// SSEResumeWindow and SSEResumeStreams: see the sse transport's ResumeWindow and
	// ResumeStreams. A zero window keeps no ended stream.
	SSEResumeWindow  time.Duration
	SSEResumeStreams int
	// Session configures every session.
	Session session.Config
	// Auth configures token verification.
	Auth auth.Config
	// Changefeed, when set, streams the database's changes to table subscriptions.
	Changefeed *changefeed.Config
	// Policy is who may subscribe, publish and see which rows and columns
	// (docs/POLICY.md). The zero Rules is closed: no table or channel may be subscribed to
	// or published on. PolicyConfig bounds each evaluation.
	Policy       policy.Rules
	PolicyConfig policy.Config
	// Fanout bounds the channel hub's fan-out queues, and its History each channel's history
	// (in memory, or in Redis with Cluster); Bus and Broker are the server's own. Zero fields
	// take channel's defaults.
	Fanout channel.Config
	// Presence configures channel presence (the presence.* keys); its store is this node's
	// memory.
	Presence presence.Config
	// Durable bounds durable subscriptions (the durable.* keys); zero fields take durable's
	// defaults. Alone, a node keeps them in its memory.
	Durable durable.Limits
	// DurableTick and DurableOwnerTTL, when set, are how often the durable subscriptions'
	// leases are looked at, and how long a node's claim to feed one lasts (durable.Config);
	// tests set them.
	DurableTick, DurableOwnerTTL time.Duration
	// HistoryBytes and HistoryAge bound the table history a resumed subscription is replayed
	// from (changefeed.history_bytes, changefeed.history_age); zero: the defaults. On one node
	// they bound the router's one history of every table; among many, each table's history in
	// Redis.
	HistoryBytes int
	HistoryAge   time.Duration
	// Snapshots bounds the reads of table snapshots (the handoff.* keys: max_concurrent,
	// queue_wait, timeout, max_rows, max_bytes, page_rows, page_bytes; and lookback, the age
	// of a stalled synchronous commit), Handoff their hand-offs to the stream (early_bytes,
	// pending_bytes, lookback). Zero fields: the defaults; a zero Snapshots.Lookback is
	// Handoff's. Used with a changefeed.
	Snapshots snapshot.Config
	Handoff   router.HandoffConfig
	// Cluster, when its RedisURL is set, makes this node one of many sharing that Redis
	// (docs/ARCHITECTURE.md, Many nodes). The zero value: the node is alone.
	Cluster ClusterConfig
	// Ready, when set, is asked by /readyz: nil means ready, an error says why not.
	Ready  func() error
	Logger *slog.Logger

	// unavailableEvery is how often one cause of unavailable is logged; zero: ratelog's
	// default. Tests set it.
	unavailableEvery time.Duration
	// wrapSnapshots, when set, stands between the table snapshots and their reader: tests
	// slow reads down to widen their windows.
	wrapSnapshots func(snapshotReader) snapshotReader
	// schemaTTL, when set, is how long a table's description is trusted (pgSchema); tests
	// shorten it to see the catalog change at once.
	schemaTTL time.Duration
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = 10000
	}
	if c.FDReserve <= 0 {
		c.FDReserve = 256
	}
	if c.MaxPublishBytes <= 0 {
		c.MaxPublishBytes = 64 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Session.Logger == nil {
		c.Session.Logger = c.Logger
	}
	return c
}

// Server is one Herald node.
type Server struct {
	cfg      Config
	log      *slog.Logger
	verifier *auth.Verifier
	bus      *bus.Memory
	channels *channels
	presence *presence.Presence
	durable  *durable.Registry
	tables   *tables // nil without a changefeed
	policy   *gate
	// policyFailed carries the error that stopped the policy's compilation once the stream
	// went live: the node stops with it.
	policyFailed chan error
	metrics      *metrics
	unavail      *unavailable     // counts and logs every request refused as unavailable
	feed         *changefeed.Feed // nil without a changefeed
	schema       *pgSchema        // nil without a changefeed
	snapPool     *pgxpool.Pool    // the snapshot reader's; nil without a changefeed
	snapReader   *snapshot.Reader // nil without a changefeed
	slot         *slotWatch       // nil without a changefeed
	peers        *peers           // nil when the node is alone
	// guardNoted is set once what the snapshot reader's sync-standby guard can see has been
	// read (noteGuardAccess).
	guardNoted atomic.Bool

	conns       atomic.Int64                  // sessions admitted and not yet ended
	maxSessions atomic.Int64                  // the session limit: limits.max_connections, or less to fit the open-file limit
	gated       atomic.Pointer[gatedListener] // the client listener, once Run has bound it
	events      atomic.Pointer[sse.Handler]   // the SSE transport, once Run has built it
	// lanes sums the lane counters of every session the node ever had (delivery.Totals):
	// /metrics reads it without a walk over the sessions.
	lanes *delivery.Totals
	// ws and sse count each transport's connections, sessions and subscriptions.
	ws, sse *edge
	// draining is set as shutdown begins, before any connection is closed: /readyz fails
	// from then on, so load balancers stop sending new clients here.
	draining atomic.Bool

	mu       sync.Mutex
	sessions map[*session.Session]struct{} // guarded by mu
	closes   map[wire.CloseCode]uint64     // guarded by mu: ended sessions by close code
	// stopping is closed, under mu, when shutdown begins to close sessions; see Stopping.
	stopping chan struct{}

	addr      atomic.Value // string: the bound address, once listening
	adminAddr atomic.Value // string: the admin listener's address, once listening
	ready     chan struct{}
}

// New builds a server from cfg.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	lanes := new(delivery.Totals)
	cfg.Session.Lanes.Totals = lanes
	if err := cfg.Session.Validate(); err != nil {
		return nil, err
	}
	v, err := auth.New(cfg.Auth)
	if err != nil {
		return nil, err
	}
	pol, err := policy.New(cfg.Policy, cfg.PolicyConfig)
	if err != nil {
		return nil, err
	}
	// Every receiver the bus hands to is a local session; items from other nodes reach this
	// node's hub and router through the cluster node, and are handed on here like its own.
	b := bus.NewMemory()
	var pr *peers
	var presStore presence.Store = memory.NewPresence()
	fanout := cfg.Fanout
	if cfg.Cluster.Enabled() {
		if pr, err = newPeers(cfg.Cluster, history.Config{MaxBytes: cfg.HistoryBytes, MaxAge: cfg.HistoryAge}, cfg.Fanout.History, cfg.Durable, cfg.Logger); err != nil {
			return nil, err
		}
		fanout.Broker, fanout.Remote, presStore = pr.broker, pr, pr.presence
	}
	chans, err := newChannels(b, fanout, cfg.MaxPublishBytes)
	if err != nil {
		pr.close()
		return nil, err
	}
	unavail := newUnavailable(cfg.Logger, cfg.unavailableEvery)
	chans.unavail = unavail
	pcfg := cfg.Presence
	if pcfg.Logger == nil {
		pcfg.Logger = cfg.Logger
	}
	if pr != nil {
		// The node's id among the nodes leads presence's sweeps too; joins and leaves go to the
		// other nodes with the publications.
		pcfg.Node, pcfg.Relay = pr.id, pr
	}
	pres, err := presence.New(pcfg, presStore)
	if err != nil {
		pr.close()
		return nil, err
	}
	dcfg := durable.Config{Limits: cfg.Durable, Tick: cfg.DurableTick, OwnerTTL: cfg.DurableOwnerTTL, Logger: cfg.Logger}
	var dstore durable.Store = memory.NewDurable(cfg.Durable)
	if pr != nil {
		// Among many nodes the subscriptions are in Redis; deliveries to a connection on another
		// node go there with the publications.
		dcfg.Node, dcfg.Relay, dstore = pr.id, pr, pr.durable
	}
	dreg, err := durable.New(dcfg, dstore, durableFeed{chans})
	if err != nil {
		pr.close()
		return nil, err
	}
	if pr != nil {
		pr.durables = dreg
	}
	s := &Server{
		durable:  dreg,
		cfg:      cfg,
		log:      cfg.Logger,
		verifier: v,
		bus:      b,
		channels: chans,
		presence: pres,
		sessions: map[*session.Session]struct{}{},
		closes:   map[wire.CloseCode]uint64{},
		stopping: make(chan struct{}),
		ready:    make(chan struct{}),
		policy:   &gate{p: pol, refused: newRefusals(pol.Tables())},
		peers:    pr,
		lanes:    lanes,
		unavail:  unavail,

		policyFailed: make(chan error, 1),
	}
	chans.peers = pr
	if cfg.Changefeed == nil {
		if n := len(pol.Tables()); n > 0 {
			cfg.Logger.Warn("policy.tables has rules, but no changefeed streams tables (changefeed.database_url is unset): they are not used", "tables", n)
		}
		// Nothing to compile them against: no table can be subscribed to.
		s.policy.loaded = true
	}
	if cfg.Changefeed != nil {
		fc := *cfg.Changefeed
		if fc.Logger == nil {
			fc.Logger = cfg.Logger
		}
		if err := fc.Validate(); err != nil {
			return nil, err
		}
		schema, err := newPGSchema(context.Background(), fc.DatabaseURL, fc.PublicationName(), fc.SlotName())
		if err != nil {
			pr.close()
			return nil, err
		}
		if cfg.schemaTTL > 0 {
			schema.ttl = cfg.schemaTTL
		}
		// The snapshot reader's fence must reach the router: it moves a hand-off past its
		// snapshot however quiet the database is.
		if !slices.Contains(fc.MessagePrefixes, "*") && !slices.Contains(fc.MessagePrefixes, snapshot.FencePrefix) {
			fc.MessagePrefixes = append(slices.Clone(fc.MessagePrefixes), snapshot.FencePrefix)
		}
		rcfg := router.Config{Schema: schema, Tables: fc.Tables, Bus: b, Gate: s.policy, Handoff: cfg.Handoff}
		if pr == nil {
			// Among many nodes a node routes only the changes its subscriptions hold, so its own
			// history could not replay another subscription's: resumes there read the history
			// the replicator keeps in Redis (tables.share).
			rcfg.History = router.NewHistory(cfg.HistoryBytes, cfg.HistoryAge)
		}
		r, err := router.New(rcfg)
		if err != nil {
			schema.Close()
			pr.close()
			return nil, err
		}
		s.tables = &tables{router: r, walEnd: schema.WALEnd, peers: pr, confirmed: schema.Confirmed, log: cfg.Logger, unavail: unavail, refused: s.policy.refused,
			earlyBytes: cmp.Or(cfg.Handoff.EarlyBytes, handoff.DefaultEarlyBytes)}
		if pr != nil {
			s.tables.history = pr.history
		}
		// The table rules compile once the stream is live, when the publication they read the
		// tables through exists; until then the router is not live, and a subscription waits.
		fc.OnStream = func(start change.LSN) {
			if pr != nil {
				// This node replicates from start on: what it records in the tables' history
				// follows from there.
				pr.node.Streaming(start)
			}
			s.schemaStarted(context.Background())
			if err := s.policy.load(context.Background(), schema); err != nil {
				select {
				case s.policyFailed <- err:
				default:
				}
				return
			}
			s.noteGuardAccess(context.Background())
			r.Seed(start)
		}
		var sink changefeed.Sink = r
		if pr != nil {
			// The replicator routes each transaction to the other nodes too.
			if err := pr.start(chans.hub, s.tables, pres); err != nil {
				schema.Close()
				pr.close()
				return nil, err
			}
			sink = changefeed.SinkFunc(pr.node.Replicate)
		}
		feed, err := changefeed.New(fc, sink)
		if err != nil {
			schema.Close()
			pr.close()
			return nil, err
		}
		if err := cfg.Snapshots.Validate(); err != nil {
			schema.Close()
			pr.close()
			return nil, err
		}
		reads := cfg.Snapshots.MaxConcurrent
		if reads <= 0 {
			reads = snapshot.DefaultMaxConcurrent
		}
		snapPool, err := newSnapshotPool(context.Background(), fc.DatabaseURL, reads)
		if err != nil {
			schema.Close()
			pr.close()
			return nil, err
		}
		node := "herald"
		if pr != nil {
			node = pr.id
		}
		if cfg.Snapshots.Lookback <= 0 {
			// The reader's guard tells when the router's look-back fell short: one setting.
			cfg.Snapshots.Lookback = cmp.Or(cfg.Handoff.Lookback, router.DefaultLookback)
		}
		s.snapReader = snapshot.New(snapPool, cfg.Snapshots)
		var reader snapshotReader = s.snapReader
		if cfg.wrapSnapshots != nil {
			reader = cfg.wrapSnapshots(reader)
		}
		s.tables.snaps = newSnapshots(reader, cfg.Snapshots.Timeout, node, cfg.Logger)
		s.schema, s.feed, s.snapPool = schema, feed, snapPool
		s.slot = newSlotWatch(schema.pool, fc.SlotName(), cfg.Logger)
	}
	if pr != nil && pr.node == nil {
		if err := pr.start(chans.hub, nil, pres); err != nil {
			pr.close()
			return nil, err
		}
	}
	s.ws, s.sse = newEdge(s, "ws"), newEdge(s, "sse")
	s.metrics = newMetrics(s)
	return s, nil
}

// follow makes the router live on a node that does not replicate, once another node's stream
// is: the table rules compile against the publication the replicator keeps, and
// subscriptions start after the database's WAL end now (or past their table's mark).
func (s *Server) follow(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r := s.tables.router
		if r.Live() {
			return
		}
		if !s.peers.replicating() || s.feed.Stats().Leader {
			continue
		}
		s.schemaStarted(ctx)
		if err := s.policy.load(ctx, s.schema); err != nil {
			select {
			case s.policyFailed <- err:
			default:
			}
			return
		}
		end, err := s.schema.WALEnd(ctx)
		if err != nil {
			s.log.Warn("cluster: read the WAL end to follow the replicator; retrying", "error", err)
			continue
		}
		s.noteGuardAccess(ctx)
		r.Seed(end)
		s.log.Info("following another node's replication stream", "from", end.String())
		return
	}
}

// notReady reports why the node cannot serve its streams, or nil. The reasons, in the order
// they are asked (docs/OPERATIONS.md lists them): the node drains; the Ready hook; Redis
// unreachable, or no replicator's beacon; the replication stream down or starting.
func (s *Server) notReady() error {
	if s.draining.Load() {
		return errDraining
	}
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			return err
		}
	}
	if s.feed == nil {
		if s.peers != nil {
			return s.peers.notReady(false)
		}
		return nil
	}
	in := feedReadiness{feed: s.feed.Stats()}
	if s.peers != nil {
		in.cluster = true
		in.peersErr = s.peers.notReady(true)
		in.replicatorIsThis = s.peers.replicatorIsThis()
		in.routerLive = s.tables.router.Live()
	}
	return in.notReady()
}

// feedReadiness is what a node with a changefeed is ready by.
type feedReadiness struct {
	feed changefeed.Stats
	// cluster says the node shares Redis with others; peersErr is why that is not ready, nil
	// when it is (a replicator's beacon included); replicatorIsThis says the live beacon is
	// this node's own; routerLive says the router follows the replicator's stream.
	cluster          bool
	peersErr         error
	replicatorIsThis bool
	routerLive       bool
}

// notReady reports why the node cannot serve table streams, or nil. Among many nodes, one
// that follows another's live stream is ready once its router is; but this node's own stream
// going down is said as such, with its cause, both while its beacon outlives it and once no
// beacon is left, rather than as another node's absence.
func (in feedReadiness) notReady() error {
	st := in.feed
	if in.cluster {
		if in.peersErr != nil {
			if st.Failure != "" && !st.Streaming {
				return fmt.Errorf("%w; this node's replication stream is down: %s", in.peersErr, st.Failure)
			}
			return in.peersErr
		}
		if !st.Leader && !in.replicatorIsThis {
			// Another node replicates; this one routes what it sends once its router is live.
			if !in.routerLive {
				return fmt.Errorf("the replication stream is live on another node; this node is starting to follow it")
			}
			return nil
		}
	}
	// Only a live stream lets a table subscription start: until then the router has no
	// position to start it after. A leader still in preflight is not ready either.
	switch {
	case st.Streaming:
		return nil
	case st.Failure != "":
		return fmt.Errorf("the replication stream is down: %s", st.Failure)
	case st.Leader:
		return fmt.Errorf("the replication stream is starting")
	default:
		return fmt.Errorf("the replication stream is starting, or another node leads the slot")
	}
}

// errDraining is /readyz's reason once shutdown has begun.
var errDraining = errors.New("the node is draining: shutdown has begun, and its clients are being told to reconnect elsewhere")

// Addr is the address the server listens on, once Listening has fired.
func (s *Server) Addr() string {
	a, _ := s.addr.Load().(string)
	return a
}

// Listening is closed once the server accepts connections.
func (s *Server) Listening() <-chan struct{} { return s.ready }

// Authenticate turns a token into an identity: "" is the anonymous identity where the config
// allows it.
func (s *Server) Authenticate(token string) (auth.Identity, error) {
	if token == "" {
		return s.verifier.Anonymous()
	}
	return s.verifier.Verify(token)
}

// Admit reserves a connection slot.
func (s *Server) Admit() (func(), bool) {
	if s.conns.Add(1) > s.maxSessions.Load() {
		s.conns.Add(-1)
		return func() {}, false
	}
	var once sync.Once
	return func() { once.Do(func() { s.conns.Add(-1) }) }, true
}

// Track records a live session for shutdown. A session that comes after shutdown has taken
// its list of sessions to close is closed here instead, as they are.
func (s *Server) Track(sess *session.Session) func() {
	s.mu.Lock()
	s.sessions[sess] = struct{}{}
	select {
	case <-s.stopping:
		sess.Close(session.CloseShuttingDown, shuttingDown)
	default:
	}
	s.mu.Unlock()
	return func() {
		code := heraldv1.CloseCode(sess.CloseReason())
		s.mu.Lock()
		delete(s.sessions, sess)
		s.closes[code]++
		s.mu.Unlock()
		s.metrics.closes.WithLabelValues(code.String()).Inc()
	}
}

// Stopping is closed when shutdown begins to close sessions: a connection that has none yet
// closes itself then, with the same code.
func (s *Server) Stopping() <-chan struct{} { return s.stopping }

// shuttingDown is the close reason every client is given at shutdown.
const shuttingDown = "server shutting down; reconnect and resume from your positions"

// Closes counts ended sessions by close code.
func (s *Server) Closes() map[wire.CloseCode]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[wire.CloseCode]uint64, len(s.closes))
	for k, v := range s.closes {
		out[k] = v
	}
	return out
}

// Sessions is the number of live sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Run serves until ctx ends, then shuts down in order. It returns once every goroutine it
// started has ended. A changefeed that stops on a permanent error shuts the node down too, and
// Run returns that error.
func (s *Server) Run(ctx context.Context) error {
	ln, err := listen(s.cfg.Listen, s.cfg.ListenBacklog, s.cfg.PingInterval)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (set listen / HERALD_LISTEN to a free address)", s.cfg.Listen, err)
	}
	var admin net.Listener
	if s.cfg.AdminListen != "" {
		if admin, err = net.Listen("tcp", s.cfg.AdminListen); err != nil {
			ln.Close()
			return fmt.Errorf("listen on %s: %w (set admin_listen / HERALD_ADMIN_LISTEN to a free address)", s.cfg.AdminListen, err)
		}
		s.adminAddr.Store(admin.Addr().String())
		admin = newGatedListener(admin, adminSockets, s.log)
	}
	ln = s.gate(ln)
	s.addr.Store(ln.Addr().String())
	if s.peers != nil {
		url, err := advertiseURL(s.cfg.Cluster.AdvertiseURL, ln.Addr().String())
		if err == nil {
			err = s.peers.register(ctx, url)
		}
		if err != nil {
			ln.Close()
			if admin != nil {
				admin.Close()
			}
			return fmt.Errorf("cluster: %w", err)
		}
	}

	// Sessions live on base, not on ctx: a stopping server closes them itself, with the code
	// that tells clients to reconnect elsewhere, before their I/O is cut.
	base, stopBase := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBase()
	if s.peers != nil {
		// Among many nodes: the transport, the cluster node and the probe of Redis stop last,
		// once the sessions have let go of their interest and the changefeed has stopped.
		peersCtx, stopPeers := context.WithCancel(context.WithoutCancel(ctx))
		peersDone := make(chan struct{})
		go func() {
			defer close(peersDone)
			s.peers.run(peersCtx, func() bool { return s.feed != nil && s.feed.Stats().Streaming })
		}()
		defer func() { stopPeers(); <-peersDone }()
		if s.tables != nil {
			followed := make(chan struct{})
			go func() { defer close(followed); s.follow(peersCtx) }()
			defer func() { stopPeers(); <-followed }()
		}
	}
	deps := session.Deps{Channels: s.channels, Verifier: s.verifier, Policy: s.policy, Presence: presences{s.presence, s.unavail},
		Durable: durables{r: s.durable}}
	if s.peers != nil {
		deps.Durable = durables{r: s.durable, node: s.peers.id}
	}
	// The durable subscriptions' worker: it stops once the sessions have (they unbind as they
	// close), and ends the hub subscriptions that feed them.
	durableCtx, stopDurable := context.WithCancel(context.WithoutCancel(ctx))
	durableDone := make(chan struct{})
	go func() { defer close(durableDone); s.durable.Run(durableCtx) }()
	defer func() { stopDurable(); <-durableDone }()
	// Presence's one sweeper: it stops once the sessions have (they untrack as they close).
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	swept := make(chan struct{})
	go func() { defer close(swept); s.presence.Run(sweepCtx) }()
	defer func() { stopSweep(); <-swept }()
	if s.tables != nil {
		deps.Tables = s.tables
	}
	// The changefeed outlives the sessions: on shutdown it stops last, after the drain, and
	// confirms what was handed on.
	feedCtx, stopFeed := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFeed()
	// The feed's Run returns before a stop only on an error retrying cannot fix (a lost slot, a
	// refused password request, a table without a replica identity): the node stops with it,
	// rather than serving on with its tables dead until someone reads /readyz.
	feedDone := make(chan error, 1)
	var feedStopped <-chan error // nil, never ready, without a changefeed
	if s.feed != nil {
		go func() { feedDone <- s.feed.Run(feedCtx) }()
		feedStopped = feedDone
	} else {
		feedDone <- nil
	}
	feedEnded := false
	// The channel hub's fan-out goroutines stop once the HTTP server and the sessions have:
	// nothing publishes any more, and what was queued goes to sessions that are closing.
	defer s.channels.hub.Close()
	defer func() {
		stopFeed()
		if !feedEnded {
			<-feedDone
		}
		if s.schema != nil {
			s.schema.Close()
		}
		if s.snapPool != nil {
			// The sessions, whose snapshots read from it, have ended.
			s.snapPool.Close()
		}
	}()
	if s.slot != nil {
		// Before the catalog pool closes (the deferred stop above runs after this one).
		slotCtx, stopSlot := context.WithCancel(context.WithoutCancel(ctx))
		slotDone := make(chan struct{})
		go func() { defer close(slotDone); s.slot.run(slotCtx) }()
		defer func() { stopSlot(); <-slotDone }()
	}
	ws := websocket.New(base, websocket.Config{ConnectTimeout: s.cfg.ConnectTimeout, PingInterval: s.cfg.PingInterval, Session: s.ws.session(), Logger: s.log}, deps, s, s.ws)
	sseCfg := sse.Config{PingInterval: s.cfg.PingInterval, Session: s.sse.session(), Logger: s.log,
		ResumeWindow: s.cfg.SSEResumeWindow, ResumeStreams: s.cfg.SSEResumeStreams}
	if s.peers != nil {
		sseCfg.Node, sseCfg.Peers = s.peers.id, s.peers.nodes
	}
	events := sse.New(base, sseCfg, deps, s, s.sse)
	s.events.Store(events)

	mux := http.NewServeMux()
	mux.Handle("GET /v1/ws", ws)
	mux.HandleFunc("GET /v1/sse", events.Stream)
	mux.HandleFunc("POST /v1/sse/{session}", events.Command)
	mux.HandleFunc("POST /v1/sse/{session}/kept", events.Kept)
	mux.HandleFunc("POST /v1/publish", s.publish)
	s.adminRoutes(mux)

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return base }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	adminServed := make(chan error, 1)
	var adminSrv *http.Server
	if admin != nil {
		amux := http.NewServeMux()
		s.adminRoutes(amux)
		adminSrv = &http.Server{Handler: amux, ReadHeaderTimeout: 5 * time.Second}
		go func() { adminServed <- adminSrv.Serve(admin) }()
		s.log.Info("serving health and metrics", "addr", s.AdminAddr())
	}
	// The admin listener outlives the drain: health and metrics answer until the end.
	defer func() {
		if adminSrv != nil {
			_ = adminSrv.Close()
			<-adminServed
		}
	}()
	close(s.ready)
	s.log.Info("serving", "addr", ln.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case err := <-adminServed:
		adminSrv = nil
		stopBase()
		_ = srv.Close()
		<-served
		return fmt.Errorf("serve health and metrics: %w", err)
	case err := <-s.policyFailed:
		if serr := s.shutdown(srv, served, stopBase); serr != nil {
			s.log.Warn("shutdown after the policy failed to compile", "error", serr)
		}
		return err
	case err := <-feedStopped:
		feedEnded = true
		if err == nil {
			err = errors.New("the changefeed stopped")
		}
		if serr := s.shutdown(srv, served, stopBase); serr != nil {
			s.log.Warn("shutdown after the changefeed stopped", "error", serr)
		}
		return err
	case <-ctx.Done():
	}
	return s.shutdown(srv, served, stopBase)
}

// adminSockets caps the admin listener's open sockets: probes and scrapers, not clients.
const adminSockets = 64

func (s *Server) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metrics.handler())
}

// gate caps ln's open sockets below the open-file limit (see listener.go) and sets the
// session limit under the cap, saying so when limits.max_connections does not fit.
func (s *Server) gate(ln net.Listener) net.Listener {
	limit, err := fdLimit()
	if err != nil {
		s.log.Warn("cannot read the open-file limit; client sockets are not capped by it", "error", err)
		s.maxSessions.Store(int64(s.cfg.MaxConnections))
		return ln
	}
	sockets, sessions, clamped := socketBudget(limit, s.cfg.FDReserve, s.cfg.MaxConnections)
	if clamped {
		s.log.Warn("limits.max_connections lowered to fit the open-file limit",
			"max_connections", s.cfg.MaxConnections, "now", sessions, "open_file_limit", limit, "reserve", s.cfg.FDReserve,
			"fix", fmt.Sprintf("raise the open-file limit to at least %d (ulimit -n, systemd LimitNOFILE=), or lower limits.max_connections", s.cfg.MaxConnections+s.cfg.FDReserve+max(16, s.cfg.MaxConnections/16)),
			"client_sockets", sockets)
	}
	s.maxSessions.Store(int64(sessions))
	g := newGatedListener(ln, sockets, s.log)
	s.gated.Store(g)
	return g
}

// AdminAddr is the admin listener's address, once Listening has fired; "" without one.
func (s *Server) AdminAddr() string {
	a, _ := s.adminAddr.Load().(string)
	return a
}

// shutdown stops accepting, tells every client to go elsewhere, drains, then closes.
func (s *Server) shutdown(srv *http.Server, served <-chan error, stopBase func()) error {
	// First: /readyz fails before anything is closed, so a load balancer that probes it stops
	// sending clients here while those here are told to go.
	s.draining.Store(true)
	s.log.Info("shutting down", "sessions", s.Sessions(), "drain", s.cfg.ShutdownTimeout)
	drain, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(drain) }() // closes the listener at once
	s.mu.Lock()
	// Under mu with the list: a session is either on it or sees stopping closed in Track.
	close(s.stopping)
	live := make([]*session.Session, 0, len(s.sessions))
	for sess := range s.sessions {
		live = append(live, sess)
	}
	s.mu.Unlock()
	for _, sess := range live {
		sess.Close(session.CloseShuttingDown, shuttingDown)
	}
	for _, sess := range live {
		select {
		case <-sess.Done():
		case <-drain.Done():
		}
	}
	stopBase()
	err := <-shut
	if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("drain deadline passed; closing what is left")
		err = srv.Close()
	}
	<-served
	// Hijacked WebSocket handlers are not the HTTP server's to wait for; wait until every
	// admitted connection has let go of its slot, which each handler does last, whether it got
	// as far as a session or not.
	for deadline := time.Now().Add(s.cfg.ShutdownTimeout); (s.Sessions() > 0 || s.conns.Load() > 0) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.notReady(); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "unavailable", "reason": err.Error()})
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// publish serves POST /v1/publish: {"id"?, "channel", "event"?, "data"}, guarded by an API key
// in Authorization: Bearer. The body is decoded as strictly as a client's publish frame.
func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	if !s.apiKeyOK(r) {
		heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeUnauthorized,
			Message: "send an API key from api.keys as Authorization: Bearer <key>"})
		return
	}
	// The body may hold white space and the other fields beside data: 1 KiB more than data's
	// own limit, which channels.Publish checks once data is compacted.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxPublishBytes)+1024))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeFrameTooLarge, Field: "data",
				Message: fmt.Sprintf("the publish body is longer than limits.max_publish_bytes (%d bytes) and 1 KiB for the other fields; publish less per message", s.cfg.MaxPublishBytes)})
			return
		}
		heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeBadFrame, Err: err,
			Message: "the request body could not be read; send it again"})
		return
	}
	p, err := wire.DecodePublishRequest(body)
	if err != nil {
		we, ok := wire.AsError(err)
		if !ok {
			we = &wire.Error{Code: wire.CodeBadFrame, Message: err.Error()}
		}
		heraldv1.WriteHTTPError(w, we)
		return
	}
	pos, err := s.channels.Publish(p.Channel, p.Event, p.Data)
	if err != nil {
		heraldv1.WriteHTTPError(w, heraldv1.Refusal(p.ID, err, "channel"))
		return
	}
	id := p.ID
	if id == "" {
		id = "publish"
	}
	b, err := wire.AppendFrame(nil, &wire.Published{ID: id, Pos: pos})
	if err != nil {
		heraldv1.WriteHTTPError(w, &wire.Error{ID: p.ID, Code: wire.CodeInternal, Message: "the answer could not be encoded", Err: err})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (s *Server) apiKeyOK(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	if len(h) < 8 || !strings.EqualFold(h[:7], "bearer ") {
		return false
	}
	got := []byte(strings.TrimSpace(h[7:]))
	ok := false
	for _, k := range s.cfg.APIKeys {
		if subtle.ConstantTimeCompare(got, []byte(k)) == 1 {
			ok = true
		}
	}
	return ok
}

// totalStats is the lane counters of every session the node has had: for tests.
func (s *Server) totalStats() delivery.Stats { return s.lanes.Stats().Stats }
