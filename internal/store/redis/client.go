package redis

import (
	"context"
	"errors"
	"fmt"
	"github.com/heraldrt/herald/internal/problem"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Config configures a Client. The zero value is not usable: URL is required.
type Config struct {
	// URL is redis://[user:password@]host:port[/db], or rediss:// for TLS. For a Cluster, more
	// seed nodes go in addr parameters: redis://h1:7000?addr=h2:7000&addr=h3:7000. Required.
	URL string
	// Prefix starts every key, so several deployments (or tests) can share one Redis. It must
	// not hold "{" or "}", which would move the hash tag. Default "herald".
	Prefix string
	// Timeout bounds each call whose caller gives no context (the channel broker), and each
	// health check. Default 2s.
	Timeout time.Duration
	// PingInterval is how often Run checks that Redis answers, for Healthy. Default 1s.
	PingInterval time.Duration
}

// DefaultPrefix is the key prefix when Config.Prefix is empty.
const DefaultPrefix = "herald"

// DefaultTimeout bounds a call without a caller's context.
const DefaultTimeout = 2 * time.Second

// DefaultPingInterval is how often Run checks Redis when Config.PingInterval is zero.
const DefaultPingInterval = time.Second

// Client is a connection to Redis or a Redis Cluster, shared by the stores built on it.
type Client struct {
	rc        rueidis.Client // read-only
	prefix    string         // read-only
	timeout   time.Duration  // read-only
	pingEvery time.Duration  // read-only

	health atomic.Pointer[health] // the last check's outcome: written by Dial, then by Run
	checks atomic.Uint64          // checks Run made
	failed atomic.Uint64          // checks that found a node not answering
}

// health is the outcome of one check of every node.
type health struct {
	err error     // nil if every node answered
	at  time.Time // when the check ended
}

// Dial connects to the Redis at cfg.URL and checks that it answers.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("redis: no URL")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("redis: prefix %q holds a brace, which would move the keys' hash tag", cfg.Prefix)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if part := problem.MalformedEscape(cfg.URL); part != "" {
		// url's own error would quote the escape and what follows it: part of a password.
		err := fmt.Errorf("a malformed percent-escape in its %s", part)
		return nil, &DialError{Stage: "url", Detail: "redis.url is not a Redis URL: " + err.Error(), Err: err,
			Fix: fmt.Sprintf("percent-encode the %s in redis.url (HERALD_REDIS_URL): a %% becomes %%25, @ becomes %%40, : becomes %%3A", part)}
	}
	opt, err := rueidis.ParseURL(cfg.URL)
	if err != nil {
		// url.Error quotes the whole URL, password included: only what it found wrong is kept.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &DialError{Stage: "url", Detail: fmt.Sprintf("redis.url is not a Redis URL: %v", err), Err: err,
			Fix: "set redis.url (HERALD_REDIS_URL) to redis://[user:password@]host:port[/db], or rediss:// for TLS"}
	}
	// Client-side caching is not used: every read here must see the latest write.
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, &DialError{Stage: "connect", Detail: fmt.Sprintf("cannot connect to %s: %v", strings.Join(opt.InitAddress, ","), err), Err: err,
			Fix: "check that Redis runs there and this node may reach it (redis-cli -h <host> -p <port> ping), and redis.url (HERALD_REDIS_URL)"}
	}
	c := &Client{rc: rc, prefix: cfg.Prefix, timeout: cfg.Timeout, pingEvery: cfg.PingInterval}
	pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := rc.Do(pctx, rc.B().Ping().Build()).Error(); err != nil {
		rc.Close()
		return nil, &DialError{Stage: "ping", Detail: fmt.Sprintf("%s did not answer PING: %v", strings.Join(opt.InitAddress, ","), err), Err: err,
			Fix: "check that Redis runs there and answers (redis-cli -h <host> -p <port> ping), and the password and TLS in redis.url (HERALD_REDIS_URL)"}
	}
	c.health.Store(&health{at: time.Now()})
	return c, nil
}

// Run checks that Redis answers every PingInterval, pinging every node of a Cluster, each
// check bounded by Timeout, until ctx ends; then it returns nil. It is what keeps Healthy
// current; nothing else depends on it.
func (c *Client) Run(ctx context.Context) error {
	tk := time.NewTicker(c.pingEvery)
	defer tk.Stop()
	for {
		err := c.ping(ctx)
		if ctx.Err() != nil {
			return nil // a check cut short by the end of Run says nothing about Redis
		}
		c.health.Store(&health{err: err, at: time.Now()})
		c.checks.Add(1)
		if err != nil {
			c.failed.Add(1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
	}
}

// ping pings every node at once, and returns the first failure by address, if any.
func (c *Client) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	nodes := c.rc.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		n := nodes[addr]
		wg.Go(func() { errs[i] = n.Do(ctx, n.B().Ping().Build()).Error() })
	}
	wg.Wait()
	failed := 0
	var first error
	for i, err := range errs {
		if err != nil {
			if failed == 0 {
				first = fmt.Errorf("ping %s: %w", addrs[i], err)
			}
			failed++
		}
	}
	if failed > 1 {
		return fmt.Errorf("%w (and %d more of %d nodes)", first, failed-1, len(addrs))
	}
	return first
}

// Healthy returns nil if Redis answered the last check, or why not: the last check's failure,
// or that no check ended for longer than two PingIntervals and two Timeouts (Run is not
// running). It asks Redis nothing, so a readiness probe can call it as often as it likes.
//
// The answer comes from Run's pings rather than from the outcome of the stores' last command:
// an idle node still finds Redis gone (within PingInterval plus Timeout), and a command Redis
// refused (a script error, say) is not taken for an outage. The cost is one PING per node per
// PingInterval, and an answer up to PingInterval plus Timeout old.
func (c *Client) Healthy() error {
	h := c.health.Load()
	if age := time.Since(h.at); age > 2*(c.pingEvery+c.timeout) {
		return fmt.Errorf("not checked for %s: redis.Client.Run is not running", age.Round(time.Millisecond))
	}
	return h.err
}

// Checks reports how many checks Run has made, and how many of them found a node that did not
// answer, since Dial: counters, for metrics.
func (c *Client) Checks() (made, failed uint64) { return c.checks.Load(), c.failed.Load() }

// Close closes the client's connections.
func (c *Client) Close() { c.rc.Close() }

// Prefix returns the prefix every key of this client starts with.
func (c *Client) Prefix() string { return c.prefix }

// ownerTag returns the hash tag of an interest owner's keys.
func ownerTag(owner string) string { return "{o:" + owner + "}" }

// channelTag returns the hash tag of a channel's keys.
func channelTag(channel string) string { return "{c:" + channel + "}" }

func (c *Client) key(kind, tag string) string { return c.prefix + ":" + kind + ":" + tag }

// DialError is a Redis that cannot be reached when the node starts. Its text never holds the
// URL's password.
type DialError struct {
	Stage  string // "url", "connect" or "ping"
	Detail string
	Fix    string
	Err    error
}

func (e *DialError) Error() string {
	return "redis: " + e.Stage + ": " + e.Detail + " (fix: " + e.Fix + ")"
}

// Unwrap returns the client's error underneath, if any.
func (e *DialError) Unwrap() error { return e.Err }

// Problem is the failure as the person starting the node meets it: code "redis.<stage>".
func (e *DialError) Problem() problem.Problem {
	return problem.Problem{Code: "redis." + e.Stage, Stage: e.Stage, Detail: e.Detail, Fix: e.Fix}
}
