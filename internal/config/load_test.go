package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/heraldrt/herald/internal/channel"
)

func TestLoadNoFileIsDefault(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want func(*Config)
	}{
		{"anonymous", []string{anonymousEnv}, func(c *Config) { c.AuthSection.AllowAnonymous = true }},
		{"secret", []string{secretFromEnv}, func(c *Config) { c.AuthSection.Secrets = []string{testSecret} }},
		{"other variables are ignored", []string{"PATH=/bin", "HOME=/root", "DATABASE_URL=x", anonymousEnv},
			func(c *Config) { c.AuthSection.AllowAnonymous = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load("", tt.env)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := Default()
			tt.want(want)
			if d := diffConfig(want, got); d != "" {
				t.Errorf("Load(\"\") mismatch (-want +got):\n%s", d)
			}
		})
	}
}

func TestLoadNoAuthIsRefused(t *testing.T) {
	_, err := Load("", nil)
	e := asError(t, err)
	if e.Key != "auth" {
		t.Errorf("Key = %q, want auth", e.Key)
	}
	for _, want := range []string{"auth.secrets", "HERALD_AUTH_SECRETS", "allow_anonymous: true", "HERALD_AUTH_ALLOW_ANONYMOUS=true"} {
		if !strings.Contains(e.Fix, want) {
			t.Errorf("Fix %q does not mention %q", e.Fix, want)
		}
	}
}

// fullFile sets every key to a value other than its default.
const fullFile = `
listen: "0.0.0.0:9090"
admin_listen: "127.0.0.1:9091"
public_url: https://rt.example.com
log_level: debug
log_format: json
shutdown_timeout: 1m30s
auth:
  secrets: [` + testSecret + `, ` + testSecret2 + `]
  public_keys:
    - /etc/herald/a.pem
    - /etc/herald/b.pem
  jwks_file: /etc/herald/jwks.json
  issuer: https://auth.example.com/
  audience: herald
  leeway: 0s
  allow_anonymous: true
  allow_no_expiry: true
  app_claim: azp
api:
  keys: [` + testAPIKey + `]
channels:
  client_publish: true
  fanout_queue: 64
  fanout_deliveries: 5000
  fanout_bytes: 2MiB
  publish_wait: 3s
  history_size: 8
  history_bytes: 32KiB
  history_ttl: 30s
presence:
  ttl: 12s
  max_members: 9
  max_meta_bytes: 300
limits:
  max_connections: 500
  fd_reserve: 100
  listen_backlog: 512
  max_subscriptions: 7
  max_frame_bytes: 32KiB
  max_publish_bytes: 16384
  data_lane_frames: 10
  data_lane_bytes: 1MiB
  control_lane_frames: 20
  control_lane_bytes: 128KiB
  slow_timeout: 3s
  handshake_timeout: 4s
  ping_interval: 5s
  sse_resume_window: 1m
  sse_resume_streams: 7
changefeed:
  database_url: ` + testDBURL + `
  slot: herald_main
  publication: herald_pub
  tables: [items, public.orders]
  full_identity_tables: [public.items]
  tenant_column: org_id
  write_tag_prefix: app.write
  message_prefixes: ["*"]
  status_interval: 5s
  silence_timeout: 20s
  max_txn_bytes: 1GiB
  queue_txns: 8
  read_linger: 50us
  history_bytes: 32MiB
  history_age: 5m
  lag_warn_bytes: 64MiB
handoff:
  max_concurrent: 2
  queue_wait: 2s
  timeout: 30s
  max_rows: 5000
  max_bytes: 8MiB
  page_rows: 100
  page_bytes: 64KiB
  early_bytes: 1MiB
  pending_bytes: 8MiB
  lookback: 20s
policy:
  max_cost: 500
  tables:
    public.items:
      subscribe: auth.role != "guest"
      row: |
        row.org_id == auth.org_id
      columns: [id, org_id, title]
    public.orders:
      row: "true"
      columns: 'auth.role == "admin" ? ["id", "total"] : ["id"]'
  channels:
    "users/*/**":
      subscribe: channel.startsWith("users/" + auth.sub + "/")
      publish: 'channel.startsWith("users/" + auth.sub + "/")'
    rooms/*:
      presence: "true"
redis:
  url: redis://:redis-pass-Xy7@cache.internal:6379/2
  prefix: rt
  max_identity_subscriptions: 250
cluster:
  node_id: node-a
  advertise_url: http://10.0.0.5:9090
durable:
  max_items: 50
  max_bytes: 64KiB
  lease: 5s
  max_attempts: 3
  max_in_flight: 2
  idle_ttl: 1h
  max_per_holder: 4
`

