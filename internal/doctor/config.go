package doctor

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/policy"
)

// checkConfig reads the config and reports config.keys, config.values and config.secrets. It
// returns nil when the config cannot be read: every other check depends on it.
func checkConfig(r *Report, cfg Config) (*config.Config, bool) {
	c, err := config.Read(cfg.Path, cfg.Env)
	if err != nil {
		r.failErr("config.keys", "", err, "correct the config file or the HERALD_* variables; docs/CONFIG.md lists every key")
		return nil, false
	}
	from := "the default config (no --config file)"
	if cfg.Path != "" {
		from = cfg.Path
	}
	r.ok("config.keys", "", "every key of "+from+" and every HERALD_* variable is known")

	var values, secrets []error
	for _, p := range c.Problems() {
		switch key := problemKey(p); {
		case key == "auth" || strings.HasPrefix(key, "auth.secrets") || strings.HasPrefix(key, "api.keys"):
			secrets = append(secrets, p)
		case strings.HasPrefix(key, "policy.") && key != "policy.max_cost", key == "":
			// A rule: checkPolicy compiles them all and reports each.
		default:
			values = append(values, p)
		}
	}
	if len(values) == 0 {
		r.ok("config.values", "", "every setting is valid")
	}
	for _, p := range values {
		r.failErr("config.values", problemKey(p), p, "docs/CONFIG.md")
	}
	if len(secrets) == 0 {
		r.ok("config.secrets", "", secretsDetail(c))
	}
	for _, p := range secrets {
		r.failErr("config.secrets", problemKey(p), p, "docs/CONFIG.md")
	}
	return c, true
}

// problemKey is the config key a Problems entry is about; "" for an error that is not a
// config *Error (only a rule's can be).
func problemKey(err error) string {
	var ce *config.Error
	if errors.As(err, &ce) {
		return ce.Key
	}
	return ""
}

func secretsDetail(c *config.Config) string {
	a, k := len(c.AuthSection.Secrets), len(c.API.Keys)
	if a == 0 && k == 0 {
		return "no shared secrets or API keys are set: tokens are verified with public keys, or not at all (auth.allow_anonymous)"
	}
	return fmt.Sprintf("%d auth.secrets of at least %d bytes and %d api.keys of at least %d bytes, none of them both",
		a, auth.MinSecretBytes, k, config.MinAPIKeyBytes)
}

// checkListen reports config.listen: a listener on an address other hosts can reach must have
// TLS in front of it, which public_url says (https or wss). Herald itself speaks plain HTTP, so
// without a TLS proxy the tokens and the data of every client cross the network in clear.
func checkListen(r *Report, c *config.Config) {
	host, _, _ := net.SplitHostPort(c.Listen)
	if loopback(host) {
		r.ok("config.listen", "", fmt.Sprintf("listen %s is loopback only: only this host can connect", c.Listen))
		return
	}
	where := "every interface"
	if host != "" {
		where = host
	}
	if u, err := url.Parse(c.PublicURL); err == nil && c.PublicURL != "" && (u.Scheme == "https" || u.Scheme == "wss") {
		r.ok("config.listen", "", fmt.Sprintf("listen %s binds %s, and public_url says clients come through TLS (%s://%s)", c.Listen, where, u.Scheme, u.Host))
		return
	}
	said := "public_url is empty"
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err == nil {
			said = fmt.Sprintf("public_url is %s://%s, not https or wss", u.Scheme, u.Host)
		}
	}
	r.warn("config.listen", "", fmt.Sprintf("listen %s binds %s, and %s: Herald serves plain HTTP, so without TLS in front, tokens and data cross the network in clear", c.Listen, where, said),
		"put a TLS-terminating proxy or load balancer in front and set public_url: https://realtime.example.com (HERALD_PUBLIC_URL); or listen: 127.0.0.1:8080 (HERALD_LISTEN) to accept this host only")
}

// loopback reports whether a listen host accepts connections from this host only: localhost
// or a loopback address. An empty host binds every interface.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkPolicy reports config.policy: every rule compiles, the channel rules in full and each
// table's rules against the columns its publication streams (shapes, read from Postgres; nil
// when Postgres was not read, and then only their syntax is checked).
func checkPolicy(r *Report, c *config.Config, shapes map[string]changefeed.TableShape) {
	rules := c.Policy()
	if len(rules.Tables) == 0 && len(rules.Channels) == 0 {
		r.warn("config.policy", "", "no policy rules: every table and channel is closed, so no client may subscribe or publish",
			"open what clients may use under policy.tables and policy.channels (docs/POLICY.md)")
		return
	}
	p, err := policy.New(rules, c.PolicyConfig())
	if err != nil {
		// New stops at the first rule that fails; the others are not known to compile.
		err = c.PolicyError(err)
		r.failErr("config.policy", ruleSubject(err), err, "correct the rule (docs/POLICY.md)")
		return
	}
	if n := len(rules.Channels); n > 0 {
		r.ok("config.policy", "policy.channels", fmt.Sprintf("the rules of %d channel %s compile", n, plural(n, "pattern", "patterns")))
	}
	for _, name := range p.Tables() {
		shape, read := shapes[name]
		switch {
		case !c.ChangefeedEnabled():
			r.ok("config.policy", name, "the rules parse; they are not compiled against the table's columns: changefeed.database_url is empty, so no table streams")
			continue
		case shapes == nil || !read:
			r.ok("config.policy", name, "the rules parse; they are not compiled against the table's columns, which Postgres did not report (see the postgres checks)")
			continue
		}
		if _, err := p.Table(name, policyTable(shape)); err != nil {
			r.failErr("config.policy", name, c.PolicyError(err), "correct the rule (docs/POLICY.md)")
			continue
		}
		r.ok("config.policy", name, fmt.Sprintf("the rules compile against the %d columns publication %q streams", len(shape.Columns), c.ChangefeedSection.Publication))
	}
}

// ruleSubject is the table, or policy.channels, that a compile error's rule belongs to.
func ruleSubject(err error) string {
	var rule string
	var pe *policy.CompileError
	if errors.As(err, &pe) {
		rule = pe.Rule
	} else if k := problemKey(err); k != "" {
		rule = k
	}
	if strings.HasPrefix(rule, "policy.channels") {
		return "policy.channels"
	}
	if rest, ok := strings.CutPrefix(rule, "policy.tables."); ok {
		if name, err := strconv.QuotedPrefix(rest); err == nil {
			if table, err := strconv.Unquote(name); err == nil {
				return table
			}
		}
	}
	return rule
}

func policyTable(shape changefeed.TableShape) policy.Table {
	t := policy.Table{Key: shape.Key, Identity: shape.Identity}
	for _, col := range shape.Columns {
		t.Columns = append(t.Columns, filter.Column{Name: col.Name, OID: col.OID})
	}
	return t
}
