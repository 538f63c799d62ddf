package devpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MinMajor is the oldest PostgreSQL major version Start accepts: Herald streams with pgoutput
// protocol 2, which PostgreSQL 14 introduced.
const MinMajor = 14

// serverBinaries are the programs a bin directory must hold for Start to use it.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

const installFix = "install PostgreSQL 14 or newer (Debian: apt-get install postgresql), or pass its bin directory"

// Find returns the directory holding the PostgreSQL server binaries (initdb, pg_ctl and
// postgres) and their major version, e.g. "15".
//
// A non-empty binDir is the only place looked at. An empty one searches, in order: the
// directory `pg_config --bindir` prints, /usr/lib/postgresql/*/bin from the highest version
// down, /usr/local/pgsql/bin, and the directory of the initdb found on PATH; the first directory
// holding all three binaries at version 14 or newer wins.
//
// The returned error is an *Error. When binaries are found but are too old, Find returns their
// directory and version along with the error.
func Find(binDir string) (bin, version string, err error) {
	if binDir != "" {
		if abs, err := filepath.Abs(binDir); err == nil {
			binDir = abs
		}
		if missing := missingBinary(binDir); missing != "" {
			return "", "", &Error{Stage: StageFind,
				Detail: fmt.Sprintf("%s holds no %s", binDir, missing),
				Fix:    "pass the directory that holds initdb, pg_ctl and postgres (`pg_config --bindir` prints it), or none to search the usual places",
			}
		}
		major, n, err := serverVersion(binDir)
		if err != nil {
			return "", "", err
		}
		if n < MinMajor {
			return binDir, major, tooOld(binDir, major)
		}
		return binDir, major, nil
	}

	var oldDir, oldMajor string
	var verErr error
	for _, dir := range searchDirs() {
		if missingBinary(dir) != "" {
			continue
		}
		major, n, err := serverVersion(dir)
		switch {
		case err != nil:
			if verErr == nil {
				verErr = err
			}
		case n < MinMajor:
			if oldDir == "" {
				oldDir, oldMajor = dir, major
			}
		default:
			return dir, major, nil
		}
	}
	if oldDir != "" {
		return oldDir, oldMajor, tooOld(oldDir, oldMajor)
	}
	if verErr != nil {
		return "", "", verErr
	}
	return "", "", &Error{Stage: StageFind,
		Detail: "no PostgreSQL server binaries (initdb, pg_ctl, postgres) in `pg_config --bindir`, /usr/lib/postgresql/*/bin, /usr/local/pgsql/bin or PATH",
		Fix:    installFix,
	}
}

func tooOld(dir, major string) *Error {
	return &Error{Stage: StageFind,
		Detail: fmt.Sprintf("PostgreSQL %s in %s is older than %d", major, dir, MinMajor),
		Fix:    fmt.Sprintf("install PostgreSQL %d or newer (Debian: apt-get install postgresql) and pass its bin directory", MinMajor),
	}
}

// searchDirs lists the candidate bin directories in the order Find tries them, without
// duplicates.
func searchDirs() []string {
	var dirs []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Debian's pg_config comes with libpq-dev and may name a version whose server is not
	// installed, so its answer is only a first guess; missingBinary weeds it out.
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	versioned, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versioned, func(a, b string) int {
		// Numerically and highest first, so 16 comes before 9.6.
		va, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(a)), 64)
		vb, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(b)), 64)
		switch {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return strings.Compare(a, b)
	})
	dirs = append(dirs, versioned...)
	dirs = append(dirs, "/usr/local/pgsql/bin")
	if p, err := exec.LookPath("initdb"); err == nil {
		// Distributions link initdb into PATH from a versioned directory that also holds
		// postgres, which is rarely on PATH itself.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	var out []string
	for _, d := range dirs {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// missingBinary returns the first server binary dir lacks as an executable file, or "".
func missingBinary(dir string) string {
	for _, name := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return name
		}
	}
	return ""
}

// serverVersion runs `postgres --version` from dir and returns the major version as a string
// and as the number it is compared by (9 for 9.6).
func serverVersion(dir string) (major string, n int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := filepath.Join(dir, "postgres")
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", 0, &Error{Stage: StageFind,
			Detail: fmt.Sprintf("%s --version: %v", path, err),
			Fix:    installFix,
			Err:    err,
		}
	}
	major, n, ok := parseVersion(string(out))
	if !ok {
		return "", 0, &Error{Stage: StageFind,
			Detail: fmt.Sprintf("%s --version printed %q, which names no PostgreSQL version", path, strings.TrimSpace(string(out))),
			Fix:    installFix,
		}
	}
	return major, n, nil
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?`)

// parseVersion reads the output of `postgres --version`, e.g. "postgres (PostgreSQL) 15.20
// (Debian 15.20-0+deb12u1)" or "postgres (PostgreSQL) 17beta2". Before PostgreSQL 10 the
// major version had two parts (9.6); since then it has one.
func parseVersion(out string) (major string, n int, ok bool) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return "", 0, false
	}
	if n < 10 && m[2] != "" {
		return m[1] + "." + m[2], n, true
	}
	return m[1], n, true
}
