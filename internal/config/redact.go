package config

import (
	"regexp"
	"slices"
	"strings"
)

// redacted replaces a secret in a Redacted Config.
const redacted = "REDACTED"

// Redacted returns a copy of c that is safe to log and print: each auth.secrets and api.keys
// entry is replaced by "REDACTED" (so their number still shows), and so is the password of the
// database URL, whose host, user and options stay readable. A URL that cannot be parsed is
// replaced whole, since where its password ends cannot be known.
func (c *Config) Redacted() *Config {
	r := *c
	for _, k := range keys() {
		if !k.Secret {
			continue
		}
		v := k.field(&r)
		switch k.typ {
		case typList:
			items := slices.Clone(v.Interface().([]string))
			for i := range items {
				items[i] = redacted
			}
			k.setList(&r, items)
		case typString:
			if s := v.String(); s != "" {
				if k.url {
					v.SetString(redactURL(s))
				} else {
					v.SetString(redacted)
				}
			}
		}
	}
	// The other lists are cloned too, so the copy can be changed without changing c.
	for _, k := range keys() {
		if k.typ == typList && !k.Secret {
			k.setList(&r, slices.Clone(k.field(&r).Interface().([]string)))
		}
	}
	r.PolicySection = c.PolicySection.clone()
	return &r
}

// kvPassword finds the password (or sslpassword, the client key's passphrase) in a key=value
// connection string: password=secret, password = 'quoted \' secret'.
var kvPassword = regexp.MustCompile(`(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// queryPassword finds a password or sslpassword given as a URL parameter, which pgconn accepts.
var queryPassword = regexp.MustCompile(`([?&](?:ssl)?password=)[^&]*`)

// redactURL hides the password of a postgres:// URL or key=value connection string. It works
// on the text rather than through net/url: a password with an unescaped / or @ in it parses as
// part of the host or path, and would be shown. Everything between the first : of the user
// info and the last @ goes, which may hide more than the password and never less.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if ok && (scheme == "postgres" || scheme == "postgresql") {
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
				rest = user + ":" + redacted + rest[at:]
			}
		}
		return scheme + "://" + queryPassword.ReplaceAllString(rest, "${1}"+redacted)
	}
	if !strings.Contains(s, "=") {
		return redacted
	}
	return kvPassword.ReplaceAllString(s, "${1}"+redacted)
}
