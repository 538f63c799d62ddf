package doctor

import (
	"slices"
	"strings"
	"testing"
)

// TestConfigTypo: a key or variable Herald does not know fails config.keys with the nearest
// key as the fix, and nothing else is checked: the settings the other checks need are unknown.
func TestConfigTypo(t *testing.T) {
	tests := []struct {
		name, body string
		env        []string
		subject    string
		fix        []string
	}{
		{name: "in a section", body: open + "changefeed:\n  slto: herald_x\n", subject: "changefeed.slto", fix: []string{"did you mean slot?"}},
		{name: "at the top", body: open + "listn: 127.0.0.1:8080\n", subject: "listn", fix: []string{"did you mean listen?"}},
		{name: "in the wrong section", body: open + "redis:\n  slot: x\n", subject: "redis.slot", fix: []string{"did you mean changefeed.slot?"}},
		{name: "a variable", body: open, env: []string{"HERALD_CHANGEFEED_SLTO=x"}, subject: "HERALD_CHANGEFEED_SLTO", fix: []string{"did you mean HERALD_CHANGEFEED_SLOT?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.body, tt.env)
			want(t, r, "config.keys", tt.subject, Fail, tt.fix...)
			if len(r.Checks) != 1 || !r.Failed() {
				t.Errorf("%d checks, failed %v; want config.keys alone, failed", len(r.Checks), r.Failed())
			}
		})
	}
}

func TestConfigChecks(t *testing.T) {
	const secret = "short-secret-Zk3"
	t.Run("all well", func(t *testing.T) {
		r := run(t, open, nil)
		for _, id := range []string{"config.keys", "config.values", "config.secrets", "config.listen", "config.policy"} {
			if got := r.Find(id, ""); len(got) == 0 || got[0].Status != OK {
				t.Errorf("%s = %+v, want ok", id, got)
			}
		}
		if r.Failed() || r.Count(Warn) > 0 {
			t.Errorf("warnings or failures in a config without any:\n%s", text(r))
		}
		none(t, r, "postgres.connect")
		none(t, r, "redis.connect")
	})
	t.Run("a short secret", func(t *testing.T) {
		r := run(t, "auth:\n  secrets: ["+secret+"]\napi:\n  keys: [short-api-key]\n", nil, secret, "short-api-key")
		want(t, r, "config.secrets", "auth.secrets[0]", Fail, "openssl rand", "HERALD_AUTH_SECRETS")
		want(t, r, "config.secrets", "api.keys[0]", Fail, "openssl rand", "HERALD_API_KEYS")
	})
	t.Run("no way to verify tokens", func(t *testing.T) {
		r := run(t, "listen: 127.0.0.1:8080\n", nil)
		want(t, r, "config.secrets", "auth", Fail, "HERALD_AUTH_SECRETS", "allow_anonymous")
	})
	t.Run("every section's problem", func(t *testing.T) {
		r := run(t, open+"log_level: trace\nlimits:\n  max_connections: 0\n", nil)
		want(t, r, "config.values", "limits.max_connections", Fail, "HERALD_LIMITS_MAX_CONNECTIONS")
		want(t, r, "config.values", "log_level", Fail, "HERALD_LOG_LEVEL")
	})
	t.Run("a public listener without TLS", func(t *testing.T) {
		for _, body := range []string{open + "listen: :8080\n", open + "listen: 10.0.0.5:8080\npublic_url: http://rt.example.com\n"} {
			r := run(t, body, nil)
			want(t, r, "config.listen", "", Warn, "public_url: https://", "listen: 127.0.0.1:8080")
			if r.Failed() {
				t.Errorf("a warning failed the report:\n%s", text(r))
			}
		}
	})
	t.Run("a public listener behind TLS", func(t *testing.T) {
		for _, u := range []string{"https://rt.example.com", "wss://rt.example.com/v1/ws"} {
			r := run(t, open+"listen: :8080\npublic_url: "+u+"\n", nil)
			want(t, r, "config.listen", "", OK)
		}
	})
	t.Run("loopback", func(t *testing.T) {
		for _, l := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"} {
			want(t, run(t, open+"listen: \""+l+"\"\n", nil), "config.listen", "", OK)
		}
	})
	t.Run("no policy", func(t *testing.T) {
		r := run(t, "auth: {allow_anonymous: true}\n", nil)
		want(t, r, "config.policy", "", Warn, "policy.tables", "policy.channels")
	})
	t.Run("a channel rule that does not compile", func(t *testing.T) {
		r := run(t, "auth: {allow_anonymous: true}\npolicy:\n  channels:\n    \"rooms/*\": {publish: \"auth.sub ==\"}\n", nil)
		c := want(t, r, "config.policy", "policy.channels", Fail)
		if !strings.Contains(c.Detail, `policy.channels."rooms/*".publish`) || !strings.Contains(c.Detail, "herald.yaml:4") {
			t.Errorf("detail %q does not name the rule and where it is", c.Detail)
		}
		want(t, r, "config.values", "", OK) // the rule is reported once, as config.policy
	})
	t.Run("table rules without a database", func(t *testing.T) {
		r := run(t, open+"  tables:\n    public.items: {row: \"true\"}\n", nil)
		c := want(t, r, "config.policy", "public.items", OK)
		if !strings.Contains(c.Detail, "changefeed.database_url is empty") {
			t.Errorf("detail %q does not say why the rules were not compiled against columns", c.Detail)
		}
	})
}

// TestJSONIsOneObjectPerCheck: --json writes each check as one line, with the documented
// fields and no others.
func TestJSONIsOneObjectPerCheck(t *testing.T) {
	r := run(t, open+"listen: :8080\n", nil)
	lines := jsonLines(t, r)
	if len(lines) != len(r.Checks) {
		t.Fatalf("%d JSON lines for %d checks", len(lines), len(r.Checks))
	}
	for i, m := range lines {
		for k := range m {
			if !slices.Contains([]string{"id", "subject", "status", "detail", "fix"}, k) {
				t.Errorf("line %d has the field %q", i, k)
			}
		}
		if m["id"] != r.Checks[i].ID || m["status"] != string(r.Checks[i].Status) || m["detail"] != r.Checks[i].Detail {
			t.Errorf("line %d = %v, want check %+v", i, m, r.Checks[i])
		}
	}
	var listen map[string]any
	for _, m := range lines {
		if m["id"] == "config.listen" {
			listen = m
		}
	}
	if listen["status"] != "warn" || listen["fix"] == nil {
		t.Errorf("config.listen line = %v, want status warn with a fix", listen)
	}
}

func TestBytesText(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1.0 KiB (1024 bytes)", 3 << 30: "3.0 GiB (3221225472 bytes)"} {
		if got := bytesText(n); got != want {
			t.Errorf("bytesText(%d) = %q, want %q", n, got, want)
		}
	}
}
