package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Secrets used by the tests. Each is long enough to pass validation, and distinctive enough
// that finding it in an error or a printed config is never a coincidence.
const (
	testSecret    = "s3cret-hs256-0123456789abcdefghijklmnop" // 39 bytes
	testSecret2   = "s3cret-rotated-ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	testAPIKey    = "apikey-0123456789abcdef"
	testDBPass    = "pg-pass-Zq9xW2"
	testDBURL     = "postgres://herald:" + testDBPass + "@db.internal:5432/app?sslmode=verify-full"
	anonymousEnv  = "HERALD_AUTH_ALLOW_ANONYMOUS=true"
	secretFromEnv = "HERALD_AUTH_SECRETS=" + testSecret
)

// allSecrets are the values no error or Redacted output may contain.
var allSecrets = []string{testSecret, testSecret2, testAPIKey, testDBPass}

// writeConfig writes body to a config file in a fresh directory and returns its path.
func writeConfig(t testing.TB, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// diffConfig compares two Configs on their exported fields: where a value came from is not
// part of what it is.
func diffConfig(want, got *Config) string {
	return cmp.Diff(want, got, cmpopts.IgnoreUnexported(Config{}))
}

// asError requires err to be a *Error with Stage "config" and returns it.
func asError(t testing.TB, err error) *Error {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want *Error")
	}
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("got %T %v, want *Error", err, err)
	}
	if e.Stage != "config" {
		t.Errorf("Stage = %q, want config", e.Stage)
	}
	var target *Error
	if !errors.As(err, &target) {
		t.Errorf("errors.As(*Error) failed")
	}
	return e
}

// checkNoSecrets fails if any test secret appears in s.
func checkNoSecrets(t testing.TB, what, s string) {
	t.Helper()
	for _, secret := range allSecrets {
		if strings.Contains(s, secret) {
			t.Errorf("%s contains the secret %q:\n%s", what, secret, s)
		}
	}
}
