package devpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The layout of the directory a Server owns.
const (
	dataName   = "data"         // PGDATA, and the Unix socket
	logName    = "postgres.log" // the server log, beside the cluster where a person looks for it
	markerName = "HERALD_DEVPG" // in PGDATA: this cluster is ours to stop and replace
)

const (
	startTimeout = 60 // seconds pg_ctl waits for the server to accept connections
	fastTimeout  = 30 // seconds pg_ctl waits for a fast shutdown before Stop stops at once
	// haltTimeout bounds the last-resort stop, which runs under its own deadline because the
	// caller's context may already be done.
	haltTimeout = 20 * time.Second
	// logTailLines is how much of the server log a start failure carries.
	logTailLines = 20
	// maxSocketPath is the longest Unix socket path every platform takes (sun_path is 104 bytes
	// on macOS and the BSDs, 108 on Linux, both with the NUL).
	maxSocketPath = 103
)

// Config says where and how to run the server. The zero value runs one in a new temporary
// directory, on a free loopback port, with the binaries Find locates.
type Config struct {
	// Dir holds the data directory (Dir/data, which also holds the Unix socket) and the server
	// log (Dir/postgres.log). Empty means a new directory under os.TempDir(), which Stop
	// removes. A given Dir is created when missing and kept by Stop; Start stops any server an
	// earlier run left in it and replaces its data.
	Dir string
	// Port is the loopback TCP port. 0 picks a free one.
	Port int
	// BinDir holds initdb, pg_ctl and postgres. Empty means search (see Find).
	BinDir string
	// Logger receives what Start and Stop do. Nil discards.
	Logger *slog.Logger
	// Settings are postgresql.conf settings written after Herald's own, so they win: a test
	// that needs a server unfit for Herald (wal_level = replica) says so here. Values are
	// written as they are given, so a string needs its quotes: {"wal_level": "replica"},
	// {"log_line_prefix": "'%m '"}.
	Settings map[string]string

	// Test hooks. pickPort replaces freePort, to hand Start a port that is taken; tempRoot
	// replaces os.TempDir() as the parent of a temporary Dir.
	pickPort func() (int, error)
	tempRoot string
}

// Validate reports a Config Start cannot use.
func (c Config) Validate() error {
	if c.Port < 0 || c.Port > 65535 {
		return &Error{Stage: StageConfig, Detail: fmt.Sprintf("port %d is outside 0-65535", c.Port), Fix: "pass a port from 1024 to 65535, or 0 to pick a free one"}
	}
	return nil
}

// Server is a running private PostgreSQL. Its methods are safe for concurrent use.
type Server struct {
	log     *slog.Logger
	bin     string
	version string
	as      *account // who the server runs as; nil for ourselves
	dir     string
	data    string
	logPath string
	temp    bool // dir is a temporary directory Start made, and Stop removes
	// made says Start made the data directory, so a server in it is ours to halt when Start
	// fails. Before then, data may be a cluster that is not ours.
	made bool

	// Set by Start, then fixed.
	port int
	pid  int // the postmaster's

	mu      sync.Mutex // serialises Stop
	stopped bool       // guarded by mu
	stopErr error      // guarded by mu
}

// Start creates a fresh cluster and starts a server on it, returning once it accepts
// connections. On failure nothing of it is left running, and a temporary directory is removed.
// Errors a person can act on are *Error.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bin, version, err := Find(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	as, err := unprivileged()
	if err != nil {
		return nil, err
	}
	s := &Server{log: log, bin: bin, version: version, as: as}
	if err := s.makeDir(cfg.Dir, cfg.tempRoot); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.abandon()
		}
	}()
	if err := checkReach(s.dir, as); err != nil {
		return nil, err
	}
	if err := s.clearStale(); err != nil {
		return nil, err
	}
	if err := s.initdb(ctx); err != nil {
		return nil, err
	}
	if err := s.configure(cfg.Settings); err != nil {
		return nil, err
	}
	pick := cfg.pickPort
	if pick == nil {
		pick = freePort
	}
	for attempt := 1; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = pick(); err != nil {
				return nil, &Error{Stage: StageStart, Detail: "pick a free loopback port: " + err.Error(), Fix: "pass a port", Err: err}
			}
		}
		bindFailed, err := s.start(ctx, port)
		if err == nil {
			break
		}
		// A picked port can be taken between freePort closing it and postgres binding it.
		// Once is enough to lose that race; twice means something else is wrong.
		if !bindFailed || cfg.Port != 0 || attempt > 1 {
			return nil, err
		}
		log.Info("port taken before postgres bound it; trying another", "port", port)
	}
	ok = true
	log.Info("postgres started", "version", version, "port", s.port, "pid", s.pid, "dir", s.dir, "user", as.String())
	return s, nil
}

