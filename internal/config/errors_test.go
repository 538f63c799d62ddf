package config

import (
	"strings"
	"testing"
)

// TestLoadErrors runs every way a file or the environment can be wrong. Each error must name
// the key (or variable) and where it came from, carry a fix, and quote no secret.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name       string
		file       string // "" for no file
		env        []string
		wantKey    string
		wantSource string   // a suffix of Source
		wantDetail string   // a substring of Detail
		wantFix    []string // substrings of Fix
	}{
		// Unknown and misplaced keys.
		{name: "unknown top-level key", file: "listen: :80\nlistne: :81\n", wantKey: "listne", wantSource: "herald.yaml:2",
			wantDetail: "unknown key", wantFix: []string{"did you mean listen?"}},
		{name: "unknown nested key", file: "limits:\n  max_conections: 5\n", wantKey: "limits.max_conections", wantSource: "herald.yaml:2",
			wantDetail: "unknown key", wantFix: []string{"did you mean max_connections?", "The keys of limits are"}},
		{name: "wrong case", file: "Listen: :80\n", wantKey: "Listen", wantSource: "herald.yaml:1", wantFix: []string{"did you mean listen?"}},
		{name: "key in the wrong section", file: "max_connections: 5\n", wantKey: "max_connections", wantSource: "herald.yaml:1",
			wantFix: []string{"did you mean limits.max_connections?", "under limits:"}},
		{name: "top-level key in a section", file: "auth:\n  listen: :80\n", wantKey: "auth.listen",
			wantFix: []string{"did you mean listen?", "at the top level"}},
		{name: "unknown section", file: "limit:\n  max_connections: 5\n", wantKey: "limit", wantSource: "herald.yaml:1",
			wantFix: []string{"did you mean limits?"}},
		{name: "far from any key", file: "zzzzzzzzzzzz: 1\n", wantKey: "zzzzzzzzzzzz", wantFix: []string{"remove it", "The top-level keys are listen, admin_listen, public_url, log_level, log_format, shutdown_timeout, auth, api, channels, presence, limits, changefeed"}},
		{name: "swapped letters", file: "changefeed:\n  slto: x\n", wantKey: "changefeed.slto", wantSource: "herald.yaml:2", wantFix: []string{"did you mean slot?"}},
		{name: "singular secret", file: "auth:\n  secret: " + testSecret + "\n", wantKey: "auth.secret", wantFix: []string{"did you mean secrets?"}},
		{name: "long unknown key", file: strings.Repeat("k", 500) + ": 1\n", wantKey: strings.Repeat("k", 64) + "…", wantFix: []string{"remove it"}},
		{name: "long unknown variable", env: []string{"HERALD_" + strings.Repeat("K", 5000) + "=1"}, wantKey: "HERALD_" + strings.Repeat("K", 57) + "…"},
		{name: "dotted key", file: "limits.max_connections: 5\n", wantKey: "limits.max_connections", wantSource: "herald.yaml:1",
			wantDetail: "dotted", wantFix: []string{"nest it", "HERALD_LIMITS_MAX_CONNECTIONS"}},
		{name: "duplicate key", file: "limits:\n  max_connections: 5\n  max_connections: 6\n", wantKey: "limits.max_connections",
			wantSource: "herald.yaml:3", wantDetail: "set twice, here and on line 2"},
		{name: "duplicate section", file: "auth:\n  allow_anonymous: true\nauth:\n  leeway: 1s\n", wantKey: "auth", wantSource: "herald.yaml:3"},

		// Shapes.
		{name: "file is a list", file: "- listen\n", wantSource: "herald.yaml:1", wantDetail: "the file is a list, want a mapping"},
		{name: "section is a value", file: "limits: 5\n", wantKey: "limits", wantDetail: "limits is a single value", wantFix: []string{"indented under limits:"}},
		{name: "value is a list", file: "listen: [a]\n", wantKey: "listen", wantDetail: "is a list, want a single value",
			wantFix: []string{"HERALD_LISTEN=127.0.0.1:8080"}},
		{name: "list is a value", file: "changefeed:\n  tables: public.items\n", wantKey: "changefeed.tables", wantSource: "herald.yaml:2",
			wantDetail: "want a list", wantFix: []string{"tables: [public.items, public.orders]"}},
		{name: "secret list is a value", file: "auth:\n  secrets: " + testSecret + "\n", wantKey: "auth.secrets", wantDetail: "want a list"},
		{name: "list entry is a mapping", file: "auth:\n  secrets:\n    - a: " + testSecret + "\n", wantKey: "auth.secrets[0]", wantDetail: "is a mapping, want a string"},
		{name: "list entry is null", file: "api:\n  keys: [~]\n", wantKey: "api.keys[0]", wantDetail: "is a null"},
		{name: "second document", file: "listen: :80\n---\nlisten: :81\n", wantSource: "herald.yaml:2", wantDetail: "second YAML document"},
		{name: "bad YAML", file: "listen: :80\n  bad: indent\n", wantSource: "herald.yaml:2", wantDetail: "not valid YAML"},
		{name: "bad YAML in a secret", file: "auth:\n  secrets: [\"" + testSecret + "\n", wantDetail: "not valid YAML"},
		{name: "tab indentation", file: "auth:\n\tsecrets: []\n", wantDetail: "not valid YAML"},

		// Values.
		{name: "not a number", file: "limits:\n  max_connections: lots\n", wantKey: "limits.max_connections", wantSource: "herald.yaml:2",
			wantDetail: `"lots" is not a whole number`, wantFix: []string{"limits: {max_connections: 10000}", "HERALD_LIMITS_MAX_CONNECTIONS=10000"}},
		{name: "float", file: "limits:\n  max_subscriptions: 1.5\n", wantKey: "limits.max_subscriptions", wantDetail: "not a whole number"},
		{name: "decimal size unit", file: "limits:\n  data_lane_bytes: 4MB\n", wantKey: "limits.data_lane_bytes", wantDetail: "write MiB"},
		{name: "size is not a size", file: "limits:\n  data_lane_bytes: big\n", wantKey: "limits.data_lane_bytes", wantDetail: "not a size"},
		{name: "duration without a unit", file: "limits:\n  ping_interval: 25\n", wantKey: "limits.ping_interval", wantDetail: "has no unit: write a Go duration such as 25s"},
		{name: "not a duration", file: "shutdown_timeout: soon\n", wantKey: "shutdown_timeout", wantDetail: "not a duration", wantFix: []string{"HERALD_SHUTDOWN_TIMEOUT=10s"}},
		{name: "not a bool", file: "auth:\n  allow_anonymous: yes\n", wantKey: "auth.allow_anonymous", wantDetail: "want true or false",
			wantFix: []string{"auth: {allow_anonymous: true}", "HERALD_AUTH_ALLOW_ANONYMOUS=true"}},
		{name: "bad env int", env: []string{anonymousEnv, "HERALD_LIMITS_MAX_CONNECTIONS=ten"}, wantKey: "limits.max_connections",
			wantSource: "env HERALD_LIMITS_MAX_CONNECTIONS", wantDetail: "not a whole number"},
		{name: "bad env bool", env: []string{"HERALD_AUTH_ALLOW_ANONYMOUS=yes"}, wantKey: "auth.allow_anonymous", wantSource: "env HERALD_AUTH_ALLOW_ANONYMOUS"},
		{name: "huge size", env: []string{anonymousEnv, "HERALD_LIMITS_DATA_LANE_BYTES=99999999999TiB"}, wantKey: "limits.data_lane_bytes", wantDetail: "too large"},

		// Unknown variables.
		{name: "unknown variable", env: []string{anonymousEnv, "HERALD_LIMIT_MAX_CONNECTIONS=5"}, wantKey: "HERALD_LIMIT_MAX_CONNECTIONS",
			wantSource: "env HERALD_LIMIT_MAX_CONNECTIONS", wantDetail: "unknown environment variable", wantFix: []string{"did you mean HERALD_LIMITS_MAX_CONNECTIONS?"}},
		{name: "singular secret variable", env: []string{"HERALD_AUTH_SECRET=" + testSecret}, wantKey: "HERALD_AUTH_SECRET",
			wantFix: []string{"did you mean HERALD_AUTH_SECRETS?"}},
		{name: "unknown empty variable", env: []string{anonymousEnv, "HERALD_LISTN="}, wantKey: "HERALD_LISTN", wantFix: []string{"did you mean HERALD_LISTEN?"}},
		{name: "several unknown variables", env: []string{"HERALD_ZZZZZZZZZZ=1", "HERALD_AAAAAAAAAA=2"}, wantKey: "HERALD_AAAAAAAAAA",
			wantDetail: "also unknown: HERALD_ZZZZZZZZZZ", wantFix: []string{"unset HERALD_AAAAAAAAAA"}},
		{name: "test-like prefix is not exempt", env: []string{anonymousEnv, "HERALD_TESTING=1"}, wantKey: "HERALD_TESTING"},

		// Validation, reached through Load so the source is known.
		{name: "invalid value from the file", file: "auth:\n  allow_anonymous: true\nlimits:\n  max_connections: 0\n",
			wantKey: "limits.max_connections", wantSource: "herald.yaml:4", wantDetail: "is 0, want more than zero"},
		{name: "invalid value from env over the file", file: "auth:\n  allow_anonymous: true\n", env: []string{"HERALD_LOG_LEVEL=verbose"},
			wantKey: "log_level", wantSource: "env HERALD_LOG_LEVEL", wantDetail: `is "verbose"`},
		{name: "short secret from the file", file: "auth:\n  secrets: [short-" + testDBPass + "]\n", wantKey: "auth.secrets[0]",
			wantSource: "herald.yaml:2", wantDetail: "is 20 bytes", wantFix: []string{"openssl rand", "HERALD_AUTH_SECRETS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeConfig(t, tt.file)
			}
			c, err := Load(path, tt.env)
			if c != nil {
				t.Errorf("Load returned a Config with its error")
			}
			e := asError(t, err)
			if e.Key != tt.wantKey {
				t.Errorf("Key = %q, want %q", e.Key, tt.wantKey)
			}
			if !strings.HasSuffix(e.Source, tt.wantSource) {
				t.Errorf("Source = %q, want …%q", e.Source, tt.wantSource)
			}
			if !strings.Contains(e.Detail, tt.wantDetail) {
				t.Errorf("Detail = %q, want it to contain %q", e.Detail, tt.wantDetail)
			}
			if e.Fix == "" {
				t.Errorf("Fix is empty")
			}
			for _, want := range tt.wantFix {
				if !strings.Contains(e.Fix, want) {
					t.Errorf("Fix = %q, want it to contain %q", e.Fix, want)
				}
			}
			msg := e.Error()
			if e.Key != "" && !strings.Contains(msg, e.Key) {
				t.Errorf("Error() = %q does not name the key %q", msg, e.Key)
			}
			checkNoSecrets(t, "error", msg)
		})
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"full", &Error{Stage: "config", Key: "limits.max_connections", Source: "herald.yaml:4", Detail: "is 0", Fix: "set it"},
			"config: limits.max_connections (herald.yaml:4): is 0 (fix: set it)"},
		{"no key", &Error{Stage: "config", Source: "herald.yaml:2", Detail: "not valid YAML"}, "config (herald.yaml:2): not valid YAML"},
		{"no source", &Error{Stage: "config", Key: "auth", Detail: "nothing", Fix: "add"}, "config: auth: nothing (fix: add)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	cands := []string{"listen", "public_url", "log_level", "log_format"}
	tests := []struct{ got, want string }{
		{"listen", "listen"},
		{"LISTEN", "listen"},
		{"lisen", "listen"},
		{"log_levle", "log_level"},
		{"logformat", "log_format"},
		{"port", ""},
		{"", ""},
		{"x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.got, func(t *testing.T) {
			if got := suggest(tt.got, cands); got != tt.want {
				t.Errorf("suggest(%q) = %q, want %q", tt.got, got, tt.want)
			}
		})
	}
}
