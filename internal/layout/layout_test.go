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

// TestImportRulesCatchViolations shows the rules are not vacuous.
func TestImportRulesCatchViolations(t *testing.T) {
	bad := map[string][]string{
		module + "/internal/change":      {"github.com/google/uuid"},
		module + "/internal/wire":        {"net/http"},
		module + "/internal/router":      {"github.com/jackc/pglogrepl", "github.com/golang-jwt/jwt/v5", "github.com/redis/rueidis"},
		module + "/internal/changefeed":  {"github.com/jackc/pglogrepl"},
		module + "/internal/store/redis": {"github.com/redis/rueidis"},
	}
	if got := len(violations(bad)); got != 5 {
		t.Errorf("violations found %d, want 5: %v", got, violations(bad))
	}
}

func violations(all map[string][]string) []string {
	var out []string
	pure := map[string]bool{"internal/change": true, "internal/changefeed/pgvalue": true, "internal/wire": true, "internal/delivery": true}
	for pkg, deps := range all {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		for _, d := range deps {
			switch {
			case rel == "internal/change" && strings.Contains(strings.Split(d, "/")[0], "."):
				out = append(out, fmt.Sprintf("%s imports %s: it is a leaf and may import only the standard library", rel, d))
			case pure[rel] && (d == "net" || d == "net/http" || strings.HasPrefix(d, "github.com/jackc/") || strings.HasPrefix(d, "github.com/redis/")):
				out = append(out, fmt.Sprintf("%s imports %s: it is pure and does no network I/O", rel, d))
			case strings.HasPrefix(d, "github.com/jackc/pglogrepl") && rel != "internal/changefeed":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/changefeed speaks the replication protocol", rel, d))
			case strings.HasPrefix(d, "github.com/golang-jwt/") && rel != "internal/auth":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/auth verifies tokens", rel, d))
			case strings.HasPrefix(d, "github.com/redis/") && rel != "internal/store/redis":
				out = append(out, fmt.Sprintf("%s imports %s: only internal/store/redis talks to Redis", rel, d))
			}
		}
	}
	return out
}