// URL is the superuser URL of the server. It needs no password: the server trusts loopback.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Dir is the directory holding the data and the log.
func (s *Server) Dir() string { return s.dir }

// LogPath is the server log.
func (s *Server) LogPath() string { return s.logPath }

// Version is the major version of the server, e.g. "15".
func (s *Server) Version() string { return s.version }

// Stop shuts the server down with pg_ctl -m fast, then removes the directory if Start made
// it. Should the fast shutdown fail or ctx end first, Stop stops the server at once
// (pg_ctl -m immediate, then SIGKILL to the postmaster), so no server outlives it even with ctx
// already done. Stop is idempotent: later calls return what the first returned.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return s.stopErr
	}
	s.stopped = true
	s.stopErr = s.stop(ctx)
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	// A later Start given the same Dir stops this server and starts its own there; that one
	// is not ours to stop.
	if cur := readPid(s.data); cur > 0 && s.pid > 0 && cur != s.pid {
		s.log.Warn("a later start replaced this server; leaving its successor running", "pid", s.pid, "successor", cur, "dir", s.dir)
		return nil
	}
	out, err := s.command(ctx, "pg_ctl", "-D", s.data, "-m", "fast", "-w", "-t", strconv.Itoa(fastTimeout), "stop").CombinedOutput()
	if err != nil || running(s.pid, s.data) {
		s.log.Warn("fast shutdown did not finish; stopping at once", "pid", s.pid, "err", errorOf(ctx, err), "output", lastLines(out, 5))
		if err := s.halt(s.pid); err != nil {
			return err
		}
	}
	s.log.Info("postgres stopped", "port", s.port, "dir", s.dir)
	if s.temp {
		if err := os.RemoveAll(s.dir); err != nil {
			return &Error{Stage: StageStop, Detail: "remove " + s.dir + ": " + err.Error(), Fix: "rm -rf " + s.dir, Err: err}
		}
	}
	return nil
}

// abandon cleans up after a Start that failed. Start returns the error that made it fail, so
// trouble here is logged, not returned.
func (s *Server) abandon() {
	if s.made {
		if err := s.halt(s.pid); err != nil {
			s.log.Warn("stop after a failed start", "err", err)
		}
	}
	if s.temp {
		if err := os.RemoveAll(s.dir); err != nil {
			s.log.Warn("remove after a failed start", "dir", s.dir, "err", err)
		}
	}
}

// halt stops the postmaster of s.data now: pg_ctl -m immediate, then SIGKILL to its pid (from
// postmaster.pid, else the one given). It is the last resort, so it runs under its own deadline
// rather than a context that may be done already.
func (s *Server) halt(pid int) error {
	if p := readPid(s.data); p > 0 {
		pid = p
	}
	if pid <= 0 {
		return nil // never started, or pg_ctl already removed postmaster.pid on a clean stop
	}
	ctx, cancel := context.WithTimeout(context.Background(), haltTimeout)
	defer cancel()
	if running(pid, s.data) {
		out, err := s.command(ctx, "pg_ctl", "-D", s.data, "-m", "immediate", "-w", "-t", "10", "stop").CombinedOutput()
		if err != nil {
			s.log.Warn("immediate shutdown failed; killing the postmaster", "pid", pid, "err", err, "output", lastLines(out, 5))
		}
	}
	if !running(pid, s.data) {
		return nil
	}
	if err := kill(pid); err != nil {
		return &Error{Stage: StageStop, Detail: fmt.Sprintf("kill postmaster %d of %s: %v", pid, s.data, err), Fix: fmt.Sprintf("kill -9 %d", pid), Err: err}
	}
	for running(pid, s.data) {
		if ctx.Err() != nil {
			return &Error{Stage: StageStop, Detail: fmt.Sprintf("postmaster %d of %s outlived SIGKILL", pid, s.data), Fix: fmt.Sprintf("kill -9 %d", pid)}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// makeDir makes or adopts the directory the server lives in.
func (s *Server) makeDir(dir, tempRoot string) error {
	if dir == "" {
		d, err := os.MkdirTemp(tempRoot, "herald-dev-")
		if err != nil {
			return &Error{Stage: StageDir, Detail: "make a temporary directory: " + err.Error(), Fix: "set TMPDIR to a writable directory", Err: err}
		}
		s.temp = true
		dir = d
		// MkdirTemp makes it 0700, which shuts out the server's user under root.
		if err := os.Chmod(dir, 0o755); err != nil {
			_ = os.Remove(dir)
			return &Error{Stage: StageDir, Detail: err.Error(), Err: err}
		}
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return &Error{Stage: StageDir, Detail: fmt.Sprintf("resolve %s: %v", dir, err), Fix: "pass an absolute directory", Err: err}
		}
		dir = abs
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return &Error{Stage: StageDir, Detail: err.Error(), Fix: "choose a writable directory", Err: err}
			}
			// Undo a strict umask on the directory we made, for the same reason as above.
			if err := os.Chmod(dir, 0o755); err != nil {
				return &Error{Stage: StageDir, Detail: err.Error(), Err: err}
			}
		}
	}
	s.setDir(dir)
	return nil
}

