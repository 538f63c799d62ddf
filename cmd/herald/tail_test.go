package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
)

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
)

// herald builds the binary once per test run.
func herald(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtPath = filepath.Join(dir, "herald")
		out, err := exec.Command("go", "build", "-o", builtPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtPath
}

// tailProc is a running `herald tail` whose stdout goes to a file.
type tailProc struct {
	cmd    *exec.Cmd
	out    string
	stderr *lockedBuffer
	done   chan error
}

func startTail(t *testing.T, args ...string) *tailProc {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.jsonl")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := &tailProc{out: out, stderr: &lockedBuffer{b: &bytes.Buffer{}}, done: make(chan error, 1)}
	p.cmd = exec.Command(herald(t), append([]string{"tail"}, args...)...)
	p.cmd.Stdout = f
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
		if t.Failed() {
			t.Logf("stderr of tail %v:\n%s", args, p.stderr.String())
		}
	})
	return p
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type line struct {
	Op    string          `json:"op"`
	LSN   string          `json:"lsn"`
	After json.RawMessage `json:"after"`
}

// lines reads the complete lines a tail printed; a trailing partial line is left out.
func (p *tailProc) lines(t *testing.T) []line {
	t.Helper()
	b, err := os.ReadFile(p.out)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	var out []line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("tail printed a line that is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func ids(t *testing.T, ls []line) []int {
	t.Helper()
	var out []int
	for _, l := range ls {
		var row struct{ ID int }
		if err := json.Unmarshal(l.After, &row); err != nil {
			t.Fatalf("after %s: %v", l.After, err)
		}
		out = append(out, row.ID)
	}
	return out
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// slotActive reports whether a tail holds slot and the slot decodes every commit from now on. A
// slot is already active while CREATE_REPLICATION_SLOT waits for a consistent point, and a
// transaction that commits before that point is never decoded; confirmed_flush_lsn is NULL
// until it is reached.
func slotActive(t *testing.T, conn *pgx.Conn, slot string) bool {
	var active bool
	err := conn.QueryRow(context.Background(), `SELECT coalesce(bool_or(active AND confirmed_flush_lsn IS NOT NULL), false) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
	if err != nil {
		t.Fatal(err)
	}
	return active
}

// itemsDB is a fresh database with a table items(id, v), a connection to it, and the slot name
// its tails use.
func itemsDB(t *testing.T) (url string, conn *pgx.Conn, slot string) {
	t.Helper()
	url = testenv.NewDatabase(t)
	testenv.Exec(t, url, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return url, conn, testenv.SlotName(t, url)
}

func TestTailKilledMidStreamResumesWithNoGapAndNoDuplicate(t *testing.T) {
	ctx := context.Background()
	url, conn, slot := itemsDB(t)
	args := []string{"--database-url", url, "--table", "items", "--slot", slot, "--log-level", "warn"}
	first := startTail(t, args...)
	waitUntil(t, "the first tail to stream", 30*time.Second, func() bool { return slotActive(t, conn, slot) })

	const total = 3000
	written := make(chan error, 1)
	go func() {
		for i := 1; i <= total; i++ {
			if _, err := conn.Exec(ctx, `INSERT INTO items VALUES ($1, repeat('v', 40))`, i); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	// Kill it hard while rows are still being written and printed.
	waitUntil(t, "the first tail to print", 30*time.Second, func() bool { return len(first.lines(t)) >= 300 })
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil
	before := first.lines(t)
	if len(before) >= total {
		t.Fatalf("the first tail printed all %d rows before it was killed; the test killed nothing mid-stream", total)
	}
	last := before[len(before)-1].LSN

	second := startTail(t, append(args, "--from", last)...)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second tail to print the last row", 60*time.Second, func() bool {
		got := second.lines(t)
		return len(got) > 0 && ids(t, got[len(got)-1:])[0] == total
	})
	time.Sleep(200 * time.Millisecond)
	all := append(ids(t, before), ids(t, second.lines(t))...)
	if len(all) != total {
		t.Errorf("printed %d rows across the kill, want exactly %d", len(all), total)
	}
	for i, id := range all {
		if id != i+1 {
			t.Fatalf("row %d of the combined output is id %d, want %d: a gap or a duplicate at the kill (first tail printed %d rows, resumed after %s)", i, id, i+1, len(before), last)
		}
	}
	t.Logf("killed after %d rows; resumed after %s with no gap and no duplicate", len(before), last)
}

func TestTailStandbyTakesOverWhenTheLeaderIsKilled(t *testing.T) {
	ctx := context.Background()
	url, conn, slot := itemsDB(t)
	args := []string{"--database-url", url, "--table", "items", "--slot", slot, "--log-level", "info"}
	a := startTail(t, args...)
	waitUntil(t, "one tail to stream", 30*time.Second, func() bool { return slotActive(t, conn, slot) })
	b := startTail(t, args...)
	waitUntil(t, "the second tail to stand by", 30*time.Second, func() bool {
		return strings.Contains(b.stderr.String(), "standing by")
	})
	if _, err := conn.Exec(ctx, `INSERT INTO items VALUES (1, 'x')`); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the leader to print row 1", 30*time.Second, func() bool { return len(a.lines(t)) == 1 })
	if n := len(b.lines(t)); n != 0 {
		t.Fatalf("the standby printed %d lines while the leader lived", n)
	}

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for i := 2; i <= 5; i++ {
		if _, err := conn.Exec(ctx, `INSERT INTO items VALUES ($1, 'x')`, i); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the standby to take over and print rows 2..5", 30*time.Second, func() bool {
		got := b.lines(t)
		return len(got) > 0 && ids(t, got[len(got)-1:])[0] == 5
	})
	got := ids(t, b.lines(t))
	// The killed leader may not have confirmed row 1 before it died; the standby then prints it
	// again. Rows 2..5 must all be there, once each, in order.
	if len(got) > 0 && got[0] == 1 {
		got = got[1:]
	}
	if fmt.Sprint(got) != "[2 3 4 5]" {
		t.Errorf("standby printed ids %v, want [2 3 4 5]", got)
	}
	t.Logf("standby took over and printed row 5 %s after the leader was killed", time.Since(killed).Round(time.Millisecond))
}

func TestTailUntilExitsOnceThePositionIsPrinted(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	slot := testenv.SlotName(t, url)
	// The slot exists before the rows, so the rows are in its stream.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := exec.CommandContext(ctx, herald(t), "tail", "--database-url", url, "--table", "items", "--slot", slot, "--quiet", "--log-level", "warn", "--until", "0/1")
	if out, err := first.CombinedOutput(); err != nil {
		t.Fatalf("creating the slot: %v\n%s", err, out)
	}
	testenv.Exec(t, url, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 500) g`)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var end string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	cmd := exec.CommandContext(ctx, herald(t), "tail", "--database-url", url, "--table", "items", "--slot", slot, "--until", end, "--log-level", "warn")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tail --until: %v", err)
	}
	if n := strings.Count(string(out), "\n"); n != 500 {
		t.Errorf("printed %d lines, want 500", n)
	}
	t.Logf("tail --until returned after %s", time.Since(started).Round(time.Millisecond))
}
