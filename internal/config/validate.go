package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
)

// MinAPIKeyBytes is the shortest api.keys entry accepted: 128 bits, beyond guessing by anyone
// who can reach the publish API.
const MinAPIKeyBytes = 16

var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"text", "json"}
)

// Validate reports the first thing wrong with the configuration, as an *Error. Each section
// is checked in file order; auth and changefeed settings are checked by those packages'
// Validate, and their errors carried over with the key and variable to change.
func (c *Config) Validate() error {
	for _, check := range c.checks() {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// Problems reports everything Validate would, not only the first: at most one problem per
// section (the first of each), in Validate's order. Validate is Problems()[0]. Each is an
// *Error, but for a policy rule that fails in a way the policy package does not describe.
func (c *Config) Problems() []error {
	var out []error
	for _, check := range c.checks() {
		if err := check(); err != nil {
			out = append(out, err)
		}
	}
	return out
}

// checks are Validate's checks, in order. Each stands alone: none relies on an earlier one
// having passed, so Problems may run them all.
func (c *Config) checks() []func() error {
	return []func() error{c.checkPositive, c.checkServer, c.checkAuth, c.checkAPI, c.checkLimits, c.checkChannels, c.checkPresence, c.checkChangefeed, c.checkHandoff, c.checkPolicy, c.checkCluster, c.checkDurable}
}

// bad builds the error for key, with where its value came from.
func (c *Config) bad(key, detail, fix string) *Error {
	return &Error{Stage: stage, Key: key, Source: c.source(key), Detail: detail, Fix: fix}
}

func mustKey(name string) Key {
	k, ok := keyNamed(name)
	if !ok {
		panic("config: no key " + name)
	}
	return k
}

// zeroMeans are the keys for which zero has a meaning of its own, each checked elsewhere:
// auth.leeway (no skew), channels.history_size (no history: checkChannels),
// limits.sse_resume_window (no ended stream kept: checkLimits) and changefeed.read_linger (no
// linger: checkChangefeed).
var zeroMeans = []string{"auth.leeway", "channels.history_size", "limits.sse_resume_window", "changefeed.read_linger"}

// checkPositive refuses a zero or negative number, size or duration for every key but
// zeroMeans. Nothing else here has a meaning for zero, and a zero limit would refuse
// everything while looking like "unlimited".
func (c *Config) checkPositive() error {
	for _, k := range keys() {
		if slices.Contains(zeroMeans, k.Name) {
			continue
		}
		switch k.typ {
		case typInt, typSize, typDuration:
			if k.field(c).Int() > 0 {
				continue
			}
			return c.bad(k.Name, fmt.Sprintf("is %s, want more than zero", k.Format(c)), k.fix(wantFor(k)+" above zero", exampleFor(k)))
		}
	}
	return nil
}

func (c *Config) checkServer() error {
	k := mustKey("listen")
	_, port, err := net.SplitHostPort(c.Listen)
	if p, perr := strconv.Atoi(port); err == nil && (perr != nil || p < 0 || p > 65535) {
		err = errors.New("bad port")
	}
	if err != nil {
		return c.bad(k.Name, fmt.Sprintf("is %q, want host:port with a port number (an empty host, as in :8080, means every interface)", c.Listen),
			k.fix("host:port", "127.0.0.1:8080"))
	}
	if c.AdminListen != "" {
		k := mustKey("admin_listen")
		_, port, err := net.SplitHostPort(c.AdminListen)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil || p < 0 || p > 65535 {
			return c.bad(k.Name, fmt.Sprintf("is %q, want host:port with a port number", c.AdminListen),
				k.fix("host:port for health and metrics", "127.0.0.1:9091"))
		}
		if c.AdminListen == c.Listen && p != 0 {
			return c.bad(k.Name, fmt.Sprintf("is %q, the same address as listen; it needs its own", c.AdminListen),
				k.fix("another host:port, or leave it empty to serve health and metrics on listen only", "127.0.0.1:9091"))
		}
	}
	if c.PublicURL != "" {
		k := mustKey("public_url")
		// The value is not quoted: a URL pasted with credentials in it would be echoed.
		u, err := url.Parse(c.PublicURL)
		if err != nil || u.Host == "" || !slices.Contains([]string{"http", "https", "ws", "wss"}, u.Scheme) {
			return c.bad(k.Name, "is not an absolute http, https, ws or wss URL with a host", k.fix("the URL clients connect to", exampleFor(k)))
		}
		if u.User != nil {
			return c.bad(k.Name, "holds a user or password; it is printed in examples for clients", k.fix("the URL without credentials", exampleFor(k)))
		}
	}
	if !slices.Contains(logLevels, c.LogLevel) {
		k := mustKey("log_level")
		return c.bad(k.Name, fmt.Sprintf("is %q, want one of %s", c.LogLevel, strings.Join(logLevels, ", ")), k.fix("one of "+strings.Join(logLevels, ", "), "info"))
	}
	if !slices.Contains(logFormats, c.LogFormat) {
		k := mustKey("log_format")
		return c.bad(k.Name, fmt.Sprintf("is %q, want one of %s", c.LogFormat, strings.Join(logFormats, ", ")), k.fix("text or json", "json"))
	}
	return nil
}

func (c *Config) checkAuth() error {
	a := c.AuthSection
	if a.Leeway < 0 {
		k := mustKey("auth.leeway")
		return c.bad(k.Name, fmt.Sprintf("is %s, want 0s (no clock skew allowed) or more", a.Leeway), k.fix("a duration of 0s to 5m", "30s"))
	}
	if len(a.Secrets) == 0 && len(a.PublicKeys) == 0 && a.JWKSFile == "" && !a.AllowAnonymous {
		// auth.Validate refuses this too; the rule is stated here so the fix names this
		// package's variables.
		return &Error{Stage: stage, Key: "auth",
			Detail: "nothing to verify tokens with: auth.secrets, auth.public_keys and auth.jwks_file are all empty, " +
				"and auth.allow_anonymous is false, so no client could ever connect",
			Fix: "set auth.secrets to your token issuer's HS256 secret (env HERALD_AUTH_SECRETS, e.g. " +
				"HERALD_AUTH_SECRETS=\"$(openssl rand -base64 48)\", the same secret at the issuer), or auth.public_keys " +
				"(HERALD_AUTH_PUBLIC_KEYS) or auth.jwks_file (HERALD_AUTH_JWKS_FILE) to its public keys; or, to let " +
				"clients in without a token, set auth: {allow_anonymous: true} in the config file or HERALD_AUTH_ALLOW_ANONYMOUS=true"}
	}
	if err := c.Auth().Validate(); err != nil {
		var ae *auth.ConfigError
		if !errors.As(err, &ae) {
			return &Error{Stage: stage, Key: "auth", Detail: err.Error(), Err: err}
		}
		return c.carried(ae.Key, ae.Detail, ae.Fix, err)
	}
	return nil
}

// carried wraps another package's config error about key, adding where the value came from
// and the variable that sets it.
func (c *Config) carried(key, detail, fix string, err error) *Error {
	e := c.bad(key, detail, fix)
	e.Err = err
	if k, ok := keyNamed(key); ok && !strings.Contains(fix, k.Env) {
		if e.Fix != "" {
			e.Fix += "; "
		}
		e.Fix += fmt.Sprintf("%s is set in the config file or with %s", k.Name, k.Env)
	}
	return e
}

func (c *Config) checkAPI() error {
	k := mustKey("api.keys")
	fix := fmt.Sprintf("generate each key with: openssl rand -base64 24, and list them in %s (comma-separated) or api.keys", k.Env)
	for i, key := range c.API.Keys {
		name := fmt.Sprintf("%s[%d]", k.Name, i)
		switch {
		case len(key) < MinAPIKeyBytes:
			return c.bad(name, fmt.Sprintf("is %d bytes; an API key needs at least %d, or it can be guessed", len(key), MinAPIKeyBytes), fix)
		case strings.TrimSpace(key) != key:
			return c.bad(name, "begins or ends with whitespace (often a trailing newline from a file), which clients almost certainly do not send", "remove the surrounding whitespace from the key, in api.keys or "+k.Env)
		case slices.Contains(c.AuthSection.Secrets, key):
			// A publish key travels in request headers, where proxies and logs can see it; a
			// token secret that did so could be used to sign tokens for anyone.
			return c.bad(name, "is also one of auth.secrets: whoever sees the API key in a request could sign tokens with it", fix)
		}
	}
	return nil
}

func (c *Config) checkLimits() error {
	l := c.Limits
	if w := c.Limits.SSEResumeWindow; w < 0 {
		k := mustKey("limits.sse_resume_window")
		return c.bad(k.Name, fmt.Sprintf("is %s, want 0s (keep no ended stream) or more", w), k.fix("a duration of 0s or more", "2m"))
	}
	frame, publish := mustKey("limits.max_frame_bytes"), mustKey("limits.max_publish_bytes")
	for _, lane := range []struct {
		key     string
		bytes   Size
		against Key
		min     Size
		why     string
	}{
		{"limits.data_lane_bytes", l.DataLaneBytes, frame, l.MaxFrameBytes, "a frame that size could never be queued for delivery"},
		{"limits.data_lane_bytes", l.DataLaneBytes, publish, l.MaxPublishBytes, "a publish that size could never be delivered"},
		{"limits.control_lane_bytes", l.ControlLaneBytes, frame, l.MaxFrameBytes, "a reply to a frame that size might not be queued"},
	} {
		if lane.bytes < lane.min {
			k := mustKey(lane.key)
			return c.bad(k.Name, fmt.Sprintf("is %s, smaller than %s (%s): %s", lane.bytes, lane.against.Name, lane.min, lane.why),
				k.fix("at least "+lane.min.String(), exampleFor(k))+fmt.Sprintf(", or lower %s (%s)", lane.against.Name, lane.against.Env))
		}
	}
	return nil
}

// checkChannels refuses a negative history size, and a history whose full replay could not be
// queued on an empty data lane: a client resuming from before it would always be told of a gap
// (lane_full) instead of being replayed what it missed.
func (c *Config) checkChannels() error {
	ch, l := c.Channels, c.Limits
	size := mustKey("channels.history_size")
	if ch.HistorySize < 0 {
		return c.bad(size.Name, fmt.Sprintf("is %d, want 0 (no history) or more", ch.HistorySize), size.fix("a whole number, 0 for no history", exampleFor(size)))
	}
	if ch.HistorySize == 0 {
		return nil
	}
	frames, lane := mustKey("limits.data_lane_frames"), mustKey("limits.data_lane_bytes")
	if ch.HistorySize > l.DataLaneFrames {
		return c.bad(size.Name, fmt.Sprintf("is %d, more than %s (%d): a replay of a full history could not be queued for a client", ch.HistorySize, frames.Name, l.DataLaneFrames),
			size.fix(fmt.Sprintf("at most %d", l.DataLaneFrames), exampleFor(size))+fmt.Sprintf(", or raise %s (%s)", frames.Name, frames.Env))
	}
	if ch.HistoryBytes > l.DataLaneBytes {
		k := mustKey("channels.history_bytes")
		return c.bad(k.Name, fmt.Sprintf("is %s, more than %s (%s): a replay of a full history could not be queued for a client", ch.HistoryBytes, lane.Name, l.DataLaneBytes),
			k.fix("at most "+l.DataLaneBytes.String(), exampleFor(k))+fmt.Sprintf(", or raise %s (%s)", lane.Name, lane.Env))
	}
	return nil
}

// RosterMemberOverhead is what a roster frame spends on one member beside its meta (its id,
// subject and keys), as the bound on a roster's size counts it.
const RosterMemberOverhead = 256

// checkPresence refuses a TTL too short to heartbeat within, and a roster that could not be
// queued: a roster goes as one reply, so max_members of the largest meta must fit in half the
// control lane, leaving the other half to the connection's other replies.
func (c *Config) checkPresence() error {
	p := c.Presence
	if p.TTL < time.Second {
		k := mustKey("presence.ttl")
		return c.bad(k.Name, fmt.Sprintf("is %s, shorter than 1s: the node renews its members every ttl/3", p.TTL), k.fix("at least 1s", exampleFor(k)))
	}
	if p.MaxMetaBytes < 2 {
		k := mustKey("presence.max_meta_bytes")
		return c.bad(k.Name, fmt.Sprintf("is %s, too small for any meta ({} is 2 bytes)", p.MaxMetaBytes), k.fix("at least 2", exampleFor(k)))
	}
	roster := Size(p.MaxMembers) * (p.MaxMetaBytes + RosterMemberOverhead)
	if half := c.Limits.ControlLaneBytes / 2; roster > half {
		k, lane := mustKey("presence.max_members"), mustKey("limits.control_lane_bytes")
		return c.bad(k.Name, fmt.Sprintf("times presence.max_meta_bytes (%s) plus %d bytes a member is %s, more than half of %s (%s): a full roster could not be queued",
			p.MaxMetaBytes, RosterMemberOverhead, roster, lane.Name, c.Limits.ControlLaneBytes),
			k.fix(fmt.Sprintf("at most %d", int64(half)/int64(p.MaxMetaBytes+RosterMemberOverhead)), exampleFor(k))+
				fmt.Sprintf(", or lower presence.max_meta_bytes (%s), or raise %s (%s)", mustKey("presence.max_meta_bytes").Env, lane.Name, lane.Env))
	}
	return nil
}

// checkDurable refuses a lease or idle TTL too short to keep, and a queue too small for one
// message.
func (c *Config) checkDurable() error {
	d := c.Durable
	if d.Lease < time.Second {
		k := mustKey("durable.lease")
		return c.bad(k.Name, fmt.Sprintf("is %s, shorter than 1s: a client could not ack a message in time", d.Lease), k.fix("at least 1s", exampleFor(k)))
	}
	if d.IdleTTL < time.Second {
		k := mustKey("durable.idle_ttl")
		return c.bad(k.Name, fmt.Sprintf("is %s, shorter than 1s: a reconnect would find its queue gone", d.IdleTTL), k.fix("at least 1s", exampleFor(k)))
	}
	if d.MaxBytes < KiB {
		k := mustKey("durable.max_bytes")
		return c.bad(k.Name, fmt.Sprintf("is %s, less than 1KiB", d.MaxBytes), k.fix("at least 1KiB", exampleFor(k)))
	}
	return nil
}

// checkCluster checks the Redis URL's scheme, the key prefix and the advertised URL, and that a
// node among many can be reached by the others.
func (c *Config) checkCluster() error {
	r, cl := c.Redis, c.Cluster
	if r.URL != "" && !strings.HasPrefix(r.URL, "redis://") && !strings.HasPrefix(r.URL, "rediss://") {
		k := mustKey("redis.url")
		return c.bad(k.Name, "is not a redis:// or rediss:// URL", k.fix("a Redis URL", exampleFor(k)))
	}
	if strings.ContainsAny(r.Prefix, "{} ") || r.Prefix == "" {
		k := mustKey("redis.prefix")
		return c.bad(k.Name, fmt.Sprintf("is %q: a prefix must be non-empty and hold no brace (it would move the keys' hash tag) or space", r.Prefix), k.fix("letters, digits, - or _", "herald"))
	}
	if cl.NodeID != "" && !validNodeID(cl.NodeID) {
		k := mustKey("cluster.node_id")
		return c.bad(k.Name, fmt.Sprintf("is %q: a node id is 1 to %d letters, digits, - or _ (it starts every SSE session id, where a \".\" ends it, and goes in URLs and keys)", cl.NodeID, MaxNodeIDBytes), k.fix("letters, digits, - or _, or leave it empty for a random one", exampleFor(k)))
	}
	if cl.AdvertiseURL != "" {
		k := mustKey("cluster.advertise_url")
		u, err := url.Parse(cl.AdvertiseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return c.bad(k.Name, fmt.Sprintf("is %q, want an http or https URL with a host and no credentials", cl.AdvertiseURL), k.fix("http(s)://host:port", exampleFor(k)))
		}
	}
	return nil
}

// MaxNodeIDBytes is the longest cluster.node_id: it starts every SSE session id.
const MaxNodeIDBytes = 64

// validNodeID reports whether id may name a node: 1 to MaxNodeIDBytes ASCII letters, digits,
// "-" or "_". Nothing else, so that an SSE session id, "<node>.<random>", splits at its first
// "." and needs no escaping in the URL a command is posted to, and a hash tag holding the id
// is not cut short by a brace.
func validNodeID(id string) bool {
	if id == "" || len(id) > MaxNodeIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_':
		default:
			return false
		}
	}
	return true
}