func (s *Server) setDir(dir string) {
	s.dir = dir
	s.data = filepath.Join(dir, dataName)
	s.logPath = filepath.Join(dir, logName)
}

// clearStale makes way for a fresh cluster in a given Dir. A herald killed with SIGKILL leaves
// its server running; this stops it. It refuses to touch a data directory that holds anything
// but what herald dev made there, so a mistaken Dir cannot cost anyone a real database.
func (s *Server) clearStale() error {
	entries, err := os.ReadDir(s.data)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &Error{Stage: StageStale, Detail: fmt.Sprintf("read %s: %v", s.data, err), Fix: "remove " + s.data, Err: err}
	}
	if len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(s.data, markerName)); err != nil {
			return &Error{Stage: StageDir,
				Detail: fmt.Sprintf("%s holds files herald dev did not make; refusing to replace them", s.data),
				Fix:    "choose another directory, or remove " + s.data,
			}
		}
		if pid := readPid(s.data); running(pid, s.data) {
			s.log.Warn("stopping the server an earlier run left behind", "pid", pid, "dir", s.dir)
			if err := s.halt(pid); err != nil {
				return &Error{Stage: StageStale, Detail: "stop the earlier server: " + err.Error(), Fix: fmt.Sprintf("kill %d", pid), Err: err}
			}
		}
	}
	if err := os.RemoveAll(s.data); err != nil {
		return &Error{Stage: StageStale, Detail: "remove the earlier data: " + err.Error(), Fix: "rm -rf " + s.data, Err: err}
	}
	return nil
}

func (s *Server) initdb(ctx context.Context) error {
	if err := os.Mkdir(s.data, 0o700); err != nil {
		return &Error{Stage: StageDir, Detail: err.Error(), Fix: "choose a writable directory", Err: err}
	}
	s.made = true
	if err := s.as.chown(s.data); err != nil {
		return &Error{Stage: StageDir, Detail: err.Error(), Fix: "choose a directory on a local filesystem", Err: err}
	}
	out, err := s.command(ctx, "initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync").CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("initdb %s: %w", s.data, ctx.Err())
		}
		return &Error{Stage: StageInitdb,
			Detail: fmt.Sprintf("initdb -D %s: %v: %s", s.data, err, lastLines(out, logTailLines)),
			Fix:    initdbFix(string(out)),
			Err:    err,
		}
	}
	marker := "This cluster belongs to herald dev. The next herald dev given this directory stops its server and replaces it.\n"
	if err := s.writeFile(markerName, marker, os.O_CREATE|os.O_WRONLY|os.O_TRUNC); err != nil {
		return err
	}
	return nil
}

// initdbFix names the fix for the initdb failures people meet most.
func initdbFix(out string) string {
	switch {
	case strings.Contains(out, "shared memory"):
		return "give the container more shared memory, e.g. docker run --shm-size=256m"
	case strings.Contains(out, "user does not exist"):
		return "run herald dev as a user with an entry in /etc/passwd"
	case strings.Contains(out, "Permission denied"):
		return "choose a directory under /tmp"
	default:
		return "read initdb's output above"
	}
}

// configure makes the cluster a private one for logical replication: loopback only, trust
// only, and no durability, since it is thrown away; then writes extra (Config.Settings).
func (s *Server) configure(extra map[string]string) error {
	socketDir := s.data
	if len(s.data)+len("/.s.PGSQL.65535") > maxSocketPath {
		// Postgres refuses to start when it can make none of its sockets; TCP is what
		// herald dev hands out anyway.
		s.log.Info("data directory path too long for a Unix socket; listening on TCP only", "dir", s.data)
		socketDir = ""
	}
	conf := fmt.Sprintf(`
# Written by herald dev: a private, throwaway server for logical replication.
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
fsync = off
synchronous_commit = off
full_page_writes = off
`, strings.ReplaceAll(socketDir, `'`, `''`))
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		conf += fmt.Sprintf("%s = %s\n", name, extra[name])
	}
	if err := s.writeFile("postgresql.conf", conf, os.O_APPEND|os.O_WRONLY); err != nil {
		return err
	}
	// Replication lines too: "all" does not match a physical replication connection.
	hba := `# Written by herald dev: trust on this host, nothing else.
local all         all              trust
local replication all              trust
host  all         all 127.0.0.1/32 trust
host  replication all 127.0.0.1/32 trust
`
	if err := s.writeFile("pg_hba.conf", hba, os.O_CREATE|os.O_WRONLY|os.O_TRUNC); err != nil {
		return err
	}
	// A fresh cluster gets a fresh log. pg_ctl opens it as the server's user, who may not be
	// able to create files in Dir.
	lf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err == nil {
		err = lf.Close()
	}
	if err == nil {
		err = s.as.chown(s.logPath)
	}
	if err != nil {
		return &Error{Stage: StageDir, Detail: fmt.Sprintf("create %s: %v", s.logPath, err), Fix: "choose a writable directory", Err: err}
	}
	return nil
}

