package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/devpg"
)

// NodeConfig says how to start a node to measure.
type NodeConfig struct {
	// Binary is the herald executable; its `serve` subcommand runs the node.
	Binary string
	// Table, when set, is the bench table the node streams: StartNode starts a private
	// PostgreSQL (internal/devpg), creates the table there, and configures the node's
	// changefeed with it alone. Empty: channels only, no database.
	Table string
	// MaxConnections is the node's limits.max_connections. Default 10000.
	MaxConnections int
	// RowRule is the table's row rule in the node's policy (docs/POLICY.md). Empty: "true",
	// every row to everyone. The node's policy opens every channel, and the table, to
	// everyone, written out in the config file it is started with.
	RowRule string
	// Secret, when set, is the node's token secret (auth.secrets), for subscribers whose
	// tokens carry the claims RowRule reads (PolicyTokens).
	Secret string
	// Log receives the node's own log (warnings and errors). Nil discards it.
	Log io.Writer
	// Logger receives what the private PostgreSQL does. Nil discards it.
	Logger *slog.Logger

	// RedisURL, when set, makes the node one of many sharing that Redis (HERALD_REDIS_URL),
	// its keys under RedisPrefix (HERALD_REDIS_PREFIX; empty: herald's default).
	RedisURL    string
	RedisPrefix string
	// DatabaseURL, with Table, is the database to stream (wal_level=logical) instead of a
	// private PostgreSQL: StartNodes gives the first node's to the others.
	DatabaseURL string
	// APIKey, when set, is the node's API key instead of a fresh one.
	APIKey string
}

// Node is a herald serve child process, and the private PostgreSQL it streams from when it
// streams a table. Stop ends both.
type Node struct {
	URL         string // http://127.0.0.1:<port>
	APIKey      string // for POST /v1/publish
	DatabaseURL string // the private PostgreSQL; empty without a table
	PID         int    // the server process, to measure

	cmd    *exec.Cmd
	db     *devpg.Server
	dir    string        // the node's config file's directory, removed by Stop
	exited chan struct{} // closed when the process has been waited for
	stderr *tailBuffer

	stopOnce sync.Once
	stopErr  error
}

// StartNode starts a node and returns once it answers /readyz: for a table, once its
// changefeed streams. The node is `herald serve` configured by environment variables alone
// (the parent's HERALD_* variables are not passed on), listening on a free loopback port, with
// anonymous connections and a fresh API key.
func StartNode(ctx context.Context, cfg NodeConfig) (n *Node, err error) {
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 10000
	}
	n = &Node{exited: make(chan struct{}), stderr: &tailBuffer{max: 8 << 10, w: cfg.Log}}
	defer func() {
		if err != nil {
			_ = n.Stop(context.Background())
		}
	}()
	n.APIKey = cfg.APIKey
	if n.APIKey == "" {
		var key [16]byte
		_, _ = rand.Read(key[:])
		n.APIKey = "bench-" + hex.EncodeToString(key[:])
	}
	port, err := freePort()
	if err != nil {
		return n, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	n.URL = "http://" + addr

	env := []string{
		"HERALD_LISTEN=" + addr,
		"HERALD_LOG_LEVEL=warn",
		"HERALD_AUTH_ALLOW_ANONYMOUS=true",
		"HERALD_API_KEYS=" + n.APIKey,
		"HERALD_LIMITS_MAX_CONNECTIONS=" + strconv.Itoa(cfg.MaxConnections),
	}
	if cfg.Secret != "" {
		env = append(env, "HERALD_AUTH_SECRETS="+cfg.Secret)
	}
	if cfg.RedisURL != "" {
		// The node advertises its loopback listener, which its peers on this machine reach.
		env = append(env, "HERALD_REDIS_URL="+cfg.RedisURL)
		if cfg.RedisPrefix != "" {
			env = append(env, "HERALD_REDIS_PREFIX="+cfg.RedisPrefix)
		}
	}
	if cfg.Table != "" {
		table, err := ParseTable(cfg.Table)
		if err != nil {
			return n, err
		}
		n.DatabaseURL = cfg.DatabaseURL
		if n.DatabaseURL == "" {
			n.db, err = devpg.Start(ctx, devpg.Config{Logger: cfg.Logger})
			if err != nil {
				return n, fmt.Errorf("start a private PostgreSQL for table mode: %w", err)
			}
			n.DatabaseURL = n.db.URL()
		}
		if err := CreateTable(ctx, n.DatabaseURL, table); err != nil {
			return n, err
		}
		env = append(env,
			"HERALD_CHANGEFEED_DATABASE_URL="+n.DatabaseURL,
			"HERALD_CHANGEFEED_TABLES="+table[0]+"."+table[1])
	}

	if n.dir, err = os.MkdirTemp("", "herald-bench-"); err != nil {
		return n, fmt.Errorf("make a directory for the node's config: %w", err)
	}
	conf := filepath.Join(n.dir, "herald.yaml")
	if err := os.WriteFile(conf, nodePolicy(cfg), 0o600); err != nil {
		return n, fmt.Errorf("write the node's config: %w", err)
	}
	err = n.launch(ctx, cfg.Binary, env, conf)
	if err != nil && predatesPolicy(n.stderr.String()) {
		// A build from before the policy gate (an earlier build compared with this one) knows
		// no policy key, and is open to everyone without it.
		n.exited, n.stderr = make(chan struct{}), &tailBuffer{max: 8 << 10, w: cfg.Log}
		err = n.launch(ctx, cfg.Binary, env, "")
	}
	return n, err
}