func fullConfig() *Config {
	return &Config{
		Listen:          "0.0.0.0:9090",
		AdminListen:     "127.0.0.1:9091",
		PublicURL:       "https://rt.example.com",
		LogLevel:        "debug",
		LogFormat:       "json",
		ShutdownTimeout: 90 * time.Second,
		AuthSection: AuthSection{
			Secrets:        []string{testSecret, testSecret2},
			PublicKeys:     []string{"/etc/herald/a.pem", "/etc/herald/b.pem"},
			JWKSFile:       "/etc/herald/jwks.json",
			Issuer:         "https://auth.example.com/",
			Audience:       "herald",
			Leeway:         0,
			AllowAnonymous: true,
			AllowNoExpiry:  true,
			AppClaim:       "azp",
		},
		API: APISection{Keys: []string{testAPIKey}},
		Channels: ChannelsSection{ClientPublish: true, FanoutQueue: 64, FanoutDeliveries: 5000, FanoutBytes: 2 * MiB, PublishWait: 3 * time.Second,
			HistorySize: 8, HistoryBytes: 32 * KiB, HistoryTTL: 30 * time.Second},
		Presence: PresenceSection{TTL: 12 * time.Second, MaxMembers: 9, MaxMetaBytes: 300},
		Limits: LimitsSection{
			MaxConnections: 500, MaxSubscriptions: 7, FDReserve: 100, ListenBacklog: 512,
			MaxFrameBytes: 32 * KiB, MaxPublishBytes: 16 * KiB,
			DataLaneFrames: 10, DataLaneBytes: MiB,
			ControlLaneFrames: 20, ControlLaneBytes: 128 * KiB,
			SlowTimeout: 3 * time.Second, HandshakeTimeout: 4 * time.Second, PingInterval: 5 * time.Second,
			SSEResumeWindow: time.Minute, SSEResumeStreams: 7,
		},
		ChangefeedSection: ChangefeedSection{
			DatabaseURL:        testDBURL,
			Slot:               "herald_main",
			Publication:        "herald_pub",
			Tables:             []string{"items", "public.orders"},
			FullIdentityTables: []string{"public.items"},
			TenantColumn:       "org_id",
			WriteTagPrefix:     "app.write",
			MessagePrefixes:    []string{"*"},
			StatusInterval:     5 * time.Second,
			SilenceTimeout:     20 * time.Second,
			MaxTxnBytes:        GiB,
			QueueTxns:          8,
			ReadLinger:         50 * time.Microsecond,
			HistoryBytes:       32 * MiB,
			HistoryAge:         5 * time.Minute,
			LagWarnBytes:       64 * MiB,
		},
		Handoff: HandoffSection{MaxConcurrent: 2, QueueWait: 2 * time.Second, Timeout: 30 * time.Second, MaxRows: 5000, MaxBytes: 8 * MiB,
			PageRows: 100, PageBytes: 64 * KiB, EarlyBytes: MiB, PendingBytes: 8 * MiB, Lookback: 20 * time.Second},
		PolicySection: PolicySection{
			MaxCost: 500,
			Tables: map[string]TablePolicy{
				"public.items": {Subscribe: `auth.role != "guest"`, Row: "row.org_id == auth.org_id\n",
					Columns: PolicyColumns{List: []string{"id", "org_id", "title"}}},
				"public.orders": {Row: "true", Columns: PolicyColumns{Rule: `auth.role == "admin" ? ["id", "total"] : ["id"]`}},
			},
			Channels: map[string]ChannelPolicy{
				"users/*/**": {Subscribe: `channel.startsWith("users/" + auth.sub + "/")`, Publish: `channel.startsWith("users/" + auth.sub + "/")`},
				"rooms/*":    {Presence: "true"},
			},
		},
		Redis:   RedisSection{URL: "redis://:redis-pass-Xy7@cache.internal:6379/2", Prefix: "rt", MaxIdentitySubscriptions: 250},
		Cluster: ClusterSection{NodeID: "node-a", AdvertiseURL: "http://10.0.0.5:9090"},
		Durable: DurableSection{MaxItems: 50, MaxBytes: 64 * KiB, Lease: 5 * time.Second, MaxAttempts: 3, MaxInFlight: 2,
			IdleTTL: time.Hour, MaxPerHolder: 4},
	}
}

