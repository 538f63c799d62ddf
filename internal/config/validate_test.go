package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/delivery"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name       string
		change     func(*Config)
		wantKey    string // "" for valid
		wantDetail string
		wantFix    []string // beyond the key itself
	}{
		{name: "full config is valid", change: func(*Config) {}},
		{name: "listen without a host", change: func(c *Config) { c.Listen = ":8080" }},
		{name: "listen on IPv6", change: func(c *Config) { c.Listen = "[::1]:8080" }},
		{name: "listen on port 0", change: func(c *Config) { c.Listen = "127.0.0.1:0" }},
		{name: "listen without a port", change: func(c *Config) { c.Listen = "127.0.0.1" }, wantKey: "listen",
			wantDetail: "want host:port", wantFix: []string{"HERALD_LISTEN=127.0.0.1:8080"}},
		{name: "listen on a named port", change: func(c *Config) { c.Listen = "localhost:http" }, wantKey: "listen"},
		{name: "listen port too large", change: func(c *Config) { c.Listen = "localhost:70000" }, wantKey: "listen"},
		{name: "listen empty", change: func(c *Config) { c.Listen = "" }, wantKey: "listen"},
		{name: "admin listen", change: func(c *Config) { c.AdminListen = "127.0.0.1:9091" }},
		{name: "admin listen without a port", change: func(c *Config) { c.AdminListen = "127.0.0.1" }, wantKey: "admin_listen",
			wantDetail: "want host:port", wantFix: []string{"HERALD_ADMIN_LISTEN=127.0.0.1:9091"}},
		{name: "admin listen on listen", change: func(c *Config) { c.Listen, c.AdminListen = ":8080", ":8080" }, wantKey: "admin_listen",
			wantDetail: "same address as listen"},
		{name: "zero fd reserve", change: func(c *Config) { c.Limits.FDReserve = 0 }, wantKey: "limits.fd_reserve"},
		{name: "public url relative", change: func(c *Config) { c.PublicURL = "/realtime" }, wantKey: "public_url",
			wantFix: []string{"HERALD_PUBLIC_URL=https://realtime.example.com"}},
		{name: "public url ftp", change: func(c *Config) { c.PublicURL = "ftp://x.example.com" }, wantKey: "public_url"},
		{name: "public url with credentials", change: func(c *Config) { c.PublicURL = "https://u:" + testDBPass + "@x.example.com" },
			wantKey: "public_url", wantDetail: "user or password"},
		{name: "public url wss", change: func(c *Config) { c.PublicURL = "wss://rt.example.com/ws" }},
		{name: "log level", change: func(c *Config) { c.LogLevel = "trace" }, wantKey: "log_level",
			wantDetail: `is "trace", want one of debug, info, warn, error`},
		{name: "log level upper case", change: func(c *Config) { c.LogLevel = "INFO" }, wantKey: "log_level"},
		{name: "log format", change: func(c *Config) { c.LogFormat = "logfmt" }, wantKey: "log_format", wantFix: []string{"text or json"}},
		{name: "shutdown timeout zero", change: func(c *Config) { c.ShutdownTimeout = 0 }, wantKey: "shutdown_timeout", wantDetail: "is 0s, want more than zero"},

		// auth
		{name: "no auth at all", change: func(c *Config) { c.AuthSection = AuthSection{Leeway: time.Second} }, wantKey: "auth",
			wantFix: []string{"auth.secrets", "HERALD_AUTH_SECRETS", "allow_anonymous: true", "HERALD_AUTH_ALLOW_ANONYMOUS=true"}},
		{name: "anonymous only", change: func(c *Config) { c.AuthSection = AuthSection{AllowAnonymous: true} }},
		{name: "public keys only", change: func(c *Config) { c.AuthSection = AuthSection{PublicKeys: []string{"/k.pem"}} }},
		{name: "jwks only", change: func(c *Config) { c.AuthSection = AuthSection{JWKSFile: "/jwks.json"} }},
		{name: "short secret", change: func(c *Config) { c.AuthSection.Secrets = []string{testSecret, "short-" + testDBPass} },
			wantKey: "auth.secrets[1]", wantDetail: "is 20 bytes", wantFix: []string{"openssl rand", "HERALD_AUTH_SECRETS"}},
		{name: "secret with a newline", change: func(c *Config) { c.AuthSection.Secrets = []string{testSecret + "\n"} },
			wantKey: "auth.secrets[0]", wantDetail: "whitespace"},
		{name: "PEM as a secret", change: func(c *Config) {
			c.AuthSection.Secrets = []string{"-----BEGIN PUBLIC KEY-----\n" + testSecret + "\n-----END PUBLIC KEY-----"}
		}, wantKey: "auth.secrets[0]", wantDetail: "PEM", wantFix: []string{"auth.public_keys"}},
		{name: "negative leeway", change: func(c *Config) { c.AuthSection.Leeway = -time.Second }, wantKey: "auth.leeway",
			wantDetail: "want 0s", wantFix: []string{"HERALD_AUTH_LEEWAY=30s"}},
		{name: "leeway too long", change: func(c *Config) { c.AuthSection.Leeway = 10 * time.Minute }, wantKey: "auth.leeway", wantFix: []string{"HERALD_AUTH_LEEWAY"}},
		{name: "empty public key", change: func(c *Config) { c.AuthSection.PublicKeys = []string{" "} }, wantKey: "auth.public_keys[0]"},

		// api
		{name: "short api key", change: func(c *Config) { c.API.Keys = []string{"k-" + testDBPass[:11]} }, wantKey: "api.keys[0]",
			wantDetail: "is 13 bytes", wantFix: []string{"openssl rand", "HERALD_API_KEYS"}},
		{name: "api key too short by one", change: func(c *Config) { c.API.Keys = []string{testAPIKey, testAPIKey[:15]} }, wantKey: "api.keys[1]",
			wantDetail: "is 15 bytes; an API key needs at least 16"},
		{name: "api key of the minimum length", change: func(c *Config) { c.API.Keys = []string{testAPIKey[:16]} }},
		{name: "api key with whitespace", change: func(c *Config) { c.API.Keys = []string{" " + testAPIKey} }, wantKey: "api.keys[0]", wantDetail: "whitespace"},
		{name: "api key is an auth secret", change: func(c *Config) { c.API.Keys = []string{testAPIKey, testSecret2} }, wantKey: "api.keys[1]",
			wantDetail: "also one of auth.secrets"},

		// limits
		{name: "zero connections", change: func(c *Config) { c.Limits.MaxConnections = 0 }, wantKey: "limits.max_connections",
			wantDetail: "is 0, want more than zero", wantFix: []string{"limits: {max_connections: 10000}", "HERALD_LIMITS_MAX_CONNECTIONS=10000"}},
		{name: "negative subscriptions", change: func(c *Config) { c.Limits.MaxSubscriptions = -1 }, wantKey: "limits.max_subscriptions"},
		{name: "zero frame bytes", change: func(c *Config) { c.Limits.MaxFrameBytes = 0 }, wantKey: "limits.max_frame_bytes"},
		{name: "zero publish bytes", change: func(c *Config) { c.Limits.MaxPublishBytes = 0 }, wantKey: "limits.max_publish_bytes"},
		{name: "zero data frames", change: func(c *Config) { c.Limits.DataLaneFrames = 0 }, wantKey: "limits.data_lane_frames"},
		{name: "zero control frames", change: func(c *Config) { c.Limits.ControlLaneFrames = 0 }, wantKey: "limits.control_lane_frames"},
		{name: "zero slow timeout", change: func(c *Config) { c.Limits.SlowTimeout = 0 }, wantKey: "limits.slow_timeout",
			wantFix: []string{"HERALD_LIMITS_SLOW_TIMEOUT=10s"}},
		{name: "zero handshake timeout", change: func(c *Config) { c.Limits.HandshakeTimeout = 0 }, wantKey: "limits.handshake_timeout"},
		{name: "zero ping interval", change: func(c *Config) { c.Limits.PingInterval = 0 }, wantKey: "limits.ping_interval"},
		{name: "negative SSE resume window", change: func(c *Config) { c.Limits.SSEResumeWindow = -time.Second }, wantKey: "limits.sse_resume_window"},
		{name: "data lane below a frame", change: func(c *Config) { c.Limits.DataLaneBytes = c.Limits.MaxFrameBytes - 1 },
			wantKey: "limits.data_lane_bytes", wantDetail: "smaller than limits.max_frame_bytes (32KiB)", wantFix: []string{"HERALD_LIMITS_MAX_FRAME_BYTES"}},
		{name: "data lane equal to a frame", change: func(c *Config) {
			c.Limits.DataLaneBytes, c.Handoff.PageBytes = c.Limits.MaxFrameBytes, c.Limits.MaxFrameBytes/2
		}},
		{name: "data lane below a publish", change: func(c *Config) {
			c.Limits.MaxPublishBytes = 2 * MiB
		}, wantKey: "limits.data_lane_bytes", wantDetail: "smaller than limits.max_publish_bytes (2MiB)", wantFix: []string{"HERALD_LIMITS_MAX_PUBLISH_BYTES"}},
		{name: "control lane below a frame", change: func(c *Config) { c.Limits.ControlLaneBytes = KiB },
			wantKey: "limits.control_lane_bytes", wantDetail: "smaller than limits.max_frame_bytes"},

		// channels
		{name: "no history", change: func(c *Config) { c.Channels.HistorySize = 0 }},
		{name: "negative history size", change: func(c *Config) { c.Channels.HistorySize = -1 }, wantKey: "channels.history_size",
			wantDetail: "want 0 (no history) or more", wantFix: []string{"HERALD_CHANNELS_HISTORY_SIZE=100"}},
		{name: "history larger than the data lane", change: func(c *Config) { c.Channels.HistorySize = 2000 }, wantKey: "channels.history_size",
			wantDetail: "more than limits.data_lane_frames (10)", wantFix: []string{"at most 10,", "HERALD_LIMITS_DATA_LANE_FRAMES"}},
		{name: "history bytes larger than the data lane", change: func(c *Config) { c.Channels.HistoryBytes = 8 * MiB }, wantKey: "channels.history_bytes",
			wantDetail: "more than limits.data_lane_bytes (1MiB)", wantFix: []string{"at most 1MiB", "HERALD_LIMITS_DATA_LANE_BYTES"}},
		{name: "zero history bytes", change: func(c *Config) { c.Channels.HistoryBytes = 0 }, wantKey: "channels.history_bytes",
			wantDetail: "want more than zero"},
		{name: "zero history ttl", change: func(c *Config) { c.Channels.HistoryTTL = 0 }, wantKey: "channels.history_ttl",
			wantFix: []string{"HERALD_CHANNELS_HISTORY_TTL=2m0s"}},

		// changefeed
		{name: "changefeed off", change: func(c *Config) {
			c.ChangefeedSection, c.Handoff = Default().ChangefeedSection, Default().Handoff
		}},
		{name: "changefeed setting without a database", change: func(c *Config) { c.ChangefeedSection.DatabaseURL = "" },
			wantKey: "changefeed.slot", wantDetail: "changefeed.database_url is empty", wantFix: []string{"HERALD_CHANGEFEED_DATABASE_URL"}},
		{name: "bad slot", change: func(c *Config) { c.ChangefeedSection.Slot = "Herald" }, wantKey: "changefeed.slot",
			wantDetail: "not a valid replication slot name", wantFix: []string{"HERALD_CHANGEFEED_SLOT"}},
		{name: "bad publication", change: func(c *Config) { c.ChangefeedSection.Publication = "pub-1" }, wantKey: "changefeed.publication"},
		{name: "bad table", change: func(c *Config) { c.ChangefeedSection.Tables = []string{"public.items", "a.b.c"} }, wantKey: "changefeed.tables",
			wantFix: []string{"HERALD_CHANGEFEED_TABLES"}},
		{name: "bad full identity table", change: func(c *Config) { c.ChangefeedSection.FullIdentityTables = []string{"x;drop"} },
			wantKey: "changefeed.full_identity_tables"},
		{name: "bad tenant column", change: func(c *Config) { c.ChangefeedSection.TenantColumn = "org id" }, wantKey: "changefeed.tenant_column"},
		{name: "silence not above status", change: func(c *Config) { c.ChangefeedSection.SilenceTimeout = c.ChangefeedSection.StatusInterval },
			wantKey: "changefeed.silence_timeout", wantFix: []string{"HERALD_CHANGEFEED_SILENCE_TIMEOUT=15s"}},
		{name: "zero status interval", change: func(c *Config) { c.ChangefeedSection.StatusInterval = 0 }, wantKey: "changefeed.status_interval"},
		{name: "zero txn bytes", change: func(c *Config) { c.ChangefeedSection.MaxTxnBytes = 0 }, wantKey: "changefeed.max_txn_bytes"},
		{name: "zero queue", change: func(c *Config) { c.ChangefeedSection.QueueTxns = 0 }, wantKey: "changefeed.queue_txns"},
		{name: "negative read linger", change: func(c *Config) { c.ChangefeedSection.ReadLinger = -time.Microsecond }, wantKey: "changefeed.read_linger",
			wantDetail: "want 0s (no linger) to 1ms", wantFix: []string{"HERALD_CHANGEFEED_READ_LINGER=100µs"}},
		{name: "read linger too long", change: func(c *Config) { c.ChangefeedSection.ReadLinger = 2 * time.Millisecond }, wantKey: "changefeed.read_linger"},
		{name: "malformed password escape", change: func(c *Config) {
			c.ChangefeedSection.DatabaseURL = "postgres://herald:" + testDBPass + "%zz@db/app?sslmode=verify-full"
		}, wantKey: "changefeed.database_url", wantDetail: "percent-escape in its password", wantFix: []string{"HERALD_CHANGEFEED_DATABASE_URL"}},
		{name: "unparseable database URL", change: func(c *Config) {
			c.ChangefeedSection.DatabaseURL = "postgres://herald:" + testDBPass + "@db:notaport/app"
		}, wantKey: "changefeed.database_url", wantDetail: "could not be parsed"},
		{name: "weak auth over weak TLS", change: func(c *Config) {
			c.ChangefeedSection.DatabaseURL = "postgres://herald:" + testDBPass + "@db/app?sslmode=prefer&require_auth=password"
		}, wantKey: "changefeed.database_url", wantDetail: "require_auth"},
		// cluster
		{name: "redis url", change: func(c *Config) { c.Redis.URL = "redis://127.0.0.1:6379" }},
		{name: "redis url not redis", change: func(c *Config) { c.Redis.URL = "http://127.0.0.1:6379" }, wantKey: "redis.url",
			wantFix: []string{"HERALD_REDIS_URL=redis://redis.internal:6379"}},
		{name: "redis prefix with a brace", change: func(c *Config) { c.Redis.Prefix = "a{b" }, wantKey: "redis.prefix", wantDetail: "hash tag"},
		{name: "redis prefix empty", change: func(c *Config) { c.Redis.Prefix = "" }, wantKey: "redis.prefix"},
		{name: "node id", change: func(c *Config) { c.Cluster.NodeID = "node-a_01JD5ZP1N8Q3" }},
		{name: "node id a UUID", change: func(c *Config) { c.Cluster.NodeID = "0190b8a2-7c1e-7d3a-9f2b-3c4d5e6f7a8b" }},
		{name: "node id with a space", change: func(c *Config) { c.Cluster.NodeID = "node a" }, wantKey: "cluster.node_id"},
		{name: "node id with a dot", change: func(c *Config) { c.Cluster.NodeID = "node.a" }, wantKey: "cluster.node_id",
			wantDetail: `where a "." ends it`, wantFix: []string{"HERALD_CLUSTER_NODE_ID=node-a"}},
		{name: "node id with a brace", change: func(c *Config) { c.Cluster.NodeID = "{a}" }, wantKey: "cluster.node_id"},
		{name: "node id with a slash", change: func(c *Config) { c.Cluster.NodeID = "a/b" }, wantKey: "cluster.node_id"},
		{name: "node id not ASCII", change: func(c *Config) { c.Cluster.NodeID = "nœud" }, wantKey: "cluster.node_id"},
		{name: "node id too long", change: func(c *Config) { c.Cluster.NodeID = strings.Repeat("a", 65) }, wantKey: "cluster.node_id"},
		{name: "node id at its longest", change: func(c *Config) { c.Cluster.NodeID = strings.Repeat("a", 64) }},
		{name: "advertise url", change: func(c *Config) { c.Cluster.AdvertiseURL = "https://10.0.0.5:8443" }},
		{name: "advertise url without a host", change: func(c *Config) { c.Cluster.AdvertiseURL = "http:///x" }, wantKey: "cluster.advertise_url",
			wantFix: []string{"HERALD_CLUSTER_ADVERTISE_URL=http://10.0.0.5:8080"}},
		{name: "advertise url ws", change: func(c *Config) { c.Cluster.AdvertiseURL = "ws://10.0.0.5:8080" }, wantKey: "cluster.advertise_url"},
		{name: "durable lease under a second", change: func(c *Config) { c.Durable.Lease = 500 * time.Millisecond },
			wantKey: "durable.lease", wantDetail: "shorter than 1s", wantFix: []string{"HERALD_DURABLE_LEASE"}},
		{name: "durable idle ttl under a second", change: func(c *Config) { c.Durable.IdleTTL = time.Millisecond },
			wantKey: "durable.idle_ttl", wantDetail: "shorter than 1s"},
		{name: "durable queue under a KiB", change: func(c *Config) { c.Durable.MaxBytes = 100 },
			wantKey: "durable.max_bytes", wantDetail: "less than 1KiB"},
		{name: "presence ttl under a second", change: func(c *Config) { c.Presence.TTL = 500 * time.Millisecond },
			wantKey: "presence.ttl", wantDetail: "shorter than 1s"},
		{name: "presence roster past the control lane", change: func(c *Config) {
			c.Presence.MaxMembers, c.Presence.MaxMetaBytes, c.Limits.ControlLaneBytes = 1000, KiB, 256*KiB
		}, wantKey: "presence.max_members", wantDetail: "could not be queued", wantFix: []string{"at most 102", "HERALD_LIMITS_CONTROL_LANE_BYTES"}},
		{name: "presence roster just fits", change: func(c *Config) {
			c.Presence.MaxMembers, c.Presence.MaxMetaBytes, c.Limits.ControlLaneBytes = 256, 256, 256*KiB
		}},
		{name: "handoff page past the data lane", change: func(c *Config) { c.Handoff.PageBytes = 600 * KiB }, wantKey: "handoff.page_bytes",
			wantDetail: "could not be queued", wantFix: []string{"512KiB"}},
		{name: "handoff bytes below a page", change: func(c *Config) { c.Handoff.MaxBytes = 32 * KiB }, wantKey: "handoff.max_bytes",
			wantDetail: "less than handoff.page_bytes"},
		{name: "handoff without a changefeed", change: func(c *Config) {
			c.ChangefeedSection, c.Handoff = Default().ChangefeedSection, Default().Handoff
			c.Handoff.MaxRows = 10
		}, wantKey: "handoff.max_rows", wantDetail: "changefeed.database_url is empty", wantFix: []string{"HERALD_CHANGEFEED_DATABASE_URL"}},
		{name: "key=value database URL", change: func(c *Config) {
			c.ChangefeedSection.DatabaseURL = "host=db user=herald password=" + testDBPass + " dbname=app sslmode=verify-full"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fullConfig()
			tt.change(c)
			err := c.Validate()
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			e := asError(t, err)
			if e.Key != tt.wantKey {
				t.Errorf("Key = %q, want %q (%v)", e.Key, tt.wantKey, e)
			}
			if !strings.Contains(e.Detail, tt.wantDetail) {
				t.Errorf("Detail = %q, want it to contain %q", e.Detail, tt.wantDetail)
			}
			fix := []string{}
			if k, ok := keyNamed(tt.wantKey); ok {
				// Every fix names the key and its variable.
				fix = append(fix, k.Name, k.Env)
			}
			for _, want := range append(fix, tt.wantFix...) {
				if !strings.Contains(e.Fix, want) {
					t.Errorf("Fix = %q, want it to contain %q", e.Fix, want)
				}
			}
			checkNoSecrets(t, "error", e.Error())
		})
	}
}

