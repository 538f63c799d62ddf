package main

// The many-nodes harness: N `herald serve` processes on loopback, sharing one Redis (or Redis
// Cluster) under a key prefix of their own and, when they stream tables, one database, slot and
// publication, of which one node (the replicator) holds the leader lock. It waits for each
// node's /readyz, reads its /metrics, kills a node with SIGKILL on demand, and on failure
// copies every node's log into the test's, and deletes the test's keys and slot when it ends
// (cluster_redis_test.go has the Redis side, and a redis-server a test may restart).
//
// Nodes are configured as docs/CONFIG.md documents a node among many: redis.url, redis.prefix,
// cluster.node_id, cluster.advertise_url.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// Bounds of the harness's waits. They bound a hang; none is a timing assertion.
const (
	// nodeReadyWithin bounds a node's start: listening, Redis reached, and its change stream
	// live (its own, or the replicator's).
	nodeReadyWithin = 15 * time.Second
	// deliveredWithin bounds how long a frame may take to reach a client once its cause (a
	// publish, a commit, a track) has happened.
	deliveredWithin = 15 * time.Second
	// logTail is how much of a node's log a failure copies into the test log.
	logTail = 128 << 10
)

// clusterConfig says what a cluster runs. The zero value of each field means its default.
type clusterConfig struct {
	Nodes    int    // how many nodes; default 3
	RedisURL string // the shared Redis or Redis Cluster; required
	// Database is the changefeed's database; empty: the nodes serve channels only. Every node
	// streams it through one slot and one publication, both named for this cluster alone.
	Database string
	Tables   []string // tables streamed and opened by the policy: "public.items"
	// FullIdentity are tables that must be REPLICA IDENTITY FULL (changefeed.full_identity_tables).
	FullIdentity []string
	// Staggered starts each node only once the one before it is ready, so node 1 is the first
	// to take whatever a first comer takes (the slot's leader lock, a sweep lease).
	Staggered bool
	Env       []string // more HERALD_* settings for every node
}

// cluster is the running nodes of one test.
type cluster struct {
	t       *testing.T
	cfg     clusterConfig
	prefix  string // redis.prefix, random: the cluster's keys, deleted when the test ends
	secret  string // auth.secrets: tokens are signed with it
	apiKey  string // api.keys
	policy  string // the config file holding the policy rules
	slot    string // changefeed.slot, with a database
	pubName string // changefeed.publication, with a database
	nodes   []*node
	hc      *http.Client
}

// node is one `herald serve` process.
type node struct {
	name string // node1, node2, ...: for messages
	id   string // cluster.node_id
	addr string // host:port of listen (HTTP, WebSocket, SSE, /readyz, /metrics)
	env  []string
	log  *lockedBuffer // its stderr (and stdout), whole
	cmd  *exec.Cmd
	done chan error // cmd.Wait's result, put back by whoever takes it
}

// startCluster starts cfg.Nodes nodes and waits until each answers /readyz with 200. Every
// node is killed, its log copied into the test log on failure, and the cluster's Redis keys
// deleted, when the test ends.
func startCluster(t *testing.T, cfg clusterConfig) *cluster {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.RedisURL == "" {
		t.Fatal("startCluster: no Redis URL")
	}
	c := &cluster{
		t:      t,
		cfg:    cfg,
		prefix: "herald-mn-" + randHex(6),
		secret: randHex(24),
		apiKey: "key-" + randHex(16),
		hc:     &http.Client{Timeout: 5 * time.Second},
	}
	c.policy = openPolicyFile(t, cfg.Tables...)
	if cfg.Database != "" {
		// The slot is named after the test's own database, unique among tests running at once.
		c.slot = testenv.SlotName(t, cfg.Database)
		c.pubName = "herald_mn_" + randHex(4)
	}
	// One cleanup for the whole cluster: registered before any node starts, so a node that
	// fails to start is killed and its log shown too.
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
		if t.Failed() {
			for _, n := range c.nodes {
				t.Logf("log of %s (id %s, %s):\n%s", n.name, n.id, n.addr, tail(n.log.String(), logTail))
			}
		}
		cleanRedisPrefix(t, cfg.RedisURL, c.prefix)
		if cfg.Database != "" {
			dropSlot(t, cfg.Database, c.slot)
		}
	})
	for i := range cfg.Nodes {
		n := c.newNode(i + 1)
		c.nodes = append(c.nodes, n)
		n.start(t)
		if cfg.Staggered {
			n.waitReady(t, nodeReadyWithin)
		}
	}
	for _, n := range c.nodes {
		n.waitReady(t, nodeReadyWithin)
	}
	return c
}

