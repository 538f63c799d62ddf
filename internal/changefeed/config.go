package changefeed

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/change"
)

// Config configures a Feed. The zero value of every optional field means its documented default.
type Config struct {
	// DatabaseURL is the postgres:// URL or key=value string of the database to stream. The role
	// needs the REPLICATION attribute, and to own the tables if Herald creates the publication.
	DatabaseURL string
	// Slot is the logical replication slot's name. Default "herald".
	Slot string
	// TemporarySlot makes a throwaway slot that Postgres drops when the connection ends. Its
	// position dies with it; for trying things out, never for a server.
	TemporarySlot bool
	// Publication is the publication's name. Default "herald".
	Publication string
	// Tables are the schema-qualified tables to stream ("public.items"; a bare name means
	// public). When the publication does not exist it is created for exactly these. When empty,
	// the publication must exist and every table it covers is streamed.
	Tables []string
	// FullIdentityTables must be REPLICA IDENTITY FULL, because something downstream needs their
	// complete old row on UPDATE and DELETE. Preflight refuses to start otherwise.
	FullIdentityTables []string
	// TenantColumn, when set, names the column whose value becomes each event's Tenant.
	TenantColumn string
	// WriteTagPrefix is the logical message prefix that tags a transaction:
	// pg_logical_emit_message(true, '<prefix>', '<tag>') inside it puts <tag> on every one of its
	// events. Default "herald.write".
	WriteTagPrefix string
	// MessagePrefixes are the logical message prefixes handed on as Message events. "*" means
	// every prefix. Default none.
	MessagePrefixes []string
	// From skips every transaction whose commit LSN is at or before it: the consumer has already
	// seen it. Zero means "from the slot's confirmed position".
	From change.LSN

	// StatusInterval is how often a standby status update goes out, well inside the server's
	// wal_sender_timeout (default 60s). Default 10s.
	StatusInterval time.Duration
	// SilenceTimeout abandons a connection from which nothing at all arrived for this long, even
	// though each status update asks the server for a reply. Default 3 × StatusInterval.
	SilenceTimeout time.Duration
	// MaxTxnBytes bounds the memory one transaction's decoded events may take while it is being
	// assembled. Past it the rows are let go and the transaction is handed on as an overflow: the
	// tables it touched and how many changes were lost, so every consumer is told its view went
	// stale instead of the process running out of memory. Default 256 MiB.
	MaxTxnBytes int
	// QueueTxns bounds the committed transactions waiting for the sink. Default 64. Their
	// memory is bounded too, by MaxTxnBytes together (one larger transaction alone is let in),
	// so the changefeed holds at most about twice MaxTxnBytes: what waits, and the transaction
	// being assembled.
	QueueTxns int
	// ReadLinger is how long a read of the replication connection waits before it reads again,
	// when the last read emptied the socket in the middle of a transaction: the server's next
	// messages gather meanwhile and arrive in one read instead of a wakeup every few changes.
	// It adds at most this much to a transaction's delivery, and only to one that was still
	// arriving. Linux only. Default DefaultReadLinger (100µs); negative turns it off.
	ReadLinger time.Duration
	// LeaderPoll is how often a standby tries for the leader lock. Default 1s.
	LeaderPoll time.Duration
	// BackoffMin and BackoffMax bound the jittered backoff between restarts. Defaults 250ms, 30s.
	BackoffMin, BackoffMax time.Duration

	// OnEnd is called once each time the stream dies on its own (never for a stop), with why.
	OnEnd func(err error)
	// OnStream is called each time a stream goes live, with the position it resumes after:
	// every transaction it hands on commits at or after it.
	OnStream func(start change.LSN)
	// Logger receives the feed's logs. Default slog.Default().
	Logger *slog.Logger
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// SlotName is the replication slot the feed streams from: Slot, or its default.
func (c *Config) SlotName() string { return c.withDefaults().Slot }

// PublicationName is the publication the feed streams: Publication, or its default.
func (c *Config) PublicationName() string { return c.withDefaults().Publication }

func (c *Config) withDefaults() Config {
	d := *c
	if d.Slot == "" {
		d.Slot = "herald"
	}
	if d.Publication == "" {
		d.Publication = "herald"
	}
	if d.WriteTagPrefix == "" {
		d.WriteTagPrefix = "herald.write"
	}
	if d.StatusInterval <= 0 {
		d.StatusInterval = 10 * time.Second
	}
	if d.SilenceTimeout <= 0 {
		d.SilenceTimeout = 3 * d.StatusInterval
	}
	if d.MaxTxnBytes <= 0 {
		d.MaxTxnBytes = 256 << 20
	}
	if d.QueueTxns <= 0 {
		d.QueueTxns = 64
	}
	if d.ReadLinger == 0 {
		d.ReadLinger = DefaultReadLinger
	}
	if d.LeaderPoll <= 0 {
		d.LeaderPoll = time.Second
	}
	if d.BackoffMin <= 0 {
		d.BackoffMin = 250 * time.Millisecond
	}
	if d.BackoffMax <= 0 {
		d.BackoffMax = 30 * time.Second
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Tables = normaliseTables(d.Tables)
	d.FullIdentityTables = normaliseTables(d.FullIdentityTables)
	return d
}

// Validate reports the first thing wrong with the configuration.
func (c *Config) Validate() error {
	d := c.withDefaults()
	bad := func(detail, fix string) error {
		return &Error{Stage: StageConfig, Detail: detail, Fix: fix, Permanent: true}
	}
	if d.DatabaseURL == "" {
		return bad("no database URL", "set changefeed.database_url (env HERALD_DATABASE_URL), e.g. postgres://herald@localhost:5432/app?sslmode=verify-full")
	}
	if !identRE.MatchString(d.Slot) || strings.ToLower(d.Slot) != d.Slot {
		return bad(fmt.Sprintf("slot name %q is not a valid replication slot name", d.Slot), "use lower-case letters, digits and underscores, at most 63 characters")
	}
	if !identRE.MatchString(d.Publication) {
		return bad(fmt.Sprintf("publication name %q is not a plain identifier", d.Publication), "use letters, digits and underscores, at most 63 characters")
	}
	for _, t := range append(append([]string{}, d.Tables...), d.FullIdentityTables...) {
		schema, name, _ := strings.Cut(t, ".")
		if !identRE.MatchString(schema) || !identRE.MatchString(name) {
			return bad(fmt.Sprintf("table %q is not schema.table of plain identifiers", t), "name tables as schema.table, e.g. public.items")
		}
	}
	if d.TenantColumn != "" && !identRE.MatchString(d.TenantColumn) {
		return bad(fmt.Sprintf("tenant column %q is not a plain identifier", d.TenantColumn), "name one column, e.g. org_id")
	}
	if d.SilenceTimeout <= d.StatusInterval {
		return bad("the silence timeout must be longer than the status interval", "raise changefeed.silence_timeout above changefeed.status_interval")
	}
	if d.ReadLinger > MaxReadLinger {
		return bad(fmt.Sprintf("the read linger %s is longer than %s", d.ReadLinger, MaxReadLinger),
			"set changefeed.read_linger to a few hundred microseconds at most, or 0s to turn it off (Config.ReadLinger: negative)")
	}
	if d.BackoffMax < d.BackoffMin {
		return bad("backoff max is below backoff min", "raise Config.BackoffMax above Config.BackoffMin")
	}
	if _, err := ConnConfig(d.DatabaseURL, true); err != nil {
		return err
	}
	return nil
}

// normaliseTables qualifies bare names with public and drops duplicates, keeping order.
func normaliseTables(in []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range in {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !strings.Contains(t, ".") {
			t = "public." + t
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}