func TestDefaultIsValidWithAuth(t *testing.T) {
	c := Default()
	if err := c.Validate(); err == nil {
		t.Fatal("Default().Validate() = nil, want the missing-auth error")
	}
	c.AuthSection.AllowAnonymous = true
	if err := c.Validate(); err != nil {
		t.Fatalf("Default with allow_anonymous: Validate = %v", err)
	}
	if c.ChangefeedEnabled() {
		t.Errorf("ChangefeedEnabled() = true for the default, want false")
	}
}

func TestConversions(t *testing.T) {
	c := fullConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	t.Run("changefeed", func(t *testing.T) {
		got := c.Changefeed()
		want := changefeed.Config{
			DatabaseURL: testDBURL, Slot: "herald_main", Publication: "herald_pub",
			Tables: []string{"items", "public.orders"}, FullIdentityTables: []string{"public.items"},
			TenantColumn: "org_id", WriteTagPrefix: "app.write", MessagePrefixes: []string{"*"},
			StatusInterval: 5 * time.Second, SilenceTimeout: 20 * time.Second, MaxTxnBytes: 1 << 30, QueueTxns: 8, ReadLinger: 50 * time.Microsecond,
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("Changefeed() mismatch (-want +got):\n%s", d)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Changefeed().Validate() = %v", err)
		}
		got.Tables[0] = "changed"
		if c.ChangefeedSection.Tables[0] != "items" {
			t.Errorf("changing the returned Config changed the original")
		}
		if !c.ChangefeedEnabled() {
			t.Errorf("ChangefeedEnabled() = false with a database URL")
		}
	})

	t.Run("auth", func(t *testing.T) {
		got := c.Auth()
		want := auth.Config{
			Secrets: []string{testSecret, testSecret2}, PublicKeys: []string{"/etc/herald/a.pem", "/etc/herald/b.pem"},
			JWKSFile: "/etc/herald/jwks.json", Issuer: "https://auth.example.com/", Audience: "herald",
			Leeway: -1, AllowAnonymous: true, AllowNoExpiry: true, AppClaim: "azp",
		}
		if d := cmp.Diff(want, got, cmp.Comparer(func(a, b func() time.Time) bool { return a == nil && b == nil })); d != "" {
			t.Errorf("Auth() mismatch (-want +got):\n%s", d)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Auth().Validate() = %v", err)
		}
	})

	t.Run("auth leeway", func(t *testing.T) {
		for _, tt := range []struct {
			in, want time.Duration
		}{
			{0, -1}, // none: auth reads zero as its default
			{time.Second, time.Second},
			{30 * time.Second, 30 * time.Second},
		} {
			c := Default()
			c.AuthSection.Leeway = tt.in
			if got := c.Auth().Leeway; got != tt.want {
				t.Errorf("leeway %s: Auth().Leeway = %s, want %s", tt.in, got, tt.want)
			}
		}
	})

	t.Run("changefeed read linger", func(t *testing.T) {
		for _, tt := range []struct {
			in, want time.Duration
		}{
			{0, -1}, // off: changefeed reads zero as its default
			{50 * time.Microsecond, 50 * time.Microsecond},
			{changefeed.DefaultReadLinger, changefeed.DefaultReadLinger},
		} {
			c := fullConfig()
			c.ChangefeedSection.ReadLinger = tt.in
			if got := c.Changefeed().ReadLinger; got != tt.want {
				t.Errorf("read_linger %s: Changefeed().ReadLinger = %s, want %s", tt.in, got, tt.want)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("read_linger %s: %v", tt.in, err)
			}
		}
	})

	t.Run("lanes", func(t *testing.T) {
		got := c.Lanes()
		if got.EncodeMarker != nil {
			t.Errorf("EncodeMarker is set, want nil for the server to fill")
		}
		got.Now = nil
		want := delivery.Config{MaxDataFrames: 10, MaxDataBytes: 1 << 20, MaxControlFrames: 20, MaxControlBytes: 128 << 10}
		if d := cmp.Diff(want, got, cmp.Comparer(func(a, b func() time.Time) bool { return a == nil && b == nil })); d != "" {
			t.Errorf("Lanes() mismatch (-want +got):\n%s", d)
		}
		got.EncodeMarker = func(dst []byte, _ delivery.Marker) []byte { return dst }
		if err := got.Validate(); err != nil {
			t.Errorf("Lanes().Validate() with a marker encoder = %v", err)
		}
	})

	t.Run("defaults agree with the packages", func(t *testing.T) {
		d := Default()
		if got, want := d.AuthSection.Leeway, auth.DefaultLeeway; got != want {
			t.Errorf("auth.leeway default %s, auth.DefaultLeeway %s", got, want)
		}
		l := d.Lanes()
		if l.MaxDataFrames != delivery.DefaultMaxDataFrames || l.MaxDataBytes != delivery.DefaultMaxDataBytes ||
			l.MaxControlFrames != delivery.DefaultMaxControlFrames || l.MaxControlBytes != delivery.DefaultMaxControlBytes {
			t.Errorf("lane defaults %+v differ from delivery's", l)
		}
	})
}

