package layout

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/heraldrt/herald"

// imports lists each non-test package of the module with its direct imports.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		m[f[0]] = f[1:]
	}
	return m
}

func TestImportRules(t *testing.T) {
	all := imports(t)
	if len(all) < 5 {
		t.Fatalf("go list found %d packages; the module layout is not what this test expects", len(all))
	}
	for _, v := range violations(all) {
		t.Error(v)
	}
}

// TestImportRulesCatchViolations shows the rules are not vacuous: each rule catches the import
// it forbids.
func TestImportRulesCatchViolations(t *testing.T) {
	bad := map[string][]string{
		module + "/internal/change":              {"github.com/google/uuid"},
		module + "/internal/wire":                {"net/http", module + "/internal/delivery"},
		module + "/internal/router":              {"github.com/jackc/pglogrepl", "github.com/golang-jwt/jwt/v5", "github.com/redis/rueidis", module + "/internal/wire", module + "/internal/session"},
		module + "/internal/channel":             {module + "/internal/wire", module + "/internal/bus", module + "/internal/heraldv1"},
		module + "/internal/filter":              {module + "/internal/changefeed/pgvalue"},
		module + "/internal/transport/sse":       {module + "/internal/transport/websocket", "github.com/gobwas/ws"},
		module + "/internal/delivery":            {module + "/internal/wire"},
		module + "/internal/stream":              {module + "/internal/wire", "net"},
		module + "/internal/changefeed":          {"github.com/jackc/pglogrepl"},
		module + "/internal/store/redis":         {"github.com/redis/rueidis"},
		module + "/internal/session":             {module + "/internal/router", module + "/internal/wire"},
		module + "/internal/heraldv1":            {module + "/internal/transport/sse"},
		module + "/internal/transport/websocket": {module + "/internal/server", "github.com/gobwas/ws"},
		module + "/internal/policy":              {module + "/internal/router", module + "/internal/wire", "net"},
		module + "/internal/config":              {"github.com/google/cel-go/cel"},
		module + "/internal/presence":            {module + "/internal/wire", module + "/internal/session"},
		module + "/internal/problem":             {module + "/internal/config"},
		module + "/internal/doctor":              {"github.com/jackc/pgx/v5/pgconn", "github.com/redis/rueidis", module + "/internal/server"},
	}
	want := 31
	if got := len(violations(bad)); got != want {
		t.Errorf("violations found %d, want %d: %v", got, want, violations(bad))
	}
}

// The packages that write no network and hold no connection: pure values and algorithms.
var pure = map[string]bool{
	"internal/change": true, "internal/changefeed/pgvalue": true, "internal/wire": true, "internal/delivery": true,
	"internal/stream": true, "internal/fault": true, "internal/filter": true, "internal/policy": true,
	"internal/handoff": true,
}

// The producers: they make what subscriptions receive, and must know nothing of the protocol
// that carries it or the sessions that receive it (they hand stream items to a bus).
var producers = map[string]bool{"internal/router": true, "internal/channel": true, "internal/changefeed": true, "internal/bus": true, "internal/presence": true}

// The protocols: what a client's frames mean and how the server's are written. herald.v1 is
// wire (its frames) and heraldv1 (its commands on a session).
var protocols = map[string]bool{"internal/wire": true, "internal/heraldv1": true}

// The transports: each carries sessions over one kind of connection. What they share (the
// heartbeat's timer wheel) sits beside them, not in one of them.
var transports = map[string]bool{"internal/transport/websocket": true, "internal/transport/sse": true}