func TestLoadFullFileRoundTrips(t *testing.T) {
	got, err := Load(writeConfig(t, fullFile), nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if d := diffConfig(fullConfig(), got); d != "" {
		t.Fatalf("Load(full file) mismatch (-want +got):\n%s", d)
	}
	// Every key differs from its default, so the test above covers every key's decoding.
	def := Default()
	for _, k := range Keys() {
		if k.Format(got) == k.Format(def) {
			t.Errorf("the full file leaves %s at its default %q; give it another value", k.Name, k.Format(def))
		}
		if src := got.source(k.Name); !strings.Contains(src, "herald.yaml:") {
			t.Errorf("source of %s = %q, want herald.yaml:<line>", k.Name, src)
		}
	}

	// Marshalled back to YAML it reads the same: Size and Duration print in their units.
	out, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(writeConfig(t, string(out)), nil)
	if err != nil {
		t.Fatalf("Load(marshalled): %v\n%s", err, out)
	}
	if d := diffConfig(got, again); d != "" {
		t.Errorf("marshal round trip mismatch (-want +got):\n%s\n%s", d, out)
	}
	for _, want := range []string{"max_txn_bytes: 1GiB", "shutdown_timeout: 1m30s", "max_frame_bytes: 32KiB"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("marshalled config lacks %q:\n%s", want, out)
		}
	}
}

func TestLoadEmptyFiles(t *testing.T) {
	for _, tt := range []struct{ name, body string }{
		{"empty", ""},
		{"comments only", "# nothing here\n\n# at all\n"},
		{"null document", "~\n"},
		{"explicit document", "---\n"},
		{"null sections and keys", "auth:\nlimits: ~\nlisten:\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(writeConfig(t, tt.body), []string{anonymousEnv})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := Default()
			want.AuthSection.AllowAnonymous = true
			if d := diffConfig(want, got); d != "" {
				t.Errorf("mismatch (-want +got):\n%s", d)
			}
		})
	}
}

func TestEnvOverridesFile(t *testing.T) {
	path := writeConfig(t, `
listen: 127.0.0.1:9000
log_level: debug
auth:
  secrets: [`+testSecret+`]
limits:
  max_connections: 50
  data_lane_bytes: 8MiB
changefeed:
  tables: [a, b]
`)
	env := []string{
		"HERALD_LISTEN=:8443",
		"HERALD_LIMITS_MAX_CONNECTIONS=75",
		"HERALD_CHANGEFEED_DATABASE_URL=" + testDBURL,
		"HERALD_CHANGEFEED_TABLES= public.c ,, public.d,",
		"HERALD_AUTH_SECRETS=" + testSecret2 + "," + testSecret,
		"HERALD_LOG_LEVEL=", // empty: unset, the file's value stays
	}
	got, err := Load(path, env)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	want.Listen = ":8443"
	want.LogLevel = "debug"
	want.AuthSection.Secrets = []string{testSecret2, testSecret}
	want.Limits.MaxConnections = 75
	want.Limits.DataLaneBytes = 8 * MiB
	want.ChangefeedSection.DatabaseURL = testDBURL
	want.ChangefeedSection.Tables = []string{"public.c", "public.d"}
	if d := diffConfig(want, got); d != "" {
		t.Errorf("mismatch (-want +got):\n%s", d)
	}
	for key, src := range map[string]string{
		"listen":                 "env HERALD_LISTEN",
		"log_level":              "herald.yaml:3",
		"limits.max_connections": "env HERALD_LIMITS_MAX_CONNECTIONS",
		"limits.data_lane_bytes": "herald.yaml:8",
		"changefeed.tables":      "env HERALD_CHANGEFEED_TABLES",
	} {
		if got := got.source(key); !strings.HasSuffix(got, src) {
			t.Errorf("source(%s) = %q, want …%s", key, got, src)
		}
	}
}

