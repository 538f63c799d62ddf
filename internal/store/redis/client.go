package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// Timeout bounds each call whose caller gives no context (the channel broker). Default 2s.
	Timeout time.Duration
}

// DefaultPrefix is the key prefix when Config.Prefix is empty.
const DefaultPrefix = "herald"

// DefaultTimeout bounds a call without a caller's context.
const DefaultTimeout = 2 * time.Second

// Client is a connection to Redis or a Redis Cluster, shared by the stores built on it.
type Client struct {
	rc      rueidis.Client // read-only
	prefix  string         // read-only
	timeout time.Duration  // read-only
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
	opt, err := rueidis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("redis: parse URL: %w", err)
	}
	// Client-side caching is not used: every read here must see the latest write.
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis: connect %s: %w", strings.Join(opt.InitAddress, ","), err)
	}
	c := &Client{rc: rc, prefix: cfg.Prefix, timeout: cfg.Timeout}
	pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := rc.Do(pctx, rc.B().Ping().Build()).Error(); err != nil {
		rc.Close()
		return nil, fmt.Errorf("redis: ping: %w", err)
	}
	return c, nil
}

// Close closes the client's connections.
func (c *Client) Close() { c.rc.Close() }

// Prefix returns the prefix every key of this client starts with.
func (c *Client) Prefix() string { return c.prefix }

// ownerTag returns the hash tag of an interest owner's keys.
func ownerTag(owner string) string { return "{o:" + owner + "}" }

// channelTag returns the hash tag of a channel's keys.
func channelTag(channel string) string { return "{c:" + channel + "}" }

func (c *Client) key(kind, tag string) string { return c.prefix + ":" + kind + ":" + tag }