// TestProblemsReportsEverySection: Problems finds what Validate finds, and the problems of the
// other sections too, in Validate's order; Read reads what Load would refuse.
func TestProblemsReportsEverySection(t *testing.T) {
	path := writeConfig(t, "listen: nowhere\napi:\n  keys: [short]\nauth:\n  allow_anonymous: true\n")
	if _, err := Load(path, nil); err == nil {
		t.Fatal("Load accepted the file")
	}
	c, err := Read(path, nil)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	problems := c.Problems()
	var keys []string
	for _, p := range problems {
		keys = append(keys, asError(t, p).Key)
	}
	if want := []string{"listen", "api.keys[0]"}; !cmp.Equal(keys, want) {
		t.Errorf("Problems' keys = %v, want %v", keys, want)
	}
	if err := c.Validate(); err == nil || err.Error() != problems[0].Error() {
		t.Errorf("Validate = %v, want the first problem, %v", err, problems[0])
	}
	if got := Default().Problems(); len(got) != 1 || asError(t, got[0]).Key != "auth" {
		t.Errorf("Default().Problems() = %v, want the one about auth", got)
	}
	if _, err := Read(writeConfig(t, "listn: :80\n"), nil); asError(t, err).Key != "listn" {
		t.Errorf("Read of a typo: %v, want the unknown key", err)
	}
	if err := c.PolicyError(nil); err != nil {
		t.Errorf("PolicyError(nil) = %v", err)
	}
}
