package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/heraldrt/herald/internal/policy"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/server"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/testenv"
	"go.uber.org/goleak"
)

const subTestAPIKey = "sub-test-api-key-0123456789"

// noLeaks checks, after every other cleanup of t, that t left no goroutine behind.
func noLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// startNode runs an in-process node with anonymous connections and an API key.
func startNode(t *testing.T) (base string) {
	t.Helper()
	return startNodeWith(t, nil)
}

// startNodeWith runs an in-process node, streaming tables when cf is set.
func startNodeWith(t *testing.T, cf *changefeed.Config) (base string) {
	t.Helper()
	srv, err := server.New(server.Config{
		Listen:          "127.0.0.1:0",
		ShutdownTimeout: 5 * time.Second,
		APIKeys:         []string{subTestAPIKey},
		Auth:            auth.Config{AllowAnonymous: true},
		Session:         session.Config{MaxSubscriptions: 4},
		Changefeed:      cf,
		// Open to everyone, written out: a server without rules is closed.
		Policy: policy.Open(tablesOf(cf)...),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		for deadline := time.Now().Add(2 * time.Second); srv.Sessions() > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server Run: %v", err)
		}
	})
	select {
	case <-srv.Listening():
	case err := <-done:
		t.Fatalf("server Run: %v", err)
	}
	return srv.Addr()
}

// subProc is a herald sub running in-process.
type subProc struct {
	stdout, stderr *lockedBuffer
	cancel         context.CancelFunc
	done           chan error
}

func startSub(t *testing.T, args ...string) *subProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &subProc{stdout: &lockedBuffer{b: &bytes.Buffer{}}, stderr: &lockedBuffer{b: &bytes.Buffer{}}, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- runSub(ctx, args, p.stdout, p.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Error("herald sub did not return within 10s of Ctrl-C")
		}
		if t.Failed() {
			t.Logf("stderr of herald sub %v:\n%s", args, p.stderr.String())
		}
	})
	return p
}

func TestSubPrintsChannelMessages(t *testing.T) {
	noLeaks(t)
	addr := startNode(t)
	t.Setenv("HERALD_URL", "ws://"+addr) // the default of --url
	p := startSub(t, "--channel", "demo/chat", "--sub", "c1")
	waitUntil(t, "subscribed on stderr", 5*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), `subscribed "c1" to channel demo/chat`)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pos []client.Position
	for _, data := range []string{`{"text":"hello"}`, `{"text":"again"}`} {
		p, err := client.PublishHTTP(ctx, nil, "http://"+addr, subTestAPIKey, client.Publication{Channel: "demo/chat", Event: "say", Data: json.RawMessage(data)})
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	waitUntil(t, "two lines on stdout", 5*time.Second, func() bool { return strings.Count(p.stdout.String(), "\n") >= 2 })

	lines := strings.Split(strings.TrimSuffix(p.stdout.String(), "\n"), "\n")
	for i, l := range lines {
		var m struct {
			Type, Sub, Channel, Event string
			Pos                       client.Position
			Data                      json.RawMessage
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d is not JSON: %q", i, l)
		}
		if m.Type != "message" || m.Sub != "c1" || m.Channel != "demo/chat" || m.Event != "say" || m.Pos != pos[i] {
			t.Errorf("line %d = %s", i, l)
		}
	}
	if !strings.Contains(lines[0], `"data":{"text":"hello"}`) {
		t.Errorf("first line %s lacks the data", lines[0])
	}

	p.cancel() // Ctrl-C
	if err := <-p.done; !errors.Is(err, context.Canceled) {
		t.Errorf("after Ctrl-C runSub = %v, want context.Canceled (exit 0)", err)
	}
	p.done <- nil
}

