package changefeed

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestConnConfigRefusesMalformedEscapesByPartName(t *testing.T) {
	tests := []struct {
		name, url, part, secret string
	}{
		{"password", "postgres://app:50%off@localhost/db", "password", "50%off"},
		{"user", "postgres://al%zzice:pw@localhost/db", "user", "al%zzice"},
		{"database", "postgres://app@localhost/sa%les", "database", "sa%les"},
		{"password with @", "postgres://app:p@ss%@localhost/db", "password", "p@ss%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ConnConfig(tt.url, true)
			var fe *Error
			if !errors.As(err, &fe) || fe.Stage != StageConfig || !fe.Permanent {
				t.Fatalf("ConnConfig = %v, want a permanent config error", err)
			}
			if !strings.Contains(fe.Detail, "in its "+tt.part) {
				t.Errorf("detail %q does not name the %s", fe.Detail, tt.part)
			}
			if strings.Contains(err.Error(), tt.secret) {
				t.Errorf("error %q shows the value %q", err, tt.secret)
			}
			if fe.Fix == "" {
				t.Error("no fix")
			}
		})
	}
}

func TestConnConfigPinsSessionSettings(t *testing.T) {
	cfg, err := ConnConfig("postgres://app:pw@localhost/db?sslmode=disable&timezone=Asia/Kolkata&datestyle=SQL&client_encoding=LATIN1", true)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"timezone": "UTC", "datestyle": "ISO", "intervalstyle": "postgres",
		"bytea_output": "hex", "extra_float_digits": "3", "client_encoding": "UTF8", "replication": "database", "application_name": "herald"} {
		if got := cfg.RuntimeParams[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestConnConfigWeakSSLModesRefusePasswordRequests(t *testing.T) {
	tests := []struct {
		mode        string
		wantRefused bool
	}{
		{"", true}, {"prefer", true}, {"allow", true},
		{"disable", false}, {"require", false}, {"verify-ca", false}, {"verify-full", false},
	}
	for _, tt := range tests {
		t.Run("sslmode="+tt.mode, func(t *testing.T) {
			t.Setenv("PGSSLMODE", "")
			u := "postgres://app:pw@localhost/db"
			if tt.mode != "" {
				u += "?sslmode=" + tt.mode
			}
			cfg, err := ConnConfig(u, false)
			if err != nil {
				t.Fatal(err)
			}
			refused := cfg.RequireAuth == "!password,!md5"
			if refused != tt.wantRefused {
				t.Errorf("require_auth = %q, want refused=%v", cfg.RequireAuth, tt.wantRefused)
			}
		})
	}
	t.Run("explicit require_auth=password under prefer", func(t *testing.T) {
		_, err := ConnConfig("postgres://app:pw@localhost/db?sslmode=prefer&require_auth=password", false)
		if err == nil || !strings.Contains(err.Error(), "sslmode") {
			t.Fatalf("ConnConfig = %v, want a refusal naming sslmode", err)
		}
	})
}

// TestPasswordRequestsAgainstARealServer logs in as roles that scripts/testenv's pg_hba makes
// authenticate with cleartext, md5 and SCRAM passwords.
func TestPasswordRequestsAgainstARealServer(t *testing.T) {
	base := passwordRoles(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		role, sslmode string
		wantOK        bool
	}{
		{"herald_pw_plain", "", false},
		{"herald_pw_md5", "", false},
		{"herald_pw_md5", "prefer", false},
		{"herald_pw_scram", "", true},
		{"herald_pw_plain", "disable", true},
		{"herald_pw_md5", "disable", true},
	}
	for _, tt := range tests {
		t.Run(tt.role+"/sslmode="+tt.sslmode, func(t *testing.T) {
			t.Setenv("PGSSLMODE", "")
			cfg, err := ConnConfig(roleURL(u, tt.role, tt.sslmode), false)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgconn.ConnectConfig(ctx, cfg)
			if err == nil {
				conn.Close(ctx)
			}
			if (err == nil) != tt.wantOK {
				t.Fatalf("connect: err = %v, want ok=%v", err, tt.wantOK)
			}
			if err != nil {
				fe := pgError(StageConnect, "connect", err)
				if strings.Contains(fe.Error(), testPassword) {
					t.Errorf("error shows the password: %v", fe)
				}
			}
		})
	}
}

// TestRefusedPasswordRequestStopsTheFeed: a password request Herald will not answer under a
// weak sslmode is a choice the operator must make, not a network fault. The feed stops at once
// with one permanent error that names the choices, and does not retry.
func TestRefusedPasswordRequestStopsTheFeed(t *testing.T) {
	base := passwordRoles(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ role, sslmode, method string }{
		{"herald_pw_md5", "", "md5"},
		{"herald_pw_md5", "prefer", "md5"},
		{"herald_pw_plain", "", "cleartext"},
		{"herald_pw_plain", "allow", "cleartext"},
	} {
		t.Run(tt.role+"/sslmode="+tt.sslmode, func(t *testing.T) {
			t.Setenv("PGSSLMODE", "")
			var ends atomic.Int32
			cfg := testConfig(roleURL(u, tt.role, tt.sslmode))
			cfg.OnEnd = func(error) { ends.Add(1) }
			f, err := New(logTo(t, cfg), newCollector())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = f.Run(ctx)
			var fe *Error
			if !errors.As(err, &fe) || !fe.Permanent || fe.Stage != StageConnect {
				t.Fatalf("Run = %v, want a permanent connect error", err)
			}
			if n, r := ends.Load(), f.Stats().Restarts; n != 1 || r != 0 {
				t.Errorf("the stream ended %d times and restarted %d times, want once and never", n, r)
			}
			if !strings.Contains(fe.Detail, tt.method) {
				t.Errorf("detail %q does not name the %s password request", fe.Detail, tt.method)
			}
			for _, choice := range []string{"sslmode=verify-full", "sslmode=require", "sslmode=disable", "scram-sha-256"} {
				if !strings.Contains(fe.Fix, choice) {
					t.Errorf("fix %q does not name %s", fe.Fix, choice)
				}
			}
			if strings.Contains(fe.Fix, "reachable") || strings.Contains(err.Error(), testPassword) {
				t.Errorf("error %q points at the network or shows the password", err)
			}
		})
	}

	t.Run("require_auth in the URL", func(t *testing.T) {
		t.Setenv("PGSSLMODE", "")
		cfg := testConfig(roleURL(u, "herald_pw_md5", "disable") + "&require_auth=scram-sha-256")
		f, err := New(logTo(t, cfg), newCollector())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err = f.Run(ctx)
		var fe *Error
		if !errors.As(err, &fe) || !fe.Permanent || !strings.Contains(fe.Detail, "md5") || !strings.Contains(fe.Fix, "require_auth") {
			t.Fatalf("Run = %v, want a permanent error naming md5 and require_auth", err)
		}
	})
}

const testPassword = "s3cret-Pa55"

// roleURL is base logging in as role with testPassword, under sslmode ("" for none).
func roleURL(base *url.URL, role, sslmode string) string {
	v := *base
	v.User = url.UserPassword(role, testPassword)
	q := url.Values{}
	if sslmode != "" {
		q.Set("sslmode", sslmode)
	}
	v.RawQuery = q.Encode()
	return v.String()
}

// passwordRoles sets up the roles that scripts/testenv's pg_hba makes authenticate with a
// cleartext, md5 and SCRAM password, and returns the server's URL.
func passwordRoles(t *testing.T) string {
	t.Helper()
	base := testenv.PostgresURL(t)
	const password = testPassword
	testenv.Exec(t, base,
		`DO $$ BEGIN
		   IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_pw_plain') THEN CREATE ROLE herald_pw_plain LOGIN; END IF;
		   IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_pw_md5') THEN CREATE ROLE herald_pw_md5 LOGIN; END IF;
		   IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_pw_scram') THEN CREATE ROLE herald_pw_scram LOGIN; END IF;
		 END $$`,
		`SET password_encryption = 'md5'; ALTER ROLE herald_pw_plain PASSWORD '`+password+`'; ALTER ROLE herald_pw_md5 PASSWORD '`+password+`'`,
		`SET password_encryption = 'scram-sha-256'; ALTER ROLE herald_pw_scram PASSWORD '`+password+`'`,
	)
	return base
}