// probeURL stands in for the database URL when one changefeed setting is checked on its own.
// sslmode is set so that parsing it reads no environment; nothing connects to it.
const probeURL = "postgres://herald@localhost:5432/herald?sslmode=verify-full"

func (c *Config) checkChangefeed() error {
	s := c.ChangefeedSection
	url := mustKey("changefeed.database_url")
	if s.DatabaseURL == "" {
		// A changefeed setting without a database is most often a database URL that was
		// meant to come from the environment and did not: the server would start, and no
		// client would ever see a change.
		def := Default()
		for _, k := range keys() {
			if strings.HasPrefix(k.Name, "changefeed.") && !reflect.DeepEqual(k.field(c).Interface(), k.field(def).Interface()) {
				return c.bad(k.Name, "is set, but changefeed.database_url is empty, so the changefeed is off and this has no effect",
					url.fix("the database to stream", exampleFor(url))+fmt.Sprintf(", or remove %s (and unset %s) to run without a changefeed", k.Name, k.Env))
			}
		}
		return nil
	}
	if k := mustKey("changefeed.read_linger"); s.ReadLinger < 0 || s.ReadLinger > changefeed.MaxReadLinger {
		return c.bad(k.Name, fmt.Sprintf("is %s, want 0s (no linger) to %s: a longer wait lets the server's socket buffer fill, and it stops sending", s.ReadLinger, changefeed.MaxReadLinger),
			k.fix("a duration of 0s to "+changefeed.MaxReadLinger.String(), changefeed.DefaultReadLinger.String()))
	}
	if s.SilenceTimeout <= s.StatusInterval {
		k := mustKey("changefeed.silence_timeout")
		return c.bad(k.Name, fmt.Sprintf("is %s, not longer than changefeed.status_interval (%s): the server would be taken for silent between two status updates", s.SilenceTimeout, s.StatusInterval),
			k.fix("at least 3 times changefeed.status_interval", (3*s.StatusInterval).String()))
	}
	// Each setting is checked alone against a stand-in URL, so that changefeed's own rules
	// decide, and the error still names the key to change.
	for _, probe := range []struct {
		key string
		set func(*changefeed.Config)
	}{
		{"changefeed.slot", func(p *changefeed.Config) { p.Slot = s.Slot }},
		{"changefeed.publication", func(p *changefeed.Config) { p.Publication = s.Publication }},
		{"changefeed.tables", func(p *changefeed.Config) { p.Tables = s.Tables }},
		{"changefeed.full_identity_tables", func(p *changefeed.Config) { p.FullIdentityTables = s.FullIdentityTables }},
		{"changefeed.tenant_column", func(p *changefeed.Config) { p.TenantColumn = s.TenantColumn }},
		{"changefeed.database_url", func(p *changefeed.Config) { p.DatabaseURL = s.DatabaseURL }},
	} {
		p := changefeed.Config{DatabaseURL: probeURL}
		probe.set(&p)
		if err := p.Validate(); err != nil {
			return c.changefeedError(probe.key, err)
		}
	}
	cf := c.Changefeed()
	if err := cf.Validate(); err != nil {
		return c.changefeedError("changefeed", err)
	}
	return nil
}