// writeFile writes text to a file in PGDATA, owned by the server's user.
func (s *Server) writeFile(name, text string, flag int) error {
	path := filepath.Join(s.data, name)
	f, err := os.OpenFile(path, flag, 0o600)
	if err == nil {
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = s.as.chown(path)
	}
	if err != nil {
		return &Error{Stage: StageInitdb, Detail: fmt.Sprintf("write %s: %v", path, err), Err: err}
	}
	return nil
}

// start runs pg_ctl start on port. bindFailed says postgres could not bind the port.
func (s *Server) start(ctx context.Context, port int) (bindFailed bool, err error) {
	// Later settings win in postgresql.conf, so a retry appends its port after the last.
	if err := s.writeFile("postgresql.conf", fmt.Sprintf("port = %d\n", port), os.O_APPEND|os.O_WRONLY); err != nil {
		return false, err
	}
	s.port = port
	// A retry appends to the log; only what this attempt wrote explains its failure.
	var from int64
	if fi, err := os.Stat(s.logPath); err == nil {
		from = fi.Size()
	}

	cmd := s.command(context.WithoutCancel(ctx), "pg_ctl", "-D", s.data, "-l", s.logPath, "-w", "-t", strconv.Itoa(startTimeout), "start")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = s.pgctlStart(ctx, cmd)
	if err == nil {
		s.pid = readPid(s.data)
		return false, nil
	}
	// pg_ctl has exited, so any postmaster it started has written postmaster.pid by now. One
	// that is still running (pg_ctl gave up waiting, or ctx ended) is not ours to keep.
	if err := s.halt(0); err != nil {
		s.log.Warn("stop after a failed start", "err", err)
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("pg_ctl start %s: %w", s.data, ctx.Err())
	}
	tail := logTail(s.logPath, from, logTailLines)
	bindFailed = strings.Contains(tail, "could not bind")
	fix := "read the server log: " + s.logPath
	if bindFailed {
		fix = fmt.Sprintf("choose another port, or stop what listens on 127.0.0.1:%d", port)
	}
	return bindFailed, &Error{Stage: StageStart,
		Detail: fmt.Sprintf("postgres did not start on 127.0.0.1:%d: pg_ctl: %v: %s\nlast lines of %s:\n%s", port, err, lastLines(out.Bytes(), 5), s.logPath, tail),
		Fix:    fix,
		Err:    err,
	}
}

// pgctlStart runs pg_ctl start, which ctx does not kill: killed, pg_ctl may already have
// forked a postmaster that writes postmaster.pid only after anyone has looked for it, and so
// outlives Start unseen. When ctx ends first, the server is stopped instead, which ends pg_ctl's
// wait; pg_ctl's own -t bounds the rest.
func (s *Server) pgctlStart(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		return err
	case <-ctx.Done():
		if err := s.halt(0); err != nil {
			s.log.Warn("stop while starting", "err", err)
		}
		<-waited
		return ctx.Err()
	}
}

// command prepares a server binary to run as the server's user, from the server's directory
// (the current one may be out of that user's reach).
func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = childEnv()
	// pg_ctl start hands the postmaster the log, not our pipe, but should any descendant hold
	// the pipe open, Wait gives up on it after this rather than hang.
	cmd.WaitDelay = 5 * time.Second
	s.as.apply(cmd)
	s.log.Debug("run", "cmd", cmd.String(), "as", s.as.String())
	return cmd
}

// childEnv is our environment without what would steer the server binaries: PGDATA, PGPORT
// and the other PG variables, and a locale that would translate the messages Start reads.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// freePort asks the kernel for a free loopback port. The port is free when the listener
// closes, not necessarily moments later when postgres binds it: another process can take it in
// between. Start retries once with a new port when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// readPid returns the postmaster pid from the first line of data/postmaster.pid, or 0.
func readPid(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(line)))
	if err != nil {
		return 0
	}
	return pid
}

// logTail returns the last n lines written to path from offset on. Only the last 64 KiB are
// read: a start failure has its reason at the end.
func logTail(path string, from int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()-from > 64<<10 {
		from = fi.Size() - 64<<10
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	return lastLines(b, n)
}

// lastLines returns the last n lines of b, trimmed.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// errorOf prefers the context's error, which says why a command was cut short.
func errorOf(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