func TestEnvValues(t *testing.T) {
	tests := []struct {
		name string
		env  string
		want func(*Config)
	}{
		{"list", "HERALD_AUTH_PUBLIC_KEYS=/a.pem,/b.pem", func(c *Config) { c.AuthSection.PublicKeys = []string{"/a.pem", "/b.pem"} }},
		{"list spaces and empties", "HERALD_AUTH_PUBLIC_KEYS= /a.pem , ,/b.pem ", func(c *Config) { c.AuthSection.PublicKeys = []string{"/a.pem", "/b.pem"} }},
		{"list of commas only", "HERALD_AUTH_PUBLIC_KEYS=,,", func(c *Config) {}},
		{"size bytes", "HERALD_LIMITS_MAX_FRAME_BYTES=65536", func(c *Config) {}},
		{"size KiB", "HERALD_LIMITS_MAX_FRAME_BYTES=16KiB", func(c *Config) { c.Limits.MaxFrameBytes = 16 * KiB }},
		{"size MiB lower case", "HERALD_LIMITS_DATA_LANE_BYTES=8mib", func(c *Config) { c.Limits.DataLaneBytes = 8 * MiB }},
		{"size with space", "HERALD_LIMITS_DATA_LANE_BYTES=2 MiB", func(c *Config) { c.Limits.DataLaneBytes = 2 * MiB }},
		{"duration", "HERALD_LIMITS_PING_INTERVAL=1m30s", func(c *Config) { c.Limits.PingInterval = 90 * time.Second }},
		{"duration ms", "HERALD_SHUTDOWN_TIMEOUT=1500ms", func(c *Config) { c.ShutdownTimeout = 1500 * time.Millisecond }},
		{"zero leeway", "HERALD_AUTH_LEEWAY=0", func(c *Config) { c.AuthSection.Leeway = 0 }},
		{"bool true", "HERALD_CHANNELS_CLIENT_PUBLISH=true", func(c *Config) { c.Channels.ClientPublish = true }},
		{"bool 1", "HERALD_CHANNELS_CLIENT_PUBLISH=1", func(c *Config) { c.Channels.ClientPublish = true }},
		{"bool FALSE", "HERALD_AUTH_ALLOW_NO_EXPIRY=FALSE", func(c *Config) {}},
		{"int", "HERALD_LIMITS_MAX_SUBSCRIPTIONS=250", func(c *Config) { c.Limits.MaxSubscriptions = 250 }},
		{"string with =", "HERALD_AUTH_AUDIENCE=a=b", func(c *Config) { c.AuthSection.Audience = "a=b" }},
		{"alias of the database URL", "HERALD_DATABASE_URL=" + testDBURL, func(c *Config) { c.ChangefeedSection.DatabaseURL = testDBURL }},
		{"test variables are left alone", "HERALD_TEST_DATABASE_URL=postgres://x", func(c *Config) {}},
		{"testenv variables are left alone", "HERALD_TESTENV_PGPORT=1", func(c *Config) {}},
		{"demo variables are left alone", "HERALD_DEMO_DIR=/tmp/d", func(c *Config) {}},
		{"the bare test prefix is left alone", "HERALD_TEST=1", func(c *Config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load("", []string{secretFromEnv, tt.env})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := Default()
			want.AuthSection.Secrets = []string{testSecret}
			tt.want(want)
			if d := diffConfig(want, got); d != "" {
				t.Errorf("mismatch (-want +got):\n%s", d)
			}
		})
	}
}

