//go:build unix

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
	"sync"
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
// TestSettingsWin: Config.Settings are written after Herald's own, so a server can be made
// unfit for Herald on purpose.
func TestSettingsWin(t *testing.T) {
	t.Parallel()
	needBinaries(t)
	s := start(t, Config{Logger: testLogger(t), Settings: map[string]string{"wal_level": "replica", "max_wal_senders": "7"}})
	conn := connect(t, s.URL())
	for name, want := range map[string]string{"wal_level": "replica", "max_wal_senders": "7", "fsync": "off"} {
		var got string
		if err := conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("current_setting(%s): %v", name, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

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
func TestStartFailureCleansUp(t *testing.T) {
	t.Parallel()
	needBinaries(t)
	// tempRoot is where Start makes its temporary Dir, so the test can see what is left.
	tempRoot := func(t *testing.T) (string, func(t *testing.T)) {
		tmp := publicDir(t)
		return tmp, func(t *testing.T) {
			t.Helper()
			left, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("a failed Start left %s behind", left[0].Name())
			}
		}
	}

	t.Run("port taken", func(t *testing.T) {
		t.Parallel()
		tmp, empty := tempRoot(t)
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		port := taken.Addr().(*net.TCPAddr).Port
		s, err := Start(context.Background(), Config{Port: port, Logger: testLogger(t), tempRoot: tmp})
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

	t.Run("context done during pg_ctl start", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		log := slog.New(&onRun{Handler: testLogger(t).Handler(), match: "pg_ctl", then: func() {
			// pg_ctl start takes about 100ms here; cut it short once the postmaster is forked.
			time.AfterFunc(30*time.Millisecond, cancel)
		}})
		// A given Dir, since removing a temporary one under a starting postmaster makes it
		// crash and would hide a postmaster Start failed to stop.
		dir := filepath.Join(publicDir(t), "dev")
		s, err := Start(ctx, Config{Dir: dir, Logger: log})
		if err == nil {
			s.Stop(context.Background())
			t.Skip("the server started before the context was done; nothing to check")
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Start = %v, want context.Canceled", err)
		}
		if pids := processesUnder(t, dir); len(pids) > 0 {
			t.Errorf("processes still running in %s: %v", dir, pids)
		}
	})

	t.Run("context done", func(t *testing.T) {
		t.Parallel()
		tmp, empty := tempRoot(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Start(ctx, Config{tempRoot: tmp}); !errors.Is(err, context.Canceled) {
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

// onRun calls then, once, when a command whose line holds match is about to run.
type onRun struct {
	slog.Handler
	match string
	once  sync.Once
	then  func()
}

func (h *onRun) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "run" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "cmd" && strings.Contains(a.Value.String(), h.match) {
				h.once.Do(h.then)
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

// processesUnder lists the live processes whose working directory is under dir, as a
// postmaster's is its data directory.
func processesUnder(t *testing.T, dir string) []int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cwd")
	if err != nil || len(procs) == 0 {
		t.Skip("no /proc to look for leftover processes in")
	}
	var pids []int
	for _, p := range procs {
		cwd, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(cwd, dir+"/") {
			continue
		}
		var pid int
		fmt.Sscanf(p, "/proc/%d/cwd", &pid)
		if running(pid, cwd) {
			pids = append(pids, pid)
		}
	}
	return pids
}