func (c *cluster) newNode(i int) *node {
	port := freePort(c.t)
	n := &node{
		name: fmt.Sprintf("node%d", i),
		id:   fmt.Sprintf("n%d-%s", i, randHex(3)),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		log:  &lockedBuffer{b: &bytes.Buffer{}},
	}
	// A clean environment: nothing of the test's own HERALD_* may reach the node.
	n.env = []string{
		"PATH=/usr/bin:/bin",
		"HERALD_CONFIG=" + c.policy,
		"HERALD_LISTEN=" + n.addr,
		"HERALD_AUTH_SECRETS=" + c.secret,
		"HERALD_API_KEYS=" + c.apiKey,
		"HERALD_CHANNELS_CLIENT_PUBLISH=true",
		"HERALD_LIMITS_HANDSHAKE_TIMEOUT=30s",
		"HERALD_SHUTDOWN_TIMEOUT=2s",
		"HERALD_REDIS_URL=" + c.cfg.RedisURL,
		"HERALD_REDIS_PREFIX=" + c.prefix,
		"HERALD_CLUSTER_NODE_ID=" + n.id,
		"HERALD_CLUSTER_ADVERTISE_URL=http://" + n.addr,
	}
	if c.cfg.Database != "" {
		n.env = append(n.env,
			"HERALD_CHANGEFEED_DATABASE_URL="+c.cfg.Database,
			"HERALD_CHANGEFEED_SLOT="+c.slot,
			"HERALD_CHANGEFEED_PUBLICATION="+c.pubName,
			"HERALD_CHANGEFEED_TABLES="+strings.Join(c.cfg.Tables, ","))
		if len(c.cfg.FullIdentity) > 0 {
			n.env = append(n.env, "HERALD_CHANGEFEED_FULL_IDENTITY_TABLES="+strings.Join(c.cfg.FullIdentity, ","))
		}
	}
	if level := os.Getenv("HERALD_TEST_CLUSTER_LOG_LEVEL"); level != "" {
		n.env = append(n.env, "HERALD_LOG_LEVEL="+level)
	}
	n.env = append(n.env, c.cfg.Env...)
	return n
}

func (n *node) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(herald(t), "serve")
	cmd.Env = n.env
	cmd.Stdout, cmd.Stderr = n.log, n.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", n.name, err)
	}
	done := make(chan error, 1)
	n.cmd, n.done = cmd, done
	go func() { done <- cmd.Wait() }()
}

// dropSlot drops the cluster's replication slot once its nodes are gone: a slot left behind
// holds WAL on the shared Postgres for good. Killed nodes' walsenders may outlive them for a
// moment, so it ends them first. (testenv drops the database's slots too, with the database.)
func dropSlot(t *testing.T, url, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Logf("drop slot %s: %v", slot, err)
		return
	}
	defer conn.Close(context.Background())
	for {
		_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Logf("drop slot %s: %v", slot, err)
	}
}

// exited reports whether the process has ended, and how.
func (n *node) exited() (bool, error) {
	select {
	case err := <-n.done:
		n.done <- err
		return true, err
	default:
		return false, nil
	}
}

// stop kills the process, if it still runs, and waits for it.
func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	err := <-n.done
	n.done <- err
}

// kill ends the node with SIGKILL, as a crash would: no goodbye to Redis, Postgres, the other
// nodes or its clients.
func (n *node) kill(t *testing.T) {
	t.Helper()
	if ok, err := n.exited(); ok {
		t.Fatalf("kill %s: it had already exited: %v", n.name, err)
	}
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill %s: %v", n.name, err)
	}
	err := <-n.done
	n.done <- err
	t.Logf("%s (id %s) killed with SIGKILL", n.name, n.id)
}

