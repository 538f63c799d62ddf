package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load as a config file. Load must not panic, and must return
// either a Config that passes Validate or an *Error; an error must quote no secret that the
// file set.
func FuzzLoad(f *testing.F) {
	seeds := []string{
		"",
		"~",
		"listen: :80\n",
		"auth:\n  allow_anonymous: true\n",
		fullFile,
		"auth:\n  secrets: [short]\n",
		"auth: &a\n  allow_anonymous: true\nlimits: *a\n",
		"a: &x [*x]\n",
		"limits:\n  max_connections: 1\n  max_connections: 2\n",
		"listen: :80\n---\nlisten: :81\n",
		"changefeed:\n  database_url: postgres://u:p%zz@h/db\n",
		"changefeed:\n  tables: [x]\n",
		"auth: {allow_anonymous: true}\nlimits: {data_lane_bytes: 1KiB}\n",
		"limits.max_connections: 3\n",
		"? [a]\n: b\n",
		"auth:\n  allow_anonymous: true\n  leeway: -1s\n",
		"auth: {allow_anonymous: true}\npolicy:\n  tables:\n    public.items: {row: \"row.a ==\"}\n",
		"auth: {allow_anonymous: true}\npolicy:\n  channels:\n    \"a/*\": {subscribe: \"auth.x.exists(y, y == channel)\"}\n",
		"policy:\n  tables:\n    x: {columns: [a, ~]}\n",
	}
	for _, path := range []string{exampleFile} {
		if b, err := os.ReadFile(path); err == nil {
			seeds = append(seeds, string(b))
		}
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "herald.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path, nil)
		if err != nil {
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("Load returned %T %v, want *Error", err, err)
			}
			if c != nil {
				t.Fatalf("Load returned a Config with its error")
			}
			if e.Stage != "config" || e.Detail == "" {
				t.Fatalf("incomplete error: %#v", e)
			}
			_ = e.Error()
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load returned a Config that fails Validate: %v", err)
		}
		// What Load accepts, a printed Redacted copy never shows a secret of.
		r := c.Redacted()
		for _, k := range Keys() {
			if !k.Secret || k.url {
				continue
			}
			for _, s := range k.field(c).Interface().([]string) {
				if len(s) >= 8 && strings.Contains(k.Format(r), s) {
					t.Fatalf("Redacted %s shows a secret", k.Name)
				}
			}
		}
	})
}
