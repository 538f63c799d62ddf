package config

import (
	"slices"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/presence"
)

// Config is everything `herald serve` is configured with. Each field's yaml tag is its key; the
// environment variable is derived from it (see the package doc). A field tagged secret:"value"
// holds a secret, and secret:"url" a database URL whose password is one: neither is ever quoted
// in an Error or shown by Redacted.
//
// The section fields that a conversion method shares a name with carry a Section suffix:
// Auth() and Changefeed() return the auth and changefeed packages' Configs.
type Config struct {
	// Listen is the host:port the HTTP server binds. Loopback by default: a development default
	// must not expose itself to the network. ":8080" binds every interface.
	Listen string `yaml:"listen"`
	// AdminListen, when set, is a second host:port serving only /healthz, /readyz and
	// /metrics, with descriptors of its own, so probes and scrapes answer while client sockets
	// are at their cap. Empty: they are served on Listen only.
	AdminListen string `yaml:"admin_listen"`
	// PublicURL is how clients reach this node (http, https, ws or wss), used in printed examples
	// and links. Empty means derived from Listen.
	PublicURL string `yaml:"public_url"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text or json.
	LogFormat string `yaml:"log_format"`
	// ShutdownTimeout is how long a SIGTERM waits for connections to drain before closing them.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	AuthSection       AuthSection       `yaml:"auth"`
	API               APISection        `yaml:"api"`
	Channels          ChannelsSection   `yaml:"channels"`
	Presence          PresenceSection   `yaml:"presence"`
	Limits            LimitsSection     `yaml:"limits"`
	ChangefeedSection ChangefeedSection `yaml:"changefeed"`
	Handoff           HandoffSection    `yaml:"handoff"`
	PolicySection     PolicySection     `yaml:"policy"`
	Redis             RedisSection      `yaml:"redis"`
	Cluster           ClusterSection    `yaml:"cluster"`
	Durable           DurableSection    `yaml:"durable"`

	// sources maps a key to where Load found its value ("herald.yaml:14", "env HERALD_LISTEN"),
	// so a Validate error can say which of the file and the environment to change. Written by
	// Load only, read-only after: copies may share it.
	sources map[string]string
}

// AuthSection configures token verification: the auth.* keys. See auth.Config for each rule.
type AuthSection struct {
	// Secrets are HS256/384/512 shared secrets, at least 32 bytes each. Several may be listed to
	// rotate. Prefer HERALD_AUTH_SECRETS to the file.
	Secrets []string `yaml:"secrets" secret:"value"`
	// PublicKeys are PEM public keys (RSA, EC), as PEM text or paths of PEM files.
	PublicKeys []string `yaml:"public_keys"`
	// JWKSFile is the path of a JSON Web Key Set file.
	JWKSFile string `yaml:"jwks_file"`
	// Issuer, when set, must equal each token's iss claim.
	Issuer string `yaml:"issuer"`
	// Audience, when set, must be one of each token's aud values.
	Audience string `yaml:"audience"`
	// Leeway is the clock skew allowed on exp, nbf and iat. 0s means none; at most 5m.
	Leeway time.Duration `yaml:"leeway"`
	// AllowAnonymous lets a connection without a token in, with the anonymous identity.
	AllowAnonymous bool `yaml:"allow_anonymous"`
	// AllowNoExpiry accepts tokens without an exp claim.
	AllowNoExpiry bool `yaml:"allow_no_expiry"`
	// AppClaim names the string claim that says which app a token was issued for: a durable
	// subscription belongs to the token's subject and app.
	AppClaim string `yaml:"app_claim"`
}

// APISection configures the HTTP publish API: the api.* keys.
type APISection struct {
	// Keys are the bearer keys of the HTTP publish API (Authorization: Bearer <key>), at least
	// 16 bytes each. Empty turns the API off. Prefer HERALD_API_KEYS to the file.
	Keys []string `yaml:"keys" secret:"value"`
}

// ChannelsSection configures pub/sub channels: the channels.* keys.
type ChannelsSection struct {
	// ClientPublish lets clients publish over their socket, not only the server's API.
	ClientPublish bool `yaml:"client_publish"`
	// FanoutQueue, FanoutDeliveries and FanoutBytes bound each of the node's fan-out queues
	// (one per processor): the publications waiting to be handed to subscribers, the
	// deliveries they make in all, and their bytes. See channel.Config.
	FanoutQueue      int  `yaml:"fanout_queue"`
	FanoutDeliveries int  `yaml:"fanout_deliveries"`
	FanoutBytes      Size `yaml:"fanout_bytes"`
	// PublishWait is how long a publish waits for room in a full fan-out queue before it is
	// refused with unavailable.
	PublishWait time.Duration `yaml:"publish_wait"`
	// HistorySize, HistoryBytes and HistoryTTL bound each channel's history, from which a
	// subscription that resumes is replayed what it missed: its last publications, their
	// bytes, and how long each is kept. HistorySize 0 keeps no history. See
	// channel.HistoryConfig.
	HistorySize  int           `yaml:"history_size"`
	HistoryBytes Size          `yaml:"history_bytes"`
	HistoryTTL   time.Duration `yaml:"history_ttl"`
}

// PresenceSection configures channel presence: the presence.* keys. See presence.Config.
type PresenceSection struct {
	// TTL is how long a member outlives its node's last heartbeat (every TTL/3).
	TTL time.Duration `yaml:"ttl"`
	// MaxMembers is the most members one channel's presence holds.
	MaxMembers int `yaml:"max_members"`
	// MaxMetaBytes bounds a member's meta, compacted.
	MaxMetaBytes Size `yaml:"max_meta_bytes"`
}

// RedisSection is the Redis (or Redis Cluster) that nodes share: the redis.* keys. Without a
// URL the node is alone and keeps everything in its memory.
type RedisSection struct {
	// URL is redis://[user:password@]host:port[/db] or rediss:// for TLS; a Cluster's other
	// seed nodes go in addr parameters (redis://h1:7000?addr=h2:7000). Empty: one node.
	URL string `yaml:"url" secret:"url"`
	// Prefix starts every key, so several deployments can share one Redis.
	Prefix string `yaml:"prefix"`
	// MaxIdentitySubscriptions is how many subscriptions one identity (a token's subject) may
	// hold to one table, or one channel namespace, across the nodes; past it a subscribe is
	// refused with too_many_subscriptions. Anonymous connections each count alone.
	MaxIdentitySubscriptions int `yaml:"max_identity_subscriptions"`
}

// DurableSection bounds durable subscriptions: the durable.* keys. See durable.Limits.
type DurableSection struct {
	// MaxItems and MaxBytes bound one durable subscription's queue; past either, its oldest
	// messages no connection holds are shed, a queue_full resync in their place.
	MaxItems int  `yaml:"max_items"`
	MaxBytes Size `yaml:"max_bytes"`
	// Lease is how long a connection holds a single subscription's message before it goes to
	// another connection.
	Lease time.Duration `yaml:"lease"`
	// MaxAttempts is how many deliveries of one message are made before it is parked.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxInFlight is how many unacknowledged messages one connection holds at once.
	MaxInFlight int `yaml:"max_in_flight"`
	// IdleTTL is how long a durable subscription outlives its last connection.
	IdleTTL time.Duration `yaml:"idle_ttl"`
	// MaxPerHolder is how many durable subscriptions one identity and app keep.
	MaxPerHolder int `yaml:"max_per_holder"`
}

// ClusterSection configures this node among many: the cluster.* keys. Used only with redis.url.
type ClusterSection struct {
	// NodeID names this node to the others. Empty: a new time-ordered id (a UUIDv7) per
	// process, which is what a node must have (a restarted node is a new incarnation, and the
	// longest-lived node leads each channel's presence sweep); set it only to read logs.
	NodeID string `yaml:"node_id"`
	// AdvertiseURL is the http(s) URL other nodes reach this node's listener at, to hand it an
	// SSE command posted to them. Empty: derived from listen when that names a host.
	AdvertiseURL string `yaml:"advertise_url"`
}

// LimitsSection bounds what one node and one connection may use: the limits.* keys.
type LimitsSection struct {
	// MaxConnections is the most client connections this node holds at once. It is lowered,
	// with a warning, when it does not fit the open-file limit less FDReserve.
	MaxConnections int `yaml:"max_connections"`
	// FDReserve is how many of the process's open files client sockets may not take: for
	// Postgres, Redis, peers, logs and the admin listener.
	FDReserve int `yaml:"fd_reserve"`
	// ListenBacklog is the accept backlog asked of the kernel (capped by net.core.somaxconn).
	ListenBacklog int `yaml:"listen_backlog"`
	// MaxSubscriptions is the most subscriptions one connection holds; past it a subscribe is
	// refused (429).
	MaxSubscriptions int `yaml:"max_subscriptions"`
	// MaxFrameBytes is the largest frame a client may send.
	MaxFrameBytes Size `yaml:"max_frame_bytes"`
	// MaxPublishBytes is the largest payload of one publish, by a client or the API.
	MaxPublishBytes Size `yaml:"max_publish_bytes"`
	// DataLaneFrames and DataLaneBytes bound one connection's queue of changes and publications.
	DataLaneFrames int  `yaml:"data_lane_frames"`
	DataLaneBytes  Size `yaml:"data_lane_bytes"`
	// ControlLaneFrames and ControlLaneBytes bound one connection's queue of replies. Near the
	// bound the server takes no more of the client's requests until it reads replies.
	ControlLaneFrames int  `yaml:"control_lane_frames"`
	ControlLaneBytes  Size `yaml:"control_lane_bytes"`
	// SlowTimeout closes a connection ("too slow") whose data lane has been stalled this long,
	// or whose replies have been waiting unread this long.
	SlowTimeout time.Duration `yaml:"slow_timeout"`
	// HandshakeTimeout is how long a client has to send connect after the upgrade.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// PingInterval is the server's ping period; a client that leaves two pings in a row
	// unanswered is closed. The default, 50s, stays under the 55-60 s idle timeouts of the
	// common proxies and load balancers (docs/OPERATIONS.md, Liveness).
	PingInterval time.Duration `yaml:"ping_interval"`
	// SSEResumeWindow is how long an SSE stream's subscriptions are kept after it ends, for a
	// reconnect whose Last-Event-ID names the stream to take them all up; 0 keeps none (only
	// the URL subscription resumes).
	SSEResumeWindow time.Duration `yaml:"sse_resume_window"`
	// SSEResumeStreams bounds the ended streams kept so; past it the oldest is let go.
	SSEResumeStreams int `yaml:"sse_resume_streams"`
}

// ChangefeedSection configures the Postgres changefeed: the changefeed.* keys. The changefeed is
// off when DatabaseURL is empty. See changefeed.Config for each field.
type ChangefeedSection struct {
	// DatabaseURL is the postgres:// URL (or key=value string) of the database to stream.
	DatabaseURL string `yaml:"database_url" secret:"url"`
	// Slot is the logical replication slot's name.
	Slot string `yaml:"slot"`
	// Publication is the publication's name.
	Publication string `yaml:"publication"`
	// Tables are the schema.table names to stream; empty means every table of the publication.
	Tables []string `yaml:"tables"`
	// FullIdentityTables must be REPLICA IDENTITY FULL.
	FullIdentityTables []string `yaml:"full_identity_tables"`
	// TenantColumn names the column whose value becomes each event's tenant: herald tail
	// prints it; a client of herald serve gets the column in the row, so nothing it sees
	// changes.
	TenantColumn string `yaml:"tenant_column"`
	// WriteTagPrefix is the logical message prefix that tags a transaction.
	WriteTagPrefix string `yaml:"write_tag_prefix"`
	// MessagePrefixes are the logical message prefixes handed on as events; "*" for all.
	MessagePrefixes []string `yaml:"message_prefixes"`
	// StatusInterval is the standby status update period.
	StatusInterval time.Duration `yaml:"status_interval"`
	// SilenceTimeout abandons a replication connection silent this long.
	SilenceTimeout time.Duration `yaml:"silence_timeout"`
	// MaxTxnBytes is the most memory one transaction's events may take; larger transactions
	// are handed on as overflows.
	MaxTxnBytes Size `yaml:"max_txn_bytes"`
	// QueueTxns bounds the committed transactions waiting to be delivered.
	QueueTxns int `yaml:"queue_txns"`
	// ReadLinger is how long a read of the replication connection waits before reading again
	// when it emptied the socket in the middle of a transaction (Linux); 0s turns it off.
	ReadLinger time.Duration `yaml:"read_linger"`
	// HistoryBytes and HistoryAge bound what the node keeps of the changes it routed, so a
	// table subscription resuming from a position inside it is handed what it missed.
	HistoryBytes Size          `yaml:"history_bytes"`
	HistoryAge   time.Duration `yaml:"history_age"`
	// LagWarnBytes is how much WAL the slot may hold back (from its confirmed position to the
	// end of the WAL) before `herald doctor` warns: the disk fills with what a stalled slot
	// holds. Read by doctor only; the server exports the lag as a metric.
	LagWarnBytes Size `yaml:"lag_warn_bytes"`
}

// HandoffSection configures table snapshots (a subscribe with snapshot) and their hand-off to
// the change stream: the handoff.* keys. Used only with a changefeed. See snapshot.Config and
// router.HandoffConfig.
type HandoffSection struct {
	// MaxConcurrent is how many snapshots this node reads at once; each holds a database
	// connection of its own for the read.
	MaxConcurrent int `yaml:"max_concurrent"`
	// QueueWait is how long a snapshot waits for its turn before it fails with snapshot_busy.
	QueueWait time.Duration `yaml:"queue_wait"`
	// Timeout bounds one snapshot from its read to its live, the client's reading of its rows
	// included; past it, snapshot_timeout. The read's transaction is bounded by it too.
	Timeout time.Duration `yaml:"timeout"`
	// MaxRows and MaxBytes bound what one snapshot carries (rows, and their bytes as JSON);
	// past either, snapshot_too_large.
	MaxRows  int  `yaml:"max_rows"`
	MaxBytes Size `yaml:"max_bytes"`
	// PageRows and PageBytes bound one rows frame.
	PageRows  int  `yaml:"page_rows"`
	PageBytes Size `yaml:"page_bytes"`
	// EarlyBytes and PendingBytes bound the changes held for one snapshot subscription before
	// its snapshot is known, and while its rows are read and sent; past either,
	// handoff_buffer_full.
	EarlyBytes   Size `yaml:"early_bytes"`
	PendingBytes Size `yaml:"pending_bytes"`
	// Lookback is how far back in the routed history a new snapshot subscription's hand-off
	// looks for transactions streamed before it that its snapshot may not see; a snapshot that
	// finds a commit waiting for a synchronous standby since longer ago ends with
	// sync_standby_stalled.
	Lookback time.Duration `yaml:"lookback"`
}

// Default returns the configuration of a single node with every default set: in-memory stores,
// no Redis, no database, listening on loopback. It does not pass Validate on its own: a server
// needs auth keys, or auth.allow_anonymous.
func Default() *Config {
	return &Config{
		Listen:          "127.0.0.1:8080",
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 10 * time.Second,
		AuthSection: AuthSection{
			Leeway:   auth.DefaultLeeway,
			AppClaim: auth.DefaultAppClaim,
		},
		Channels: ChannelsSection{
			FanoutQueue:      channel.DefaultQueueLen,
			FanoutDeliveries: channel.DefaultQueueDeliveries,
			FanoutBytes:      channel.DefaultQueueBytes,
			PublishWait:      channel.DefaultQueueWait,
			HistorySize:      channel.DefaultHistorySize,
			HistoryBytes:     channel.DefaultHistoryBytes,
			HistoryTTL:       channel.DefaultHistoryTTL,
		},
		Presence: PresenceSection{
			TTL:          presence.DefaultTTL,
			MaxMembers:   presence.DefaultMaxMembers,
			MaxMetaBytes: presence.DefaultMaxMetaBytes,
		},
		Limits: LimitsSection{
			MaxConnections:    10000,
			FDReserve:         256,
			ListenBacklog:     4096,
			MaxSubscriptions:  100,
			MaxFrameBytes:     64 * KiB,
			MaxPublishBytes:   64 * KiB,
			DataLaneFrames:    delivery.DefaultMaxDataFrames,
			DataLaneBytes:     delivery.DefaultMaxDataBytes,
			ControlLaneFrames: delivery.DefaultMaxControlFrames,
			ControlLaneBytes:  delivery.DefaultMaxControlBytes,
			SlowTimeout:       10 * time.Second,
			HandshakeTimeout:  10 * time.Second,
			PingInterval:      50 * time.Second,
			SSEResumeWindow:   2 * time.Minute,
			SSEResumeStreams:  10000,
		},
		ChangefeedSection: ChangefeedSection{
			Slot:           "herald",
			Publication:    "herald",
			WriteTagPrefix: "herald.write",
			StatusInterval: 10 * time.Second,
			SilenceTimeout: 30 * time.Second,
			MaxTxnBytes:    256 * MiB,
			QueueTxns:      64,
			ReadLinger:     changefeed.DefaultReadLinger,
			HistoryBytes:   64 * MiB,
			HistoryAge:     10 * time.Minute,
			LagWarnBytes:   GiB,
		},
		Handoff: HandoffSection{
			MaxConcurrent: 4,
			QueueWait:     5 * time.Second,
			Timeout:       60 * time.Second,
			MaxRows:       100_000,
			MaxBytes:      64 * MiB,
			PageRows:      500,
			PageBytes:     256 * KiB,
			EarlyBytes:    4 * MiB,
			PendingBytes:  32 * MiB,
			Lookback:      10 * time.Second,
		},
		PolicySection: PolicySection{
			MaxCost: policy.DefaultMaxCost,
		},
		Redis: RedisSection{
			Prefix:                   "herald",
			MaxIdentitySubscriptions: interest.DefaultMaxPerIdentity,
		},
		Durable: DurableSection{
			MaxItems:     durable.DefaultMaxItems,
			MaxBytes:     durable.DefaultMaxBytes,
			Lease:        durable.DefaultLease,
			MaxAttempts:  durable.DefaultMaxAttempts,
			MaxInFlight:  durable.DefaultMaxInFlight,
			IdleTTL:      durable.DefaultIdleTTL,
			MaxPerHolder: durable.DefaultMaxPerHolder,
		},
	}
}

// DurableLimits returns the durable subscriptions' bounds.
func (c *Config) DurableLimits() durable.Limits {
	d := c.Durable
	return durable.Limits{MaxItems: d.MaxItems, MaxBytes: int(d.MaxBytes), Lease: d.Lease, MaxAttempts: d.MaxAttempts,
		MaxInFlight: d.MaxInFlight, IdleTTL: d.IdleTTL, MaxPerHolder: d.MaxPerHolder}
}

// FanoutConfig returns the channel hub's fan-out bounds and its channels' history; the caller
// sets Bus and Broker (a shared broker takes its History from it too).
func (c *Config) FanoutConfig() channel.Config {
	ch := c.Channels
	return channel.Config{QueueLen: ch.FanoutQueue, QueueDeliveries: ch.FanoutDeliveries, QueueBytes: int(ch.FanoutBytes), QueueWait: ch.PublishWait,
		History: c.History()}
}

// History returns the channels' history bounds: channels.history_size 0 is none.
func (c *Config) History() channel.HistoryConfig {
	ch := c.Channels
	if ch.HistorySize == 0 {
		return channel.HistoryConfig{Size: -1}
	}
	return channel.HistoryConfig{Size: ch.HistorySize, Bytes: int(ch.HistoryBytes), TTL: ch.HistoryTTL}
}

// PresenceConfig returns presence's Config. The caller sets Logger.
func (c *Config) PresenceConfig() presence.Config {
	return presence.Config{TTL: c.Presence.TTL, MaxMembers: c.Presence.MaxMembers, MaxMetaBytes: int(c.Presence.MaxMetaBytes)}
}

// ChangefeedEnabled reports whether a database is configured to stream from.
func (c *Config) ChangefeedEnabled() bool { return c.ChangefeedSection.DatabaseURL != "" }

// Changefeed returns the changefeed's Config. The caller sets Logger and OnEnd; fields without a
// key (leader poll, backoff) keep changefeed's defaults.
func (c *Config) Changefeed() changefeed.Config {
	s := c.ChangefeedSection
	linger := s.ReadLinger
	if linger == 0 {
		// In the file 0s turns the linger off; in changefeed.Config zero means the default
		// and a negative value means none.
		linger = -1
	}
	return changefeed.Config{
		DatabaseURL:        s.DatabaseURL,
		Slot:               s.Slot,
		Publication:        s.Publication,
		Tables:             slices.Clone(s.Tables),
		FullIdentityTables: slices.Clone(s.FullIdentityTables),
		TenantColumn:       s.TenantColumn,
		WriteTagPrefix:     s.WriteTagPrefix,
		MessagePrefixes:    slices.Clone(s.MessagePrefixes),
		StatusInterval:     s.StatusInterval,
		SilenceTimeout:     s.SilenceTimeout,
		MaxTxnBytes:        int(s.MaxTxnBytes),
		QueueTxns:          s.QueueTxns,
		ReadLinger:         linger,
	}
}

// Auth returns the token verifier's Config.
func (c *Config) Auth() auth.Config {
	s := c.AuthSection
	leeway := s.Leeway
	if leeway == 0 {
		// In the file 0s means no skew; in auth.Config zero means the default and a negative
		// value means none.
		leeway = -1
	}
	return auth.Config{
		Secrets:        slices.Clone(s.Secrets),
		PublicKeys:     slices.Clone(s.PublicKeys),
		JWKSFile:       s.JWKSFile,
		Issuer:         s.Issuer,
		Audience:       s.Audience,
		Leeway:         leeway,
		AllowNoExpiry:  s.AllowNoExpiry,
		AllowAnonymous: s.AllowAnonymous,
		AppClaim:       s.AppClaim,
	}
}

// Lanes returns the per-connection delivery lanes' Config. EncodeMarker is left nil: the server
// fills it from the wire package. The batch bounds have no key and keep delivery's defaults.
func (c *Config) Lanes() delivery.Config {
	l := c.Limits
	return delivery.Config{
		MaxDataFrames:    l.DataLaneFrames,
		MaxDataBytes:     int(l.DataLaneBytes),
		MaxControlFrames: l.ControlLaneFrames,
		MaxControlBytes:  int(l.ControlLaneBytes),
	}
}
