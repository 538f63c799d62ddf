package server

import (
	"log/slog"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/snapshot"
)

// ConfigFrom maps a loaded config file onto the server's Config.
func ConfigFrom(c *config.Config, log *slog.Logger) Config {
	var cf *changefeed.Config
	if c.ChangefeedEnabled() {
		fc := c.Changefeed()
		fc.Logger = log
		cf = &fc
	}
	h := c.Handoff
	return Config{
		Changefeed:       cf,
		Listen:           c.Listen,
		AdminListen:      c.AdminListen,
		ListenBacklog:    c.Limits.ListenBacklog,
		FDReserve:        c.Limits.FDReserve,
		ShutdownTimeout:  c.ShutdownTimeout,
		APIKeys:          c.API.Keys,
		MaxConnections:   c.Limits.MaxConnections,
		MaxPublishBytes:  int(c.Limits.MaxPublishBytes),
		ConnectTimeout:   c.Limits.HandshakeTimeout,
		PingInterval:     c.Limits.PingInterval,
		SSEResumeWindow:  c.Limits.SSEResumeWindow,
		SSEResumeStreams: c.Limits.SSEResumeStreams,
		Session: session.Config{
			MaxSubscriptions: c.Limits.MaxSubscriptions,
			MaxFrameBytes:    int(c.Limits.MaxFrameBytes),
			SlowTimeout:      c.Limits.SlowTimeout,
			PingInterval:     c.Limits.PingInterval,
			ClientPublish:    c.Channels.ClientPublish,
			Lanes:            c.Lanes(),
			Logger:           log,
		},
		Auth:         c.Auth(),
		Policy:       c.Policy(),
		PolicyConfig: c.PolicyConfig(),
		Presence:     c.PresenceConfig(),
		Durable:      c.DurableLimits(),
		Fanout:       c.FanoutConfig(),
		HistoryBytes: int(c.ChangefeedSection.HistoryBytes),
		HistoryAge:   c.ChangefeedSection.HistoryAge,
		Snapshots: snapshot.Config{MaxConcurrent: h.MaxConcurrent, QueueWait: h.QueueWait, Timeout: h.Timeout,
			MaxRows: h.MaxRows, MaxBytes: int64(h.MaxBytes), PageRows: h.PageRows, PageBytes: int(h.PageBytes), Lookback: h.Lookback},
		Handoff: router.HandoffConfig{Lookback: h.Lookback, EarlyBytes: int(h.EarlyBytes), PendingBytes: int(h.PendingBytes)},
		Cluster: ClusterConfig{RedisURL: c.Redis.URL, RedisPrefix: c.Redis.Prefix, NodeID: c.Cluster.NodeID, AdvertiseURL: c.Cluster.AdvertiseURL,
			MaxIdentitySubscriptions: c.Redis.MaxIdentitySubscriptions},
		Logger: log,
	}
}

// ClusterConfig makes a node one of many that share a Redis: the redis.* and cluster.* keys.
type ClusterConfig struct {
	// RedisURL is the shared Redis or Redis Cluster; empty: the node is alone.
	RedisURL string
	// RedisPrefix starts every key. Default "herald".
	RedisPrefix string
	// NodeID names this node; empty: a new time-ordered id per process (presence.NewNodeID).
	NodeID string
	// AdvertiseURL is how the other nodes reach this node's listener; empty: derived from
	// Listen when it names a host.
	AdvertiseURL string
	// MaxIdentitySubscriptions bounds one identity's subscriptions to one table or channel
	// namespace across the nodes (interest.Config.MaxPerIdentity); 0: its default.
	MaxIdentitySubscriptions int
}

// Enabled reports whether the node shares a Redis with others.
func (c ClusterConfig) Enabled() bool { return c.RedisURL != "" }
