package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/heraldrt/herald/internal/problem"
	"io"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/config"
)

// Status is a check's verdict. The same constant is the JSON value.
type Status string

// The statuses, from best to worst.
const (
	// OK: the fact holds.
	OK Status = "ok"
	// Warn: it holds, with a risk a person should decide on. A warning alone does not fail
	// `herald doctor`.
	Warn Status = "warn"
	// Fail: a node would not start, or would break what clients see, until it is fixed.
	Fail Status = "fail"
)

// Check is one fact's verdict. Its JSON form is one line of `herald doctor --json`, and its
// fields are part of the command's stable output (docs/OPERATIONS.md).
type Check struct {
	// ID names the fact, e.g. "postgres.wal_level". The set is closed and documented.
	ID string `json:"id"`
	// Subject is what the fact is about when one id is checked for several things: a table,
	// a config key, a Redis server. Empty otherwise.
	Subject string `json:"subject,omitempty"`
	Status  Status `json:"status"`
	// Detail says what was found. It never holds a secret.
	Detail string `json:"detail"`
	// Fix is the command, SQL statement or config key that resolves it; empty when ok.
	Fix string `json:"fix,omitempty"`
}

// IDs are the id of every check Run makes, in the order it makes them: a closed set, each
// documented in docs/OPERATIONS.md ("herald doctor").
var IDs = []string{
	"config.keys", "config.values", "config.secrets", "config.listen",
	"postgres.connect", "postgres.tls", "postgres.version", "postgres.wal_level", "postgres.role",
	"postgres.sync_standby",
	"postgres.replication_slots", "postgres.wal_senders", "postgres.publication", "postgres.table",
	"postgres.replica_identity", "postgres.slot", "postgres.slot_lag", "postgres.prepared_xacts", "postgres.session", "postgres.encoding",
	"config.policy",
	"redis.connect", "redis.version", "redis.cluster", "redis.maxmemory_policy", "redis.key_layout",
}

// Config configures Run. The zero value reads no config file and the process environment is
// not consulted: pass Env.
type Config struct {
	// Path is the config file, as for `herald serve --config`; "" for none.
	Path string
	// Env are the environment variables, in os.Environ's form.
	Env []string
	// Timeout bounds the checks of each service (Postgres, Redis). Default 10s.
	Timeout time.Duration
}

// DefaultTimeout bounds each service's checks when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Report is every check Run made, in the order it made them.
type Report struct {
	Checks []Check
}

// Failed reports whether any check failed: `herald doctor` then exits non-zero.
func (r *Report) Failed() bool { return r.Count(Fail) > 0 }

// Count returns how many checks have status s.
func (r *Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

// Find returns the checks with id (and, when subject is not "", that subject).
func (r *Report) Find(id, subject string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.ID == id && (subject == "" || c.Subject == subject) {
			out = append(out, c)
		}
	}
	return out
}

func (r *Report) add(c Check) { r.Checks = append(r.Checks, c) }

func (r *Report) ok(id, subject, detail string) {
	r.add(Check{ID: id, Subject: subject, Status: OK, Detail: detail})
}

func (r *Report) warn(id, subject, detail, fix string) {
	r.add(Check{ID: id, Subject: subject, Status: Warn, Detail: detail, Fix: fix})
}

func (r *Report) fail(id, subject, detail, fix string) {
	r.add(Check{ID: id, Subject: subject, Status: Fail, Detail: detail, Fix: fix})
}

// failErr records err as the failure of id. subject, when "", is the config key err names, if
// it names one; fix stands in when err carries none.
func (r *Report) failErr(id, subject string, err error, fix string) {
	subject, detail, f := explain(err, subject)
	if f == "" {
		f = fix
	}
	r.fail(id, subject, detail, f)
}

// explain splits an error a person meets into the subject it is about, what went wrong and
// its fix: a config error names its key as the subject; any other reads as its problem.Problem. Each keeps secrets out of its
// errors; an error of another type is shown whole, and only errors from those packages reach
// here. subject is the check's subject, if it has one already.
func explain(err error, subject string) (subj, detail, fix string) {
	var ce *config.Error
	if errors.As(err, &ce) {
		detail = ce.Detail
		if ce.Source != "" {
			detail = fmt.Sprintf("%s (%s)", ce.Detail, ce.Source)
		}
		switch {
		case subject == "":
			subject = ce.Key
		case ce.Key != "" && ce.Key != subject:
			detail = ce.Key + ": " + detail
		}
		return subject, detail, ce.Fix
	}
	// Every other owner's error explains itself in one shape (internal/problem).
	if p, ok := problem.Of(err); ok {
		return subject, p.Detail, p.Fix
	}
	return subject, err.Error(), ""
}

// Run checks the config at cfg.Path and cfg.Env, then the Postgres and the Redis it names,
// and returns what it found. It changes nothing. Each service's checks end by cfg.Timeout
// (or ctx); a check cut short fails with the deadline as its detail.
func Run(ctx context.Context, cfg Config) *Report {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	r := &Report{}
	c, ok := checkConfig(r, cfg)
	if !ok {
		return r
	}
	checkListen(r, c)
	var shapes map[string]changefeed.TableShape
	if c.ChangefeedEnabled() {
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		shapes = checkPostgres(pctx, r, c)
		cancel()
	}
	checkPolicy(r, c, shapes)
	if c.Redis.URL != "" {
		rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		checkRedis(rctx, r, c)
		cancel()
	}
	return r
}

// WriteJSON writes one JSON object per check, one per line, in the order they were made:
// {"id":...,"subject":...,"status":...,"detail":...,"fix":...} (subject and fix left out when
// empty).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, c := range r.Checks {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	return nil
}

// WriteText writes the checks for a person: one line each with its status, id, subject and
// detail, the fix on the line after, and a summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, c := range r.Checks {
		label := map[Status]string{OK: "ok", Warn: "WARN", Fail: "FAIL"}[c.Status]
		name := c.ID
		if c.Subject != "" {
			name += " " + c.Subject
		}
		fmt.Fprintf(&b, "%-4s  %s: %s\n", label, name, c.Detail)
		if c.Fix != "" && c.Status != OK {
			fmt.Fprintf(&b, "      fix: %s\n", c.Fix)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", r.Summary())
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary says how many checks passed, warned and failed.
func (r *Report) Summary() string {
	return fmt.Sprintf("%d ok, %d %s, %d failed", r.Count(OK), r.Count(Warn), plural(r.Count(Warn), "warning", "warnings"), r.Count(Fail))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// bytesText writes n bytes for a person: exact below a KiB, else to one decimal of the
// largest binary unit it reaches.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, u := float64(n)/unit, 0
	for v >= unit && u < 3 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", v, []string{"KiB", "MiB", "GiB", "TiB"}[u], n)
}
