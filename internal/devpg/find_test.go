//go:build unix

package devpg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	fake := func(t *testing.T, version string, names ...string) string {
		dir := t.TempDir()
		for _, name := range names {
			script := "#!/bin/sh\nexit 0\n"
			if name == "postgres" {
				script = fmt.Sprintf("#!/bin/sh\necho 'postgres (PostgreSQL) %s'\n", version)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name        string
		dir         func(t *testing.T) string
		wantVersion string
		wantDetail  string // "" wants no error
	}{
		{"bogus dir", func(t *testing.T) string { return "/nonexistent/herald/bin" }, "", "/nonexistent/herald/bin holds no initdb"},
		{"no postgres", func(t *testing.T) string { return fake(t, "", "initdb", "pg_ctl") }, "", "holds no postgres"},
		{"too old", func(t *testing.T) string { return fake(t, "13.4", serverBinaries...) }, "13", "PostgreSQL 13 in"},
		{"no version", func(t *testing.T) string { return fake(t, "", serverBinaries...) }, "", "names no PostgreSQL version"},
		{"new enough", func(t *testing.T) string { return fake(t, "17.2 (Debian 17.2-1)", serverBinaries...) }, "17", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			bin, version, err := Find(dir)
			t.Logf("Find: %v", err)
			if version != tc.wantVersion {
				t.Errorf("version = %q, want %q", version, tc.wantVersion)
			}
			if tc.wantDetail == "" {
				if err != nil || bin != filepath.Clean(dir) {
					t.Errorf("Find(%s) = %q, %v; want the dir and no error", dir, bin, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Find(%s) error = %v, want an *Error", dir, err)
			}
			if e.Stage != StageFind || !strings.Contains(e.Detail, tc.wantDetail) || e.Fix == "" {
				t.Errorf("Find(%s) = %+v, want stage find, detail holding %q, and a fix", dir, e, tc.wantDetail)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out   string
		major string
		n     int
		ok    bool
	}{
		{"postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)\n", "15", 15, true},
		{"postgres (PostgreSQL) 17beta2", "17", 17, true},
		{"postgres (PostgreSQL) 9.6.24", "9.6", 9, true},
		{"postgres (PostgreSQL) 14", "14", 14, true},
		{"postgres (Greenplum) 6", "", 0, false},
		{"", "", 0, false},
	} {
		t.Run(tc.out, func(t *testing.T) {
			major, n, ok := parseVersion(tc.out)
			if major != tc.major || n != tc.n || ok != tc.ok {
				t.Errorf("parseVersion(%q) = %q, %d, %v; want %q, %d, %v", tc.out, major, n, ok, tc.major, tc.n, tc.ok)
			}
		})
	}
}