// checkHandoff refuses a snapshot setting without a changefeed (most often a database URL that
// did not come from the environment as meant), and a page the data lane could not take.
func (c *Config) checkHandoff() error {
	if c.ChangefeedSection.DatabaseURL == "" {
		url := mustKey("changefeed.database_url")
		def := Default()
		for _, k := range keys() {
			if strings.HasPrefix(k.Name, "handoff.") && !reflect.DeepEqual(k.field(c).Interface(), k.field(def).Interface()) {
				return c.bad(k.Name, "is set, but changefeed.database_url is empty, so no table is streamed and no snapshot read",
					url.fix("the database to stream", exampleFor(url))+fmt.Sprintf(", or remove %s (and unset %s)", k.Name, k.Env))
			}
		}
		return nil
	}
	h, l := c.Handoff, c.Limits
	// A page is one frame on the data lane, with its JSON's brackets and the frame's fields.
	if h.PageBytes > l.DataLaneBytes/2 {
		k := mustKey("handoff.page_bytes")
		return c.bad(k.Name, fmt.Sprintf("is %s, more than half of limits.data_lane_bytes (%s): a page could not be queued for a client", h.PageBytes, l.DataLaneBytes),
			k.fix("at most half of limits.data_lane_bytes", (l.DataLaneBytes/2).String()))
	}
	if h.MaxBytes < h.PageBytes {
		k := mustKey("handoff.max_bytes")
		return c.bad(k.Name, fmt.Sprintf("is %s, less than handoff.page_bytes (%s)", h.MaxBytes, h.PageBytes),
			k.fix("at least handoff.page_bytes", h.PageBytes.String()))
	}
	return nil
}

func (c *Config) changefeedError(key string, err error) *Error {
	var ce *changefeed.Error
	if !errors.As(err, &ce) {
		// changefeed's errors never hold the password; anything else is not trusted to.
		return &Error{Stage: stage, Key: key, Source: c.source(key), Detail: "is not valid", Err: err}
	}
	return c.carried(key, ce.Detail, ce.Fix, err)
}