func TestDatabaseURLAlias(t *testing.T) {
	other := "postgres://herald@other:5432/app?sslmode=verify-full"
	tests := []struct {
		name       string
		env        []string
		want       string
		wantSource string
		wantErr    bool
	}{
		{"own variable", []string{"HERALD_CHANGEFEED_DATABASE_URL=" + other}, other, "env HERALD_CHANGEFEED_DATABASE_URL", false},
		{"alias", []string{"HERALD_DATABASE_URL=" + testDBURL}, testDBURL, "env HERALD_DATABASE_URL", false},
		{"both the same", []string{"HERALD_DATABASE_URL=" + testDBURL, "HERALD_CHANGEFEED_DATABASE_URL=" + testDBURL}, testDBURL, "env HERALD_CHANGEFEED_DATABASE_URL", false},
		{"alias empty", []string{"HERALD_DATABASE_URL=", "HERALD_CHANGEFEED_DATABASE_URL=" + other}, other, "env HERALD_CHANGEFEED_DATABASE_URL", false},
		{"both different", []string{"HERALD_DATABASE_URL=" + testDBURL, "HERALD_CHANGEFEED_DATABASE_URL=" + other}, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load("", append([]string{anonymousEnv}, tt.env...))
			if tt.wantErr {
				e := asError(t, err)
				if e.Key != "changefeed.database_url" || !strings.Contains(e.Detail, "HERALD_DATABASE_URL") {
					t.Errorf("got %v, want an error about both variables", e)
				}
				checkNoSecrets(t, "error", e.Error())
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got.ChangefeedSection.DatabaseURL != tt.want {
				t.Errorf("database_url = %q, want %q", got.ChangefeedSection.DatabaseURL, tt.want)
			}
			if src := got.source("changefeed.database_url"); src != tt.wantSource {
				t.Errorf("source = %q, want %q", src, tt.wantSource)
			}
		})
	}
}

func TestLoadFileErrors(t *testing.T) {
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.yaml")
		e := asError(t, func() error { _, err := Load(path, nil); return err }())
		if e.Source != path || !os.IsNotExist(e.Err) || e.Fix == "" {
			t.Errorf("got %#v, want a not-exist error naming %s with a fix", e, path)
		}
	})
	t.Run("too large", func(t *testing.T) {
		path := writeConfig(t, "# "+strings.Repeat("x", maxFileBytes)+"\n")
		e := asError(t, func() error { _, err := Load(path, nil); return err }())
		if !strings.Contains(e.Detail, "larger than 1MiB") {
			t.Errorf("Detail = %q, want it to say the file is too large", e.Detail)
		}
	})
}

// The channels.fanout_* keys and publish_wait reach the hub's Config as read, and the
// channels.history_* keys its History; history_size 0 turns the history off.
func TestFanoutConfig(t *testing.T) {
	got := fullConfig().FanoutConfig()
	if got.QueueLen != 64 || got.QueueDeliveries != 5000 || got.QueueBytes != 2<<20 || got.QueueWait != 3*time.Second {
		t.Errorf("FanoutConfig() = %+v, want the full config's 64 publications, 5000 deliveries, 2 MiB and 3s", got)
	}
	if want := (channel.HistoryConfig{Size: 8, Bytes: 32 << 10, TTL: 30 * time.Second}); got.History != want {
		t.Errorf("FanoutConfig().History = %+v, want %+v", got.History, want)
	}
	d := Default().FanoutConfig()
	if d.QueueLen != channel.DefaultQueueLen || d.QueueWait != channel.DefaultQueueWait {
		t.Errorf("Default().FanoutConfig() = %+v, want channel's defaults", d)
	}
	if want := (channel.HistoryConfig{}).WithDefaults(); d.History != want {
		t.Errorf("Default().FanoutConfig().History = %+v, want channel's defaults %+v", d.History, want)
	}
	off := Default()
	off.Channels.HistorySize = 0
	if h := off.FanoutConfig().History; h.On() {
		t.Errorf("history_size 0: History = %+v, want none kept", h)
	}
}