// readyz asks the node's /readyz: its status, and its body (the reason, when 503).
func (n *node) readyz() (int, string, error) {
	hc := &http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Get("http://" + n.addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// waitReady waits until /readyz answers 200.
func (n *node) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	n.waitReadyz(t, within, http.StatusOK)
}

// waitReadyz waits until /readyz answers want. A node that exits meanwhile fails the test.
func (n *node) waitReadyz(t *testing.T, within time.Duration, want int) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		if ok, err := n.exited(); ok {
			t.Fatalf("%s exited while the test waited for its /readyz to answer %d: %v (last answer: %s)", n.name, want, err, last)
		}
		code, body, err := n.readyz()
		switch {
		case err != nil:
			last = err.Error()
		case code == want:
			return body
		default:
			last = fmt.Sprintf("%d %s", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz did not answer %d within %s; last answer: %s", n.name, want, within, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// live returns the nodes that have not exited.
func (c *cluster) live() []*node {
	var out []*node
	for _, n := range c.nodes {
		if ok, _ := n.exited(); !ok {
			out = append(out, n)
		}
	}
	return out
}

// replicator waits until exactly one live node holds the slot's leader lock and streams
// (herald_changefeed_leader and herald_changefeed_streaming at 1), and returns it.
func (c *cluster) replicator(t *testing.T, within time.Duration) *node {
	t.Helper()
	var found *node
	waitFor(t, within, func() (bool, string) {
		found = nil
		var state []string
		leaders := 0
		for _, n := range c.live() {
			m, err := n.metrics()
			if err != nil {
				state = append(state, fmt.Sprintf("%s: %v", n.name, err))
				continue
			}
			leader, _ := m.sum("herald_changefeed_leader", nil)
			streaming, _ := m.sum("herald_changefeed_streaming", nil)
			state = append(state, fmt.Sprintf("%s leader=%v streaming=%v", n.name, leader, streaming))
			if leader == 1 {
				leaders++
				if streaming == 1 {
					found = n
				}
			}
		}
		return leaders == 1 && found != nil, "one live node leading the slot and streaming; now: " + strings.Join(state, ", ")
	})
	return found
}

// others returns the live nodes other than those given.
func (c *cluster) others(not ...*node) []*node {
	var out []*node
next:
	for _, n := range c.live() {
		for _, x := range not {
			if n == x {
				continue next
			}
		}
		out = append(out, n)
	}
	return out
}

// token signs a token for subject, valid for an hour.
func (c *cluster) token(subject string) string {
	c.t.Helper()
	tok, err := auth.SignHS256(c.secret, map[string]any{"sub": subject, "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// dial connects a client to n as subject; it is closed when the test ends.
func (c *cluster) dial(t *testing.T, n *node, subject string) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, "ws://"+n.addr, client.Options{Token: c.token(subject), Buffer: 16384})
	if err != nil {
		t.Fatalf("dial %s as %s: %v", n.name, subject, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// subscribe subscribes on conn, retrying while the node answers with a temporary refusal (a
// table stream not live yet, rules not compiled yet), and returns the subscribed position.
func subscribe(t *testing.T, who string, conn *client.Conn, s client.Subscription) client.Position {
	t.Helper()
	deadline := time.Now().Add(nodeReadyWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pos, err := conn.Subscribe(ctx, s)
		cancel()
		if err == nil {
			return pos
		}
		var ce *client.Error
		if !errors.As(err, &ce) || !ce.Temporary() || time.Now().After(deadline) {
			t.Fatalf("%s: subscribe %s (table %q channel %q): %v", who, s.Sub, s.Table, s.Channel, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// publishAPI publishes through n's POST /v1/publish.
func (c *cluster) publishAPI(ctx context.Context, n *node, channel string, data []byte) (client.Position, error) {
	return client.PublishHTTP(ctx, c.hc, "http://"+n.addr, c.apiKey, client.Publication{Channel: channel, Data: data})
}

// metricSet is one scrape of a node's /metrics.
type metricSet []sample

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metrics scrapes the node's /metrics.
func (n *node) metrics() (metricSet, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + n.addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", n.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: HTTP %d", n.name, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", n.name, err)
	}
	return parseMetrics(string(b))
}

// mustMetrics is metrics, failing the test on error.
func (n *node) mustMetrics(t *testing.T) metricSet {
	t.Helper()
	m, err := n.metrics()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// parseMetrics reads the Prometheus text format, as far as Herald writes it: a sample per line,
// `name{k="v",...} value`, and comments.
func parseMetrics(text string) (metricSet, error) {
	var out metricSet
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(rest, "{ "); i < 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		} else {
			s.name, rest = rest[:i], rest[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				return nil, fmt.Errorf("metrics line %q: unclosed labels", line)
			}
			for _, kv := range splitLabels(rest[1:end]) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("metrics line %q: label %q", line, kv)
				}
				uq, err := strconv.Unquote(v)
				if err != nil {
					return nil, fmt.Errorf("metrics line %q: label %q: %v", line, kv, err)
				}
				s.labels[k] = uq
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %v", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, nil
}

// splitLabels splits `k="v",k2="v,2"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// sum adds up the samples of name whose labels include match; found is false when there is
// none. A labelled counter the node never touched has no sample: it counts as 0, not found.
func (m metricSet) sum(name string, match map[string]string) (total float64, found bool) {
next:
	for _, s := range m {
		if s.name != name {
			continue
		}
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
		found = true
	}
	return total, found
}

// waitFor polls cond until it holds, for at most within; on timeout the test fails with what
// cond said it waited for, as it stood last.
func waitFor(t *testing.T, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s in vain for %s", within, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tail is the last n bytes of s, marked as cut when it is.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("[... %d bytes before]\n%s", len(s)-n, s[len(s)-n:])
}

// withOneNode runs a test's scenario on three nodes against the shared Redis and against the
// Redis Cluster (redisVariants), and first on one node against the shared Redis: the
// baseline, which proves the scenario and its checks where nothing crosses nodes, so that a
// failure of the three-node runs is about crossing them. The scenario places its clients with
// cluster.at, which maps nodes 1 to 3 onto however many there are.
func withOneNode(t *testing.T, run func(t *testing.T, redisURL string, nodes int)) {
	t.Run("one node", func(t *testing.T) { run(t, testenv.RedisURL(t), 1) })
	redisVariants(t, func(t *testing.T, url string) { run(t, url, 3) })
}

// at returns node i (1-based) of three, on a cluster of fewer nodes the one it maps to.
func (c *cluster) at(i int) *node { return c.nodes[(i-1)%len(c.nodes)] }

// redisVariants runs a test against the shared Redis and against the Redis Cluster, each of
// which skips locally when its server is missing and fails under CI=true.
func redisVariants(t *testing.T, run func(t *testing.T, redisURL string)) {
	t.Run("redis", func(t *testing.T) { run(t, testenv.RedisURL(t)) })
	t.Run("cluster", func(t *testing.T) { run(t, testenv.RedisClusterURL(t)) })
}