// TestSubPattern: a pattern's subscribed carries no position (it spans channels), and herald
// sub takes it and prints every matching channel's messages.
func TestSubPattern(t *testing.T) {
	noLeaks(t)
	addr := startNode(t)
	p := startSub(t, "--url", "ws://"+addr, "--channel", "rooms/*", "--sub", "r")
	waitUntil(t, "subscribed on stderr", 5*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), `subscribed "r" to channel rooms/*`)
	})
	if !strings.Contains(p.stderr.String(), "cannot be resumed with --from") {
		t.Errorf("stderr = %q, want it to say a pattern has no position", p.stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ch := range []string{"rooms/1", "rooms/2", "lobby"} {
		if _, err := client.PublishHTTP(ctx, nil, "http://"+addr, subTestAPIKey, client.Publication{Channel: ch, Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "two lines on stdout", 5*time.Second, func() bool { return strings.Count(p.stdout.String(), "\n") >= 2 })
	lines := strings.Split(strings.TrimSuffix(p.stdout.String(), "\n"), "\n")
	for i, ch := range []string{"rooms/1", "rooms/2"} {
		if !strings.Contains(lines[i], `"channel":"`+ch+`"`) {
			t.Errorf("line %d = %s, want the message on %s", i, lines[i], ch)
		}
	}
	if len(lines) != 2 {
		t.Errorf("stdout has %d lines, want 2 (lobby does not match rooms/*): %q", len(lines), lines)
	}
}

func TestSubCountAndResync(t *testing.T) {
	noLeaks(t)
	addr := startNode(t)
	var out, errOut bytes.Buffer
	// A from in another epoch: the stream was reset since, so a resync comes first.
	err := runSub(context.Background(), []string{"--url", "http://" + addr, "--channel", "x", "--from", "gone:4", "--count", "1"}, &out, &errOut)
	if err != nil {
		t.Fatalf("runSub = %v; stderr:\n%s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), `{"type":"resync","sub":"sub",`) || !strings.Contains(out.String(), `"reason":"stream_reset"`) {
		t.Errorf("stdout = %q, want one resync line", out.String())
	}
	if !strings.Contains(errOut.String(), "re-read your view") {
		t.Errorf("stderr = %q, want the resync explained", errOut.String())
	}
}

func TestSubExitCodes(t *testing.T) {
	noLeaks(t)
	addr := startNode(t)
	t.Setenv("HERALD_URL", "")
	t.Setenv("HERALD_TOKEN", "")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no table or channel", []string{"sub"}, 2, "give one of --table and --channel"},
		{"both", []string{"sub", "--table", "public.items", "--channel", "a"}, 2, "give one of"},
		{"bad filter", []string{"sub", "--table", "public.items", "--filter", "{"}, 2, "not valid JSON"},
		{"event with a table", []string{"sub", "--table", "public.items", "--event", "e"}, 2, "--event goes with --channel"},
		{"from of the wrong kind", []string{"sub", "--channel", "a", "--from", "16/B374D848"}, 2, "table position"},
		{"bad from", []string{"sub", "--channel", "a", "--from", "nope"}, 2, "--from"},
		{"snapshot of a channel", []string{"sub", "--channel", "a", "--snapshot"}, 2, "--snapshot goes with --table"},
		{"snapshot with from", []string{"sub", "--table", "public.items", "--snapshot", "--from", "16/B374D848"}, 2, "give one of them"},
		{"unknown flag", []string{"sub", "--nope"}, 2, "flag provided but not defined"},
		{"refused subscription", []string{"sub", "--url", addr, "--table", "public.nope"}, 1, "what to do: fix the table name"},
		{"bad channel", []string{"sub", "--url", addr, "--channel", "a//b"}, 1, "bad_frame (400) field channel"},
		{"no server", []string{"sub", "--url", "ws://127.0.0.1:1", "--channel", "a"}, 1, "connect to ws://127.0.0.1:1"},
		{"auth refused", []string{"sub", "--url", addr, "--channel", "a", "--token", "not-a-jwt"}, 1, "4101 auth_failed (reauthenticate)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := run(tt.args, &out, &errOut); got != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", got, tt.code, errOut.String())
			}
			if !strings.Contains(errOut.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tt.stderr)
			}
			if out.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", out.String())
			}
		})
	}
}

func TestSubPrintsTableChanges(t *testing.T) {
	noLeaks(t)
	db := testenv.NewDatabase(t)
	testenv.Exec(t, db, `CREATE TABLE items (id int PRIMARY KEY, org_id text, title text)`, `ALTER TABLE items REPLICA IDENTITY FULL`)
	addr := startNodeWith(t, &changefeed.Config{DatabaseURL: db, Tables: []string{"public.items"}, Slot: slotFor(t, db),
		StatusInterval: 200 * time.Millisecond, SilenceTimeout: 5 * time.Second})
	waitUntil(t, "the node ready", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// A node that has routed no transaction has no position to start a subscription at.
	testenv.Exec(t, db, `INSERT INTO items VALUES (0, 'warm-up', '')`)
	var p *subProc
	waitUntil(t, "a live table subscription", 30*time.Second, func() bool {
		if p != nil {
			if strings.Contains(p.stderr.String(), "subscribed") {
				return true
			}
			select {
			case err := <-p.done: // refused or malformed: try again
				t.Logf("herald sub: %v", err)
				p.done <- err // for its cleanup
			default:
				return false
			}
		}
		p = startSub(t, "--url", addr, "--table", "public.items", "--filter", `{"eq":["org_id","acme"]}`, "--columns", "id,title", "--count", "2")
		return false
	})
	testenv.Exec(t, db, `INSERT INTO items VALUES (1, 'other', 'no'), (2, 'acme', 'yes')`, `UPDATE items SET title = 'yes!' WHERE id = 2`)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("herald sub: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("herald sub did not print two changes")
	}
	lines := strings.Split(strings.TrimSuffix(p.stdout.String(), "\n"), "\n")
	for i, want := range []string{`"op":"insert","table":"public.items","row":{"id":2,"title":"yes"}`, `"op":"update","table":"public.items","row":{"id":2,"title":"yes!"}`} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], `{"type":"change","sub":"sub","pos":"`) || !strings.Contains(lines[i], want) {
			t.Errorf("line %d of %q: want a change with %s", i, lines, want)
		}
	}

	// With --snapshot: the rows that match now, then live.
	s := startSub(t, "--url", addr, "--table", "public.items", "--snapshot", "--filter", `{"eq":["org_id","acme"]}`, "--columns", "id,title", "--count", "2")
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Fatalf("herald sub --snapshot: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("herald sub --snapshot did not print the rows and live")
	}
	lines = strings.Split(strings.TrimSuffix(s.stdout.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"type":"rows","sub":"sub","rows":[{"id":2,"title":"yes!"}]`) || !strings.HasPrefix(lines[1], `{"type":"live","sub":"sub","pos":"`) {
		t.Errorf("herald sub --snapshot printed %q, want the one matching row, then live", lines)
	}
	if !strings.Contains(s.stderr.String(), "with a snapshot") {
		t.Errorf("stderr %q does not say the subscription reads a snapshot", s.stderr.String())
	}
}

// slotFor is a replication slot name of the test's own: slots (and the leader lock named after
// one) are global to the PostgreSQL cluster that concurrent tests share. The fresh database's
// name is unique.
func slotFor(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// tablesOf is the tables cf streams; none without it.
func tablesOf(cf *changefeed.Config) []string {
	if cf == nil {
		return nil
	}
	return cf.Tables
}