// Whose imports point which way. Data flows changefeed -> router -> bus -> session -> transport;
// no package imports one downstream of it, and the protocol (wire, and heraldv1 over the
// session core) is known only at the edge.
var forbidden = []struct {
	from, to, why string
}{
	{"internal/stream", "internal/wire", "the stream's values are protocol-neutral"},
	{"internal/delivery", "internal/wire", "the lanes queue bytes and know no protocol"},
	{"internal/delivery", "internal/session", "the lanes are below the session"},
	{"internal/wire", "internal/delivery", "the protocol does not know how connections queue"},
	{"internal/wire", "internal/session", "the protocol does not know sessions"},
	{"internal/filter", "internal/changefeed", "the filter language does not reach into the changefeed"},
	{"internal/policy", "internal/router", "the policy decides; the router asks it, never the other way"},
	{"internal/policy", "internal/wire", "the policy knows no protocol"},
	{"internal/policy", "internal/session", "the policy knows no sessions"},
	{"internal/session", "internal/wire", "the session core is protocol-neutral: herald.v1 is internal/heraldv1's, over the core"},
	{"internal/session", "internal/heraldv1", "a protocol is built over the session core, not under it"},
	{"internal/heraldv1", "internal/transport", "a protocol does not know what carries it"},
	{"internal/heraldv1", "internal/server", "nothing imports the composition root"},
	{"internal/doctor", "internal/server", "nothing imports the composition root: doctor reads what the server would be built from"},
	{"internal/session", "internal/router", "sessions see producers only through interfaces"},
	{"internal/session", "internal/channel", "sessions see producers only through interfaces"},
	{"internal/session", "internal/presence", "sessions see producers only through interfaces"},
	{"internal/session", "internal/transport", "the session does not know what carries it"},
	{"internal/session", "internal/server", "nothing imports the composition root"},
	{"internal/transport", "internal/server", "nothing imports the composition root"},
	{"internal/router", "internal/bus", "producers declare the bus they need; only the server picks one"},
	{"internal/channel", "internal/bus", "producers declare the bus they need; only the server picks one"},
}

func violations(all map[string][]string) []string {
	var out []string
	for pkg, deps := range all {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		for _, d := range deps {
			drel := strings.TrimPrefix(strings.TrimPrefix(d, module), "/")
			own := strings.HasPrefix(d, module+"/")
			switch {
			case rel == "internal/change" && strings.Contains(strings.Split(d, "/")[0], "."):
				out = append(out, fmt.Sprintf("%s imports %s: it is a leaf and may import only the standard library", rel, d))
			case (rel == "internal/fault" || rel == "internal/problem") && strings.Contains(strings.Split(d, "/")[0], "."):
				out = append(out, fmt.Sprintf("%s imports %s: it is a leaf and may import only the standard library", rel, d))
			case rel == "internal/stream" && strings.Contains(strings.Split(d, "/")[0], ".") && d != module+"/internal/change":
				out = append(out, fmt.Sprintf("%s imports %s: it is pure and may import only the standard library and internal/change", rel, d))
			case pure[rel] && (d == "net" || d == "net/http" || strings.HasPrefix(d, "github.com/jackc/") || strings.HasPrefix(d, "github.com/redis/")):
				out = append(out, fmt.Sprintf("%s imports %s: it is pure and does no network I/O", rel, d))
			case strings.HasPrefix(d, "github.com/jackc/pglogrepl") && rel != "internal/changefeed":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/changefeed speaks the replication protocol", rel, d))
			case rel == "internal/doctor" && strings.HasPrefix(d, "github.com/jackc/"):
				out = append(out, fmt.Sprintf("%s imports %s: doctor asks the packages that own each service (changefeed's Inspector, store/redis) and speaks no database protocol itself", rel, d))
			case strings.HasPrefix(d, "github.com/golang-jwt/") && rel != "internal/auth":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/auth verifies tokens", rel, d))
			case strings.HasPrefix(d, "github.com/redis/") && rel != "internal/store/redis":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/store/redis talks to Redis", rel, d))
			case strings.HasPrefix(d, "github.com/google/cel-go") && rel != "internal/policy":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/policy compiles and runs rules", rel, d))
			case strings.HasPrefix(d, "github.com/gobwas/") && rel != "internal/transport/websocket":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/transport/websocket frames the server's WebSocket", rel, d))
			case own && producers[rel] && (protocols[drel] || drel == "internal/session" || strings.HasPrefix(drel, "internal/transport")):
				out = append(out, fmt.Sprintf("%s imports %s: a producer hands stream items on and knows no protocol or session", rel, d))
			case own && transports[rel] && transports[drel] && rel != drel:
				out = append(out, fmt.Sprintf("%s imports %s: transports never import each other; what they share is in internal/session", rel, d))
			case own:
				for _, f := range forbidden {
					if under(rel, f.from) && under(drel, f.to) {
						out = append(out, fmt.Sprintf("%s imports %s: %s", rel, d, f.why))
					}
				}
			}
		}
	}
	return out
}

// under reports whether package rel is dir or below it.
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }
