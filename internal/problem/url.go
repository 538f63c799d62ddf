package problem

import (
	"net/url"
	"strings"
)

// MalformedEscape names the part of the URL s, scheme://user:password@host/path?query, that
// holds a malformed percent-escape ("user", "password" or "path"), or "" when none does: a
// password like 50%off pasted unencoded. The standard library's own error quotes the escape
// and the characters after it, or the whole URL, so an error about a URL with a secret in it
// names the part instead.
func MalformedEscape(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return ""
	}
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, password, _ := strings.Cut(rest[:at], ":")
		if bad(user) {
			return "user"
		}
		if bad(password) {
			return "password"
		}
		rest = rest[at+1:]
	}
	if slash := strings.IndexByte(rest, '/'); slash >= 0 && bad(rest[slash+1:]) {
		return "path"
	}
	return ""
}

func bad(raw string) bool {
	_, err := url.PathUnescape(raw)
	return err != nil
}
