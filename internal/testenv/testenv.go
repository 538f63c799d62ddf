// Package testenv hands integration tests the private PostgreSQL, Redis and Redis Cluster that
// scripts/testenv starts. A test asks for a service; when the service is not there, the test
// skips locally with a message naming the script, and fails under CI=true, where a missing
// service is a broken build rather than a reason to test less. A test that must stop and start
// Redis runs its own from the redis-server binary RedisServer finds.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/devpg"
)

// The variables scripts/testenv exports.
const (
	DatabaseURLEnv     = "HERALD_TEST_DATABASE_URL"
	RedisURLEnv        = "HERALD_TEST_REDIS_URL"
	RedisClusterURLEnv = "HERALD_TEST_REDIS_CLUSTER_URL"
	// PostgresBinEnv is the directory of the PostgreSQL server binaries (initdb, pg_ctl,
	// postgres) the private server runs from.
	PostgresBinEnv = "HERALD_TESTENV_PGBIN"
)

func missing(t testing.TB, env, what string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not set: this test needs the private %s; run it through `scripts/testenv run -- go test ./...` or `make test`", env, what)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// PostgresURL returns the superuser URL of the private PostgreSQL.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(DatabaseURLEnv)
	if u == "" {
		missing(t, DatabaseURLEnv, "PostgreSQL")
	}
	return u
}

// PostgresBin returns the directory of the PostgreSQL server binaries scripts/testenv found,
// for a test that runs a second server of its own, configured as the private one must not be
// (devpg.Config.BinDir).
func PostgresBin(t testing.TB) string {
	t.Helper()
	d := os.Getenv(PostgresBinEnv)
	if d == "" {
		missing(t, PostgresBinEnv, "PostgreSQL's server binaries")
	}
	return d
}

// OwnPostgres starts a PostgreSQL server of the test's own, with settings written after
// Herald's (devpg.Config.Settings): for a test that needs a server configured as the shared
// private one must not be (a synchronous standby that never answers, wal_level = replica,
// two-phase commit). It is stopped when the test ends.
func OwnPostgres(t testing.TB, settings map[string]string) *devpg.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := devpg.Start(ctx, devpg.Config{BinDir: PostgresBin(t), Settings: settings})
	if err != nil {
		t.Fatalf("testenv: start a Postgres of the test's own: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("testenv: stop the test's own Postgres: %v", err)
		}
	})
	return s
}

// RedisURL returns the URL of the private Redis.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(RedisURLEnv)
	if u == "" {
		missing(t, RedisURLEnv, "Redis")
	}
	return u
}

// RedisClusterURL returns the URL of the private 3-master Redis Cluster that `scripts/testenv`
// starts when HERALD_TESTENV_REDIS_CLUSTER=1 (and always under CI=true): the first master, with
// the others as addr parameters.
func RedisClusterURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(RedisClusterURLEnv)
	if u == "" {
		missing(t, RedisClusterURLEnv, "Redis Cluster (HERALD_TESTENV_REDIS_CLUSTER=1)")
	}
	return u
}

// RedisServer returns the path of redis-server, for a test that runs a Redis of its own to
// stop and start while it runs (the private one stays up for every other test). Without one on
// PATH the test skips locally and fails under CI=true.
func RedisServer(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "no redis-server on PATH: this test runs a Redis of its own; install Redis >= 7 (Debian: apt-get install redis-server)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// NewDatabase creates a fresh database on the private PostgreSQL and returns its URL. The
// database, and every replication slot in it, is dropped when the test ends, so tests can run in
// parallel without seeing each other's tables, publications or slots.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseWith(t, "")
}

// NewDatabaseWith is NewDatabase with options for CREATE DATABASE, e.g. "ENCODING 'LATIN1'
// LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0". options is SQL written by the test.
func NewDatabaseWith(t testing.TB, options string) string {
	t.Helper()
	base := PostgresURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "herald_test_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: connect to %s: %v", DatabaseURLEnv, err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, strings.TrimSpace("CREATE DATABASE "+name+" "+options)); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, base, name) })

	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", DatabaseURLEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

func dropDatabase(t testing.TB, base, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Logf("testenv: drop %s: %v", name, err)
		return
	}
	defer admin.Close(context.Background())
	// A walsender holds its slot until its backend is gone, and a slot keeps the database alive,
	// so: end the backends, then drop the slots, then the database.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _ = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
		_, err = admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, name)
		if err == nil {
			_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		}
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Logf("testenv: drop %s: %v", name, err)
	}
}

// Exec runs SQL statements against the database at url, failing the test on error.
func Exec(t testing.TB, url string, sql ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	defer conn.Close(context.Background())
	for _, s := range sql {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("testenv: %s: %v", s, err)
		}
	}
}

// Begin opens a transaction on the database at url, on a connection of its own, runs sql in
// it, and returns it open: a writer a test holds across something else. The test commits it,
// or it is rolled back, and its connection closed, when the test ends.
func Begin(t testing.TB, ctx context.Context, url string, sql ...string) pgx.Tx {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("testenv: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	for _, s := range sql {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("testenv: %s: %v", s, err)
		}
	}
	return tx
}

// SlotName is a replication slot name unique to the database at url: slots are global to a
// Postgres cluster, so tests running at once must not share one.
func SlotName(t testing.TB, url string) string {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", url, err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// TCPPair returns the two ends of a fresh loopback TCP connection, the accepted one first, both
// closed when t ends: for tests that need a real socket (a descriptor, kernel buffers) rather
// than net.Pipe.
func TCPPair(t testing.TB) (accepted, dialed *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a.(*net.TCPConn), d.(*net.TCPConn)
}
