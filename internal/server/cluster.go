package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/cluster"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/snapshot"
	redisstore "github.com/heraldrt/herald/internal/store/redis"
	"github.com/heraldrt/herald/internal/stream"
)

// peers is this node's part among many that share a Redis: nil when the node is alone. It owns
// the Redis client and what is built on it: the channel broker, the interest index, the
// transport between nodes, presence's store, the tables' history, and the replicator's beacon.
type peers struct {
	id        string
	client    *redisstore.Client
	broker    *redisstore.Broker
	interest  *redisstore.Interest
	transport *redisstore.Transport
	presence  *redisstore.Presence
	durable   *redisstore.Durable // durable subscriptions' queues and leases
	// durables receives the durable deliveries other nodes make to this node's connections;
	// set before start.
	durables cluster.Durable
	history  *redisstore.History // the tables' history, for resumes on any node
	beacon   *redisstore.Beacon  // who replicates: its node id while its stream is live
	nodes    *redisstore.Nodes   // the registry of live nodes and their URLs; set by register
	node     *cluster.Node
	hub      *hubRef
	log      *slog.Logger

	mu         sync.Mutex
	healthErr  error  // guarded by mu: why Redis did not answer the last probe; nil when it did
	leader     bool   // guarded by mu: a replicator's beacon was seen at the last probe
	replicator string // guarded by mu: whose beacon that was
}

// beaconTTL is how long the replicator's beacon outlives its last renewal; it renews every
// third of it.
const beaconTTL = 6 * time.Second

// hubRef breaks the knot between the hub (which forwards to the cluster node) and the node
// (which delivers to the hub): it is set once, before either runs.
type hubRef struct{ h *channel.Hub }

func (r *hubRef) Deliver(m *stream.Message) error { return r.h.Deliver(m) }
func (r *hubRef) Verify()                         { r.h.Verify() }
func (r *hubRef) Lost(m *stream.Message)          { r.h.Lost(m) }

// newPeers connects to the shared Redis; tables bounds each table's history there, channels
// each channel's.
func newPeers(cfg ClusterConfig, tables history.Config, channels channel.HistoryConfig, lim durable.Limits, log *slog.Logger) (*peers, error) {
	id := cfg.NodeID
	if id == "" {
		// Time-ordered, so that the smallest live claimant of a channel's presence sweep is
		// the longest-lived node, and a restart does not move every sweep to the new process.
		id = presence.NewNodeID(time.Now())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := redisstore.Dial(ctx, redisstore.Config{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix})
	if err != nil {
		return nil, err
	}
	p := &peers{id: id, client: c, hub: &hubRef{}, log: log.With("node", id)}
	fail := func(err error) (*peers, error) { c.Close(); return nil, err }
	if p.broker, err = redisstore.NewBroker(c, redisstore.BrokerConfig{Node: id, History: channels, Logger: log}); err != nil {
		return fail(err)
	}
	if p.interest, err = redisstore.NewInterest(c, interest.Config{MaxPerIdentity: cfg.MaxIdentitySubscriptions}); err != nil {
		return fail(err)
	}
	if p.transport, err = redisstore.NewTransport(c, redisstore.TransportConfig{Node: id, Logger: log, Block: transportBlock}); err != nil {
		return fail(err)
	}
	p.presence = redisstore.NewPresence(c)
	p.durable = redisstore.NewDurable(c, lim)
	if p.history, err = redisstore.NewHistory(c, tables); err != nil {
		return fail(err)
	}
	p.beacon = redisstore.NewBeacon(c, "replicator")
	return p, nil
}

// start builds the cluster node on the hub, the router (nil without a changefeed) and presence.
func (p *peers) start(hub *channel.Hub, tables cluster.Tables, pres *presence.Presence) error {
	p.hub.h = hub
	cfg := cluster.Config{Node: p.id, Interest: p.interest, Transport: p.transport, Hub: p.hub, Tables: tables,
		Presence: applier{pres}, Durable: p.durables, FencePrefix: snapshot.FencePrefix, Logger: p.log}
	if tables != nil {
		// Should this node replicate, it records each transaction in the tables' history.
		cfg.History = p.history
	}
	n, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	p.node = n
	return nil
}

// Relay is presence's Relay: the node routes a join or leave with the publications.
func (p *peers) Relay(channel string, ev presence.Event) { p.node.Relay(channel, ev.Kind, ev.Member) }

// applier hands presence events from other nodes to this node's presence.
type applier struct{ p *presence.Presence }

func (a applier) Apply(channel string, kind stream.PresenceKind, m stream.Member) {
	a.p.Apply(channel, presence.Event{Kind: kind, Member: m})
}

// Deliver is the durable registry's Relay: a delivery to a connection on another node.
func (p *peers) Deliver(node string, key durable.Key, conn string, ents []durable.Entry) {
	p.node.Deliver(node, key, conn, ents)
}

// Forward is the hub's Remote until the node exists (it does before anything publishes).
func (p *peers) Forward(m *stream.Message) { p.node.Forward(m) }

// run runs the transport, the node and the probe of Redis until ctx ends. streaming reports
// whether this node's replication stream is live, for the beacon.
func (p *peers) run(ctx context.Context, streaming func() bool) {
	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); _ = p.client.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := p.nodes.Run(ctx); err != nil && ctx.Err() == nil {
			p.log.Error("cluster: the node registry stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := p.transport.Run(ctx, receiver{p.node}); err != nil && ctx.Err() == nil {
			p.log.Error("cluster: the transport between nodes stopped", "error", err)
		}
	}()
	go func() { defer wg.Done(); _ = p.node.Run(ctx) }()
	go func() { defer wg.Done(); p.probe(ctx, streaming) }()
	wg.Wait()
	p.client.Close()
}

