package devpg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// needBinaries skips a test that runs a real server when none is installed here, and fails it
// under CI=true, where a missing PostgreSQL is a broken build rather than a reason to test less.
func needBinaries(t *testing.T) {
	t.Helper()
	if _, _, err := Find(""); err != nil {
		msg := fmt.Sprintf("this test runs a real PostgreSQL server; install one (Debian: apt-get install postgresql): %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// publicDir makes a directory the server's user can reach under root; t.TempDir is 0700.
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "devpg-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	// Registered so a failing test leaves no server behind; Stop is idempotent.
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop in cleanup: %v", err)
		}
	})
	return s
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func portFree(t *testing.T, port int) bool {
	t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// waitGone polls until pid is no longer a live process.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if stat, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); rerr == nil && strings.Contains(string(stat), ") Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("postmaster %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServer(t *testing.T) {
	t.Parallel()
	needBinaries(t)
	s := start(t, Config{Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("url", func(t *testing.T) {
		want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
		if got := s.URL(); got != want {
			t.Errorf("URL() = %q, want %q", got, want)
		}
	})

	t.Run("settings", func(t *testing.T) {
		conn := connect(t, s.URL())
		for name, want := range map[string]string{
			"wal_level":             "logical",
			"listen_addresses":      "127.0.0.1",
			"fsync":                 "off",
			"max_wal_senders":       "20",
			"server_encoding":       "UTF8",
			"data_directory":        s.data,
			"max_replication_slots": "20",
		} {
			var got string
			if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
				t.Fatalf("current_setting(%s): %v", name, err)
			}
			if got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		var major string
		if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&major); err != nil {
			t.Fatal(err)
		}
		if major != s.Version() {
			t.Errorf("server major version %s, Version() = %s", major, s.Version())
		}
	})

	t.Run("replication connection", func(t *testing.T) {
		conn, err := pgconn.Connect(ctx, s.URL()+"&replication=database")
		if err != nil {
			t.Fatalf("replication connect: %v", err)
		}
		defer conn.Close(context.Background())
		res, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
		if err != nil {
			t.Fatalf("IDENTIFY_SYSTEM: %v", err)
		}
		if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 4 {
			t.Fatalf("IDENTIFY_SYSTEM returned %v, want one row of four columns", res)
		}
		if got := string(res[0].Rows[0][3]); got != "postgres" {
			t.Errorf("IDENTIFY_SYSTEM dbname = %q, want postgres", got)
		}
	})

	t.Run("runs as the unprivileged user under root", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("not root")
		}
		fi, err := os.Stat(s.data)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Sys().(*syscall.Stat_t).Uid; got != s.as.uid {
			t.Errorf("data directory owned by uid %d, want %s", got, s.as)
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
		if err != nil {
			t.Skip("no /proc:", err)
		}
		if want := fmt.Sprintf("\nUid:\t%d\t", s.as.uid); !strings.Contains(string(st), want) {
			t.Errorf("postmaster status lacks %q:\n%s", want, st)
		}
	})

	t.Run("stop", func(t *testing.T) {
		pid, port, dir := s.pid, s.port, s.Dir()
		if err := s.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		waitGone(t, pid)
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Stop, stat %s: %v, want it gone", dir, err)
		}
		if !portFree(t, port) {
			t.Errorf("after Stop, port %d is still taken", port)
		}
		if err := s.Stop(ctx); err != nil {
			t.Errorf("second Stop: %v, want nil", err)
		}
	})
}

