package config

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	seenEnv := map[string]string{}
	for _, k := range Keys() {
		if want := "HERALD_" + strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_")); k.Env != want {
			t.Errorf("%s: Env = %q, want %q", k.Name, k.Env, want)
		}
		if other, dup := seenEnv[k.Env]; dup {
			t.Errorf("%s and %s share the variable %s", k.Name, other, k.Env)
		}
		seenEnv[k.Env] = k.Name
		if exempt(k.Env) || k.Env == aliasDatabaseURL {
			t.Errorf("%s's variable %s is exempt or an alias, so it could never be set", k.Name, k.Env)
		}
		// Every fix gives an example, and the example is valid.
		ex := exampleFor(k)
		if ex == "" {
			t.Errorf("%s has neither a default nor an example; add it to examples", k.Name)
			continue
		}
		if strings.HasPrefix(ex, "<") {
			continue // a description of a secret, not a value
		}
		c := Default()
		if err := k.set(c, ex, true); err != nil {
			t.Errorf("%s: example %q does not parse: %v", k.Name, ex, err)
		}
	}
	for name := range examples {
		if _, ok := keyNamed(name); !ok {
			t.Errorf("examples has %s, which is not a key", name)
		}
	}
	secrets := map[string]bool{}
	for _, k := range Keys() {
		if k.Secret {
			secrets[k.Name] = true
		}
	}
	for _, want := range []string{"auth.secrets", "api.keys", "changefeed.database_url", "redis.url"} {
		if !secrets[want] {
			t.Errorf("%s is not marked secret", want)
		}
	}
	if len(secrets) != 4 {
		t.Errorf("secret keys = %v, want exactly auth.secrets, api.keys, changefeed.database_url and redis.url", secrets)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "65536", want: 64 * KiB},
		{in: "1B", want: 1},
		{in: "256KiB", want: 256 * KiB},
		{in: "4MiB", want: 4 * MiB},
		{in: "4 MiB", want: 4 * MiB},
		{in: " 4mib ", want: 4 * MiB},
		{in: "1GiB", want: GiB},
		{in: "2TiB", want: 2 * TiB},
		{in: "4MB", wantErr: "write MiB"},
		{in: "4M", wantErr: "write MiB"},
		{in: "64K", wantErr: "write KiB"},
		{in: "1GB", wantErr: "write GiB"},
		{in: "4XiB", wantErr: "unknown unit"},
		{in: "1.5MiB", wantErr: "unknown unit"},
		{in: "-1", wantErr: "not a size"},
		{in: "", wantErr: "not a size"},
		{in: "MiB", wantErr: "not a size"},
		{in: "99999999999999999999", wantErr: "too large"},
		{in: "8388608TiB", wantErr: "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("ParseSize(%q) = %d, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0"}, {1, "1"}, {1023, "1023"}, {KiB, "1KiB"}, {64 * KiB, "64KiB"}, {64*KiB + 1, "65537"},
		{1536 * KiB, "1536KiB"}, {4 * MiB, "4MiB"}, {256 * MiB, "256MiB"}, {GiB, "1GiB"}, {3 * TiB, "3TiB"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("Size(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
			}
			back, err := ParseSize(tt.want)
			if err != nil || back != tt.in {
				t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.want, back, err, int64(tt.in))
			}
		})
	}
}
