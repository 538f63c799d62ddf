package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/heraldrt/herald/internal/problem"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// nodesTag is the hash tag of the registry's keys: one registry per prefix, in one slot.
const nodesTag = "{r:nodes}"

// maxCachedURLs bounds Nodes' cache of live nodes' URLs. Only live nodes enter it, so it holds
// no more than a cluster's nodes and those that ended within CacheFor; a cache that somehow
// fills is emptied and fills again.
const maxCachedURLs = 1024

// NodesConfig configures a node's place in the registry. Node is required; every other zero
// field is its default.
type NodesConfig struct {
	// Node is this node's id: cluster.node_id, or the random id the node chose.
	Node string
	// URL is the base URL other nodes reach this node's listener at: http(s)://host:port
	// (cluster.advertise_url). Required by Register and Run; a node that only looks others up
	// may leave it empty.
	URL string
	// TTL is how long an entry stays live without being renewed: how long a node that died
	// without deregistering is still taken for live. Run renews every TTL/3. Default 15s.
	TTL time.Duration
	// CacheFor is how long URL remembers a live node's URL before it asks Redis again.
	// Default TTL/3.
	CacheFor time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// Peer is a live node: its id and the URL it is reached at.
type Peer struct {
	ID  string
	URL string
}

// Nodes is the registry of live nodes, shared through Redis: each node registers its id and
// URL with a TTL it renews (Run), and any node can look another up (Lookup, URL) or list them
// all (Live). Deadlines are Redis's clock. An entry carries its registrant's incarnation, new
// per Nodes, so a second live process that claims a node's id is refused (NodeTakenError)
// rather than taking the first one's place unseen.
type Nodes struct {
	c   *Client // read-only
	cfg NodesConfig
	inc string // read-only: this incarnation
	log *slog.Logger

	register, deregister, lookup, live *rueidis.Lua

	mu    sync.Mutex
	cache map[string]cachedURL // guarded by mu: live nodes' URLs, by node id
}

type cachedURL struct {
	url   string
	until time.Time
}

// NewNodes returns the registry on c, as node cfg.Node sees it. Register, or Run, enters the
// node in it.
func NewNodes(c *Client, cfg NodesConfig) (*Nodes, error) {
	if cfg.Node == "" {
		return nil, errors.New("redis nodes: no node id")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.TTL < 3*time.Millisecond {
		return nil, fmt.Errorf("redis nodes: TTL %s is under 3ms", cfg.TTL)
	}
	if cfg.CacheFor <= 0 {
		cfg.CacheFor = cfg.TTL / 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Nodes{
		c:          c,
		cfg:        cfg,
		inc:        hex.EncodeToString(b[:]),
		log:        cfg.Logger,
		register:   rueidis.NewLuaScript(nodesRegisterScript),
		deregister: rueidis.NewLuaScript(nodesDeregisterScript),
		lookup:     rueidis.NewLuaScriptReadOnly(nodesLookupScript),
		live:       rueidis.NewLuaScriptReadOnly(nodesLiveScript),
		cache:      map[string]cachedURL{},
	}, nil
}

func (n *Nodes) keys() []string {
	return []string{n.c.key("v", nodesTag), n.c.key("u", nodesTag)}
}

// NodeTakenError is Register's refusal: another live process holds the node's id.
type NodeTakenError struct {
	Node string        // the id
	URL  string        // where the process holding it is reached
	TTL  time.Duration // the registry's TTL: how long a process that ended without deregistering holds the id
}

func (e *NodeTakenError) Error() string {
	return fmt.Sprintf("node id %q is held by another live process, reached at %s: two nodes must never share an id (fix: leave cluster.node_id empty for a random id per process, or give each node its own; a process that ended without deregistering lets go of the id within %s)", e.Node, e.URL, e.TTL)
}

// Register enters this node in the registry, live for TTL, or renews its entry. It is refused
// with a *NodeTakenError while another live process holds the id. Call it once before the node
// serves, so a session id naming it can be looked up as soon as a client has one; Run then
// keeps the entry alive.
func (n *Nodes) Register(ctx context.Context) error {
	if n.cfg.URL == "" {
		return fmt.Errorf("redis nodes: register %s: no URL to advertise", n.cfg.Node)
	}
	args := []string{n.cfg.Node, n.inc, n.cfg.URL, strconv.FormatInt(n.cfg.TTL.Milliseconds(), 10)}
	res, err := n.register.Exec(ctx, n.c.rc, n.keys(), args).ToArray()
	if err != nil {
		return fmt.Errorf("redis nodes: register %s: %w", n.cfg.Node, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redis nodes: register %s: %d values, want 2", n.cfg.Node, len(res))
	}
	ok, err := res[0].AsInt64()
	if err != nil {
		return fmt.Errorf("redis nodes: register %s: %w", n.cfg.Node, err)
	}
	if ok == 0 {
		holder, _ := res[1].ToString()
		return &NodeTakenError{Node: n.cfg.Node, URL: holder, TTL: n.cfg.TTL}
	}
	return nil
}

// Deregister removes this node's entry, if this process holds it, so other nodes learn at once
// that it is gone rather than when its TTL runs out.
func (n *Nodes) Deregister(ctx context.Context) error {
	if err := n.deregister.Exec(ctx, n.c.rc, n.keys(), []string{n.cfg.Node, n.inc}).Error(); err != nil {
		return fmt.Errorf("redis nodes: deregister %s: %w", n.cfg.Node, err)
	}
	return nil
}

// Run registers this node at once and renews its entry every TTL/3 until ctx ends, then
// deregisters it. A failed renewal is logged and tried again at the next; one that keeps
// failing for TTL lets the entry lapse, and the other nodes take this one for gone. Run starts
// no goroutine and returns nil once ctx has ended and the entry is removed (or removing it
// failed, which is logged: the TTL collects it).
func (n *Nodes) Run(ctx context.Context) error {
	every := n.cfg.TTL / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		// A renewal may take no longer than its interval: one stuck on a Redis that stopped
		// answering must not hold up the next.
		rctx, cancel := context.WithTimeout(ctx, min(every, n.c.timeout))
		err := n.Register(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			n.log.Warn("node registry renewal", slog.String("node", n.cfg.Node), slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.c.timeout)
			defer cancel()
			if err := n.Deregister(dctx); err != nil {
				n.log.Warn("node registry deregistration", slog.String("node", n.cfg.Node), slog.Any("err", err))
			}
			return nil
		case <-tick.C:
		}
	}
}

// Lookup returns the URL of node, and whether it is live: asked of Redis every time.
func (n *Nodes) Lookup(ctx context.Context, node string) (url string, ok bool, err error) {
	url, err = n.lookup.Exec(ctx, n.c.rc, n.keys(), []string{node}).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("redis nodes: lookup %s: %w", node, err)
	}
	return url, true, nil
}

// URL returns the URL of node, or "" when it is not live (sse.Peers). A live node's URL is
// remembered for CacheFor, so a node handing many commands to another asks Redis once per
// CacheFor, not once per command: within it, a node that has just ended is still answered
// with its URL (reaching it then fails, and says so). An unknown node is asked of Redis every
// time, so a node is found as soon as it registers.
func (n *Nodes) URL(ctx context.Context, node string) (string, error) {
	now := time.Now()
	n.mu.Lock()
	c, ok := n.cache[node]
	n.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.url, nil
	}
	url, live, err := n.Lookup(ctx, node)
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !live {
		delete(n.cache, node)
		return "", nil
	}
	if len(n.cache) >= maxCachedURLs {
		clear(n.cache)
	}
	n.cache[node] = cachedURL{url: url, until: now.Add(n.cfg.CacheFor)}
	return url, nil
}

// Live lists the live nodes, this one included once it has registered, by id.
func (n *Nodes) Live(ctx context.Context) ([]Peer, error) {
	flat, err := n.live.Exec(ctx, n.c.rc, n.keys(), nil).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("redis nodes: live: %w", err)
	}
	out := make([]Peer, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out = append(out, Peer{ID: flat[i], URL: flat[i+1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// String names the registry entry for logs.
func (n *Nodes) String() string { return fmt.Sprintf("nodes %s/%s", n.cfg.Node, n.inc) }

// Problem is the refusal as the person starting the node meets it: code "redis.node_taken".
func (e *NodeTakenError) Problem() problem.Problem {
	return problem.Problem{Code: "redis.node_taken", Stage: "cluster", Detail: fmt.Sprintf("node id %q is held by another live process, reached at %s", e.Node, e.URL),
		Fix: fmt.Sprintf("leave cluster.node_id empty for a random id per process, or give each node its own; a process that ended without deregistering lets go of the id within %s", e.TTL)}
}