// TestStaleServerReplaced plays a herald killed with SIGKILL: its server keeps running in the
// given Dir, and the next Start with that Dir must stop it and start afresh. The second Start
// is also handed a taken port first, as when freePort loses its race, and the second Stop gets
// a context that is already done.
func TestStaleServerReplaced(t *testing.T) {
	t.Parallel()
	needBinaries(t)
	dir := filepath.Join(publicDir(t), "dev")
	log := testLogger(t)

	first := start(t, Config{Dir: dir, Logger: log})
	conn := connect(t, first.URL())
	if _, err := conn.Exec(context.Background(), "CREATE TABLE left_behind (id int)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	pick := func() (int, error) {
		picks++
		if picks == 1 {
			return takenPort, nil
		}
		return freePort()
	}

	second := start(t, Config{Dir: dir, Logger: log, pickPort: pick})
	waitGone(t, first.pid)
	if !portFree(t, first.port) && first.port != second.port {
		t.Errorf("the earlier server's port %d is still taken", first.port)
	}
	if picks != 2 || second.port == takenPort {
		t.Errorf("picked %d ports, listening on %d (taken: %d); want a retry on a second port", picks, second.port, takenPort)
	}
	conn = connect(t, second.URL())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_tables WHERE tablename = 'left_behind'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the new server has the earlier server's table; want a fresh cluster")
	}
	conn.Close(context.Background())

	// The first handle, as the herald that lost its server to a later one, must not stop
	// its successor.
	if err := first.Stop(context.Background()); err != nil {
		t.Errorf("Stop of the replaced server: %v", err)
	}
	if !running(second.pid, second.data) {
		t.Fatalf("Stop of the replaced server stopped its successor")
	}

	// The last resort: the context is done, so no fast shutdown, and pg_ctl fails, so no
	// immediate one either; only SIGKILL is left.
	broken := t.TempDir()
	for _, name := range serverBinaries {
		if err := os.WriteFile(filepath.Join(broken, name), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	second.bin = broken
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := second.Stop(done); err != nil {
		t.Fatalf("Stop with a done context and a failing pg_ctl: %v", err)
	}
	waitGone(t, second.pid)
	if !portFree(t, second.port) {
		t.Errorf("after Stop, port %d is still taken", second.port)
	}
	if _, err := os.Stat(filepath.Join(dir, logName)); err != nil {
		t.Errorf("Stop removed a given Dir's log: %v", err)
	}
}

// TestStartFailureCleansUp checks that a failed Start leaves no server and no directory.
// Not parallel: it points TMPDIR at a directory of its own to see what Start leaves there.
func TestStartFailureCleansUp(t *testing.T) {
	needBinaries(t)
	tmp := publicDir(t)
	t.Setenv("TMPDIR", tmp)
	empty := func(t *testing.T) {
		t.Helper()
		left, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("a failed Start left %s behind in TMPDIR", left[0].Name())
		}
	}

	t.Run("port taken", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		port := taken.Addr().(*net.TCPAddr).Port
		s, err := Start(context.Background(), Config{Port: port, Logger: testLogger(t)})
		if err == nil {
			s.Stop(context.Background())
			t.Fatalf("Start on taken port %d succeeded", port)
		}
		t.Logf("Start error: %v", err)
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Start error = %v, want an *Error", err)
		}
		if e.Stage != StageStart || !strings.Contains(e.Detail, "could not bind") || !strings.Contains(e.Fix, fmt.Sprintf("127.0.0.1:%d", port)) {
			t.Errorf("Start error = %+v, want stage start, the log's bind failure in Detail, and the port in Fix", e)
		}
		empty(t)
	})

	t.Run("context done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Start(ctx, Config{}); !errors.Is(err, context.Canceled) {
			t.Errorf("Start with a done context = %v, want context.Canceled", err)
		}
		empty(t)
	})
}

func TestStartRefusesForeignData(t *testing.T) {
	needBinaries(t)
	dir := publicDir(t)
	data := filepath.Join(dir, dataName)
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(data, "PG_VERSION")
	if err := os.WriteFile(precious, []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Start(context.Background(), Config{Dir: dir})
	if err == nil {
		s.Stop(context.Background())
		t.Fatal("Start replaced a data directory it did not make")
	}
	var e *Error
	if !errors.As(err, &e) || e.Stage != StageDir || !strings.Contains(e.Fix, data) {
		t.Errorf("Start error = %v, want a dir-stage *Error naming %s", err, data)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("the foreign file is gone: %v", err)
	}
}

func TestStartChecksReach(t *testing.T) {
	as, err := unprivileged()
	if err != nil || as == nil {
		t.Skip("only root runs the server as another user")
	}
	needBinaries(t)
	closed := filepath.Join(publicDir(t), "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Config{Dir: filepath.Join(closed, "dev")})
	var e *Error
	if !errors.As(err, &e) || e.Stage != StageDir || e.Fix != "chmod o+x "+closed+", or choose a directory under /tmp" {
		t.Errorf("Start error = %v, want a dir-stage *Error whose fix opens %s", err, closed)
	}
}

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

func TestConfigValidate(t *testing.T) {
	for _, port := range []int{-1, 65536} {
		err := Config{Port: port}.Validate()
		var e *Error
		if !errors.As(err, &e) || e.Stage != StageConfig {
			t.Errorf("Validate(port %d) = %v, want a config-stage *Error", port, err)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Validate(zero) = %v, want nil", err)
	}
}