// probe checks Redis every beaconTTL/3: it renews the replicator's beacon while this node's
// stream is live, and reads it otherwise, for /readyz.
func (p *peers) probe(ctx context.Context, streaming func() bool) {
	beat := time.NewTicker(beaconTTL / 3)
	defer beat.Stop()
	// The client's health (its own pings, read without I/O) is looked at more often: an
	// outage means Redis may have lost this node's interest, which it files again, and
	// reports not ready until it has (cluster.Node.Renewing).
	watch := time.NewTicker(healthWatch)
	defer watch.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, beaconTTL/3)
		var err error
		leader, holder := false, ""
		if streaming != nil && streaming() {
			err, leader, holder = p.beacon.Announce(cctx, p.id, beaconTTL), true, p.id
		} else {
			holder, leader, err = p.beacon.Read(cctx)
		}
		cancel()
		if err != nil {
			p.node.RenewNow()
		}
		p.mu.Lock()
		p.healthErr, p.leader, p.replicator = err, leader && err == nil, holder
		p.mu.Unlock()
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-beat.C:
				break wait
			case <-watch.C:
				if p.client.Healthy() != nil {
					p.node.RenewNow()
				}
			}
		}
	}
}

// transportBlock is how long the transport's reader waits for entries before it looks at its
// stream again: a stream Redis lost is made again within it, and only then is the node ready.
const transportBlock = 500 * time.Millisecond

// healthWatch is how often the Redis client's health is looked at for an outage.
const healthWatch = 250 * time.Millisecond

// notReady says why this node cannot serve as one of many, or nil.
func (p *peers) notReady(tables bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.client.Healthy(); err != nil {
		return fmt.Errorf("redis unreachable: %v", err)
	}
	switch {
	case p.healthErr != nil:
		return fmt.Errorf("redis unreachable: %v", p.healthErr)
	case p.node.Renewing():
		return fmt.Errorf("filing this node's subscriptions in Redis again after an outage")
	case !p.transport.Live():
		return fmt.Errorf("this node's stream in Redis, which other nodes send to, is not there yet")
	case tables && !p.leader:
		return fmt.Errorf("no node replicates the database yet (no live replicator's beacon in Redis)")
	}
	return nil
}

// replicatorIsThis reports whether the live replicator's beacon, at the last probe, was this
// node's own: it outlives the stream that renewed it by up to beaconTTL.
func (p *peers) replicatorIsThis() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader && p.replicator == p.id
}

// replicating reports whether some node's replication stream is live, by its beacon.
func (p *peers) replicating() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader
}

// receiver adapts the cluster node to the transport's Receiver.
type receiver struct{ n *cluster.Node }

func (r receiver) Receive(from string, data []byte) { r.n.Receive(from, data) }
func (r receiver) Gap(from string, reason redisstore.GapReason) {
	r.n.Gap(from, cluster.GapReason(reason))
}

// register enters this node in the registry of live nodes at url (how the others reach its
// listener, for SSE commands handed between nodes), before it serves: a session id naming it
// can be looked up as soon as a client holds one. Another live node with this id is refused.
func (p *peers) register(ctx context.Context, url string) error {
	n, err := redisstore.NewNodes(p.client, redisstore.NodesConfig{Node: p.id, URL: url, Logger: p.log})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.Register(cctx); err != nil {
		return err
	}
	p.nodes = n
	return nil
}

// advertiseURL is how the other nodes reach this node's listener at addr: the configured URL,
// or addr itself when it names a host.
func advertiseURL(configured, addr string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("listen %s names every interface, so the other nodes cannot be told how to reach this one: set cluster.advertise_url (HERALD_CLUSTER_ADVERTISE_URL) to http://<this node's address>:<port>", addr)
	}
	return "http://" + addr, nil
}

// close lets go of Redis when the node fails to build; nil-safe.
func (p *peers) close() {
	if p != nil {
		p.client.Close()
	}
}
