package changefeed

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldrt/herald/internal/problem"
)

// pinnedSettings are sent in the startup packet of every connection Herald makes. The walsender
// formats each value with its own session settings, which postgresql.conf, ALTER ROLE or ALTER
// DATABASE may have set to anything; the value decoder reads exactly one format.
//
// client_encoding is among them: pgoutput converts every value and name it sends from the
// database's encoding to the session's client_encoding, which defaults to the database's own.
// Unpinned, a LATIN1 database sends é as a byte that is not UTF-8, and a role set to LATIN1
// makes a UTF8 database's € fail the conversion, stopping the stream at that change for good.
// Every encoding converts to UTF8.
var pinnedSettings = map[string]string{
	"client_encoding":    "UTF8",
	"timezone":           "UTC",
	"datestyle":          "ISO",
	"intervalstyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "3",
}

// ConnConfig parses a database URL (postgres://...) or key=value string into a pgconn config
// with Herald's pinned session settings. replication asks for a logical replication
// (replication=database) connection.
//
// Two refusals protect the credential:
//   - A malformed percent-escape in the user, password or database is refused by the part's
//     name, never its value.
//   - Under sslmode prefer, allow or unset, a cleartext or md5 password request is refused.
//     Those modes do not even promise encryption: a stripped TLS upgrade falls back to cleartext
//     without a word, so they protect against neither a passive listener nor an attacker on
//     the path. sslmode=require (encrypted), verify-ca and verify-full (encrypted to a checked
//     server), and disable (the operator saying cleartext, knowingly) answer them.
func ConnConfig(connString string, replication bool) (*pgconn.Config, error) {
	if err := checkURLEscapes(connString); err != nil {
		return nil, err
	}
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, &Error{
			Stage:     StageConfig,
			Detail:    "the database URL could not be parsed: " + safeNetError(err),
			Fix:       "write it as postgres://user:password@host:5432/dbname?sslmode=verify-full, percent-encoding special characters",
			Permanent: true,
		}
	}
	if weakSSLMode(sslModeOf(connString)) {
		switch {
		case cfg.RequireAuth == "":
			cfg.RequireAuth = "!password,!md5"
		case allowsWeakAuth(cfg.RequireAuth):
			return nil, &Error{
				Stage:     StageConfig,
				Detail:    "require_auth allows a cleartext or md5 password while sslmode does not promise encryption",
				Fix:       "set sslmode=verify-full (or require) in the database URL, or drop password and md5 from require_auth",
				Permanent: true,
			}
		}
	}
	for k, v := range pinnedSettings {
		cfg.RuntimeParams[k] = v
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "herald"
	}
	if replication {
		cfg.RuntimeParams["replication"] = "database"
	} else {
		delete(cfg.RuntimeParams, "replication")
	}
	return cfg, nil
}

// refusedAuth recognises a connection that failed because the server asked for an
// authentication method the connection may not answer (require_auth, which ConnConfig sets
// under a weak sslmode), and returns the permanent error it is, or nil. Retrying cannot help:
// the server asks the same every time, until a person chooses how the password may travel.
func refusedAuth(err error, connString string) *Error {
	// pgconn reports it only as text: "require_auth check failed: authentication method
	// requirement \"!password,!md5\" failed: server requested md5 authentication".
	msg := err.Error()
	if !strings.Contains(msg, "require_auth check failed") {
		return nil
	}
	method := "an authentication method require_auth does not allow"
	if _, rest, ok := strings.Cut(msg, "server requested "); ok {
		if m, _, ok := strings.Cut(rest, " authentication"); ok {
			method = m
		}
	}
	if !weakSSLMode(sslModeOf(connString)) {
		return &Error{Stage: StageConnect, Permanent: true, Err: err,
			Detail: "the server asked for " + method + " authentication, which require_auth in the database URL does not allow",
			Fix:    "allow that method in require_auth, or configure the role and pg_hba.conf for one it allows"}
	}
	switch method {
	case "password":
		method = "a cleartext password"
	case "md5":
		method = "an md5 password"
	}
	return &Error{Stage: StageConnect, Permanent: true, Err: err,
		Detail: "the server asked for " + method + ", and Herald does not send one under sslmode prefer, allow or unset: those modes do not promise encryption, so anyone on the path could take it",
		Fix: "choose how the password travels: sslmode=verify-full (or sslmode=require) in the database URL to encrypt it; " +
			"sslmode=disable to send it unencrypted, knowingly, on a trusted network; " +
			"or SCRAM, which never sends it: SET password_encryption = 'scram-sha-256'; ALTER ROLE <role> PASSWORD '<password>'; and scram-sha-256 instead of md5 or password in pg_hba.conf"}
}

func weakSSLMode(mode string) bool {
	return mode == "" || mode == "prefer" || mode == "allow"
}

func allowsWeakAuth(requireAuth string) bool {
	negated := strings.HasPrefix(strings.TrimSpace(requireAuth), "!")
	methods := map[string]bool{}
	for _, m := range strings.Split(requireAuth, ",") {
		methods[strings.TrimPrefix(strings.TrimSpace(m), "!")] = true
	}
	if negated {
		return !methods["password"] || !methods["md5"]
	}
	return methods["password"] || methods["md5"]
}

// sslModeOf finds the sslmode the operator wrote, or "" when they wrote none: pgconn fills in
// prefer, which would hide the difference between choosing prefer and choosing nothing.
func sslModeOf(connString string) string {
	if isURL(connString) {
		if u, err := url.Parse(connString); err == nil {
			if m := u.Query().Get("sslmode"); m != "" {
				return m
			}
		}
	} else {
		for _, field := range strings.Fields(connString) {
			if k, v, ok := strings.Cut(field, "="); ok && strings.TrimSpace(k) == "sslmode" {
				return strings.Trim(v, `'`)
			}
		}
	}
	return os.Getenv("PGSSLMODE")
}

func isURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// checkURLEscapes refuses a URL whose user, password or database holds a malformed
// percent-escape (a password like 50%off pasted unencoded), naming the part and never its
// value. The standard library's own error would quote the whole URL, password included.
func checkURLEscapes(s string) error {
	if !isURL(s) {
		return nil
	}
	part := problem.MalformedEscape(s)
	if part == "" {
		return nil
	}
	if part == "path" {
		part = "database"
	}
	return &Error{
		Stage:     StageConfig,
		Detail:    fmt.Sprintf("the database URL has a malformed percent-escape in its %s", part),
		Fix:       fmt.Sprintf("percent-encode the %s (a %% becomes %%25, @ becomes %%40, : becomes %%3A), e.g. with: python3 -c 'import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1], safe=\"\"))' '<the raw value>'", part),
		Permanent: true,
	}
}
