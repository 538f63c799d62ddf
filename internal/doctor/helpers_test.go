package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A Redis Cluster client's topology refresh, scheduled by a command (a delay, then the
	// refresh, which may wait again before it retries), may still be pending when Close
	// returns; it ends on its own, holding nothing of the test's.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

// open is the start of a config that passes every config check: anonymous clients, loopback,
// and a channel rule, so a test's own keys decide what fails.
const open = `auth: {allow_anonymous: true}
policy:
  channels:
    "**": {subscribe: "true"}
`

// writeConfig writes body to a config file in a fresh directory and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs doctor on the config body and env, checks that every check has a known id and a
// status, that nothing not ok lacks a fix, and that both outputs show none of secrets.
func run(t *testing.T, body string, env []string, secrets ...string) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := Run(ctx, Config{Path: writeConfig(t, body), Env: env, Timeout: 30 * time.Second})
	for _, c := range r.Checks {
		if !slices.Contains(IDs, c.ID) {
			t.Errorf("check %q is not in IDs: add it there and to docs/OPERATIONS.md", c.ID)
		}
		switch c.Status {
		case OK:
		case Warn, Fail:
			if c.Fix == "" {
				t.Errorf("%s %s is %s without a fix: %s", c.ID, c.Subject, c.Status, c.Detail)
			}
		default:
			t.Errorf("%s has status %q", c.ID, c.Status)
		}
		if c.Detail == "" {
			t.Errorf("%s %s has no detail", c.ID, c.Subject)
		}
	}
	var text, lines bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&lines); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(text.String(), s) || strings.Contains(lines.String(), s) {
			t.Errorf("doctor's output shows the secret %q:\n%s", s, text.String())
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", text.String())
	}
	return r
}

// want requires exactly one check with id and subject, of status, whose fix names each of fix;
// and returns it.
func want(t *testing.T, r *Report, id, subject string, status Status, fix ...string) Check {
	t.Helper()
	var found []Check
	for _, c := range r.Checks {
		if c.ID == id && c.Subject == subject {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d checks %s %q, want one; report:\n%s", len(found), id, subject, text(r))
	}
	c := found[0]
	if c.Status != status {
		t.Errorf("%s %q is %s (%s), want %s", id, subject, c.Status, c.Detail, status)
	}
	for _, f := range fix {
		if !strings.Contains(c.Fix, f) {
			t.Errorf("%s %q: fix %q does not name %q", id, subject, c.Fix, f)
		}
	}
	return c
}

// none requires that no check has id.
func none(t *testing.T, r *Report, id string) {
	t.Helper()
	if got := r.Find(id, ""); len(got) > 0 {
		t.Errorf("%d checks %s, want none: %+v", len(got), id, got)
	}
}

func text(r *Report) string {
	var b bytes.Buffer
	_ = r.WriteText(&b)
	return b.String()
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

// jsonLines decodes WriteJSON's output, one object a line.
func jsonLines(t *testing.T, r *Report) []map[string]any {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}