// launch starts herald serve, with the config file conf unless it is empty, and waits until
// it is ready.
func (n *Node) launch(ctx context.Context, binary string, env []string, conf string) error {
	args := []string{"serve"}
	if conf != "" {
		args = append(args, "--config", conf)
	}
	cmd, exited := exec.Command(binary, args...), n.exited
	cmd.Env = append(parentEnv(), env...)
	cmd.Stdout = n.stderr
	cmd.Stderr = n.stderr
	n.cmd = cmd
	if err := cmd.Start(); err != nil {
		close(exited)
		return fmt.Errorf("start %s serve: %w", binary, err)
	}
	n.PID = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return n.waitReady(ctx, 60*time.Second)
}

// predatesPolicy reports whether a node's output says it refused its config's policy key as
// unknown: a build from before the policy gate.
func predatesPolicy(out string) bool {
	return strings.Contains(out, "config: policy (") && strings.Contains(out, "unknown key")
}

// StartNodes starts count nodes sharing cfg.RedisURL, one after the other, each returning
// once it answers /readyz: in table mode the first starts the private PostgreSQL (unless
// cfg.DatabaseURL names a database), takes the replication slot and leads, and the others
// stream the same database and follow it. They share the first node's API key. StopNodes stops
// them.
func StartNodes(ctx context.Context, cfg NodeConfig, count int) ([]*Node, error) {
	if count > 1 && cfg.RedisURL == "" {
		return nil, errors.New("bench: several nodes share their state through Redis: give a Redis URL")
	}
	var nodes []*Node
	for i := 0; i < count; i++ {
		n, err := StartNode(ctx, cfg)
		if err != nil {
			_ = StopNodes(context.Background(), nodes)
			return nil, fmt.Errorf("node %d of %d: %w", i+1, count, err)
		}
		nodes = append(nodes, n)
		cfg.DatabaseURL, cfg.APIKey = n.DatabaseURL, n.APIKey
	}
	return nodes, nil
}

// StopNodes stops the nodes, the last first, so the first one's private PostgreSQL goes last;
// it returns the first error.
func StopNodes(ctx context.Context, nodes []*Node) error {
	var first error
	for i := len(nodes) - 1; i >= 0; i-- {
		if err := nodes[i].Stop(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// parentEnv is this process's environment without HERALD_* variables: herald serve refuses
// names it does not know, like herald sub's HERALD_URL.
func parentEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HERALD_") {
			out = append(out, kv)
		}
	}
	return out
}

// waitReady polls /readyz until it answers 200.
func (n *Node) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		select {
		case <-n.exited:
			return fmt.Errorf("herald serve exited before it was ready:\n%s", n.stderr.String())
		case <-ctx.Done():
			return fmt.Errorf("herald serve was not ready within %s (last /readyz: %s):\n%s", limit, last, n.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the server with SIGTERM, as an operator would, then kills it if it has not ended
// within 20 s, and stops the private PostgreSQL. Idempotent.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		if n.cmd != nil && n.cmd.Process != nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.exited:
			case <-time.After(20 * time.Second):
				_ = n.cmd.Process.Kill()
				<-n.exited
				n.stopErr = errors.New("herald serve did not stop within 20 s of SIGTERM; killed it")
			}
		}
		if n.db != nil {
			if err := n.db.Stop(ctx); err != nil && n.stopErr == nil {
				n.stopErr = err
			}
		}
		if n.dir != "" {
			_ = os.RemoveAll(n.dir)
		}
	})
	return n.stopErr
}

// nodePolicy is the node's config file: its policy, which opens every channel and the bench
// table to everyone (a node without rules is closed), the table's rows through cfg.RowRule.
func nodePolicy(cfg NodeConfig) []byte {
	type tableRules struct {
		Row string `yaml:"row"`
	}
	type channelRules struct {
		Subscribe string `yaml:"subscribe"`
		Publish   string `yaml:"publish"`
	}
	pol := map[string]any{"channels": map[string]channelRules{"**": {Subscribe: "true", Publish: "true"}}}
	if cfg.Table != "" {
		row := cfg.RowRule
		if row == "" {
			row = "true"
		}
		name := cfg.Table
		if !strings.Contains(name, ".") {
			name = "public." + name
		}
		pol["tables"] = map[string]tableRules{name: {Row: row}}
	}
	b, err := yaml.Marshal(map[string]any{"policy": pol})
	if err != nil {
		panic(err) // plain strings and maps always marshal
	}
	return b
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer passes writes on to w and keeps the last max bytes, to quote when the node fails.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte // guarded by mu
	max int
	w   io.Writer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// PolicyRowRule is policy mode's row rule: each subscriber sees its organisation's rows.
const PolicyRowRule = "row.org_id == auth.org_id"

// RandomID returns 8 random hex digits, e.g. for a Redis key prefix of a run's own.
func RandomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PolicySecret returns a fresh token secret for a node in policy mode.
func PolicySecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PolicyTokens returns one token per organisation, signed with secret: token k carries org_id
// org_k (the bench table's spelling) and subject bench-org_k, and expires in a day.
func PolicyTokens(secret string, tenants int) ([]string, error) {
	out := make([]string, tenants)
	exp := time.Now().Add(24 * time.Hour).Unix()
	for k := range out {
		org := "org_" + strconv.Itoa(k)
		tok, err := auth.SignHS256(secret, map[string]any{"sub": "bench-" + org, "org_id": org, "exp": exp})
		if err != nil {
			return nil, err
		}
		out[k] = tok
	}
	return out, nil
}
