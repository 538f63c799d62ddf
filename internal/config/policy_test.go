package config

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/policy"
)

func TestPolicyErrors(t *testing.T) {
	tests := []struct {
		name       string
		file       string
		wantKey    string
		wantSource string
		want       []string
	}{
		{"unknown rule", "policy:\n  tables:\n    public.items:\n      rows: \"true\"\n",
			`policy.tables."public.items".rows`, "herald.yaml:4", []string{"unknown rule", "did you mean row?"}},
		{"channel rule on a table", "policy:\n  tables:\n    public.items:\n      row: \"true\"\n      publish: \"true\"\n",
			`policy.tables."public.items".publish`, "herald.yaml:5", []string{"subscribe, row, columns"}},
		{"syntax error in a block", "policy:\n  tables:\n    public.items:\n      row: |\n        row.org_id == auth.org_id &&\n          row.qty > > 2\n",
			`policy.tables."public.items".row`, "herald.yaml:6", []string{"at 2:"}},
		{"syntax error on one line", "policy:\n  channels:\n    rooms/*:\n      subscribe: auth.sub ==\n",
			`policy.channels."rooms/*".subscribe`, "herald.yaml:4", []string{"at 1:"}},
		{"channel rule type", "policy:\n  channels:\n    rooms/*:\n      publish: channel + 1 == 2\n",
			`policy.channels."rooms/*".publish`, "herald.yaml:4", []string{"no matching overload"}},
		{"no row rule", "policy:\n  tables:\n    public.items:\n      subscribe: \"true\"\n",
			`policy.tables."public.items".row`, "herald.yaml:3", []string{"no row rule", `row: "true"`}},
		{"tables not a mapping", "policy:\n  tables: [public.items]\n",
			"policy.tables", "herald.yaml:2", []string{"want a mapping of each table"}},
		{"rule not a string", "policy:\n  tables:\n    public.items:\n      row: [a]\n",
			`policy.tables."public.items".row`, "herald.yaml:4", []string{"want a rule"}},
		{"entry twice", "policy:\n  channels:\n    a: {subscribe: \"true\"}\n    a: {subscribe: \"true\"}\n",
			`policy.channels."a"`, "herald.yaml:4", []string{"set twice"}},
		{"bad pattern", "policy:\n  channels:\n    \"a/**/b\": {subscribe: \"true\"}\n",
			`policy.channels."a/**/b"`, "", []string{"not a channel pattern"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, tc.file), []string{anonymousEnv})
			e := asError(t, err)
			if e.Key != tc.wantKey {
				t.Errorf("Key = %q, want %q (%v)", e.Key, tc.wantKey, e)
			}
			if !strings.HasSuffix(e.Source, tc.wantSource) {
				t.Errorf("Source = %q, want it to end %q", e.Source, tc.wantSource)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Error(), w) {
					t.Errorf("%q does not contain %q", e.Error(), w)
				}
			}
		})
	}
}

// TestPolicyPrintsAsRead: the printed config (herald serve --print-config, herald dev) reads
// back as the same rules.
func TestPolicyPrintsAsRead(t *testing.T) {
	want := fullConfig()
	b, err := yaml.Marshal(want.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	got := Default()
	if err := got.decodeFile("printed.yaml", b); err != nil {
		t.Fatalf("the printed config does not read back: %v\n%s", err, b)
	}
	if d := cmp.Diff(want.PolicySection, got.PolicySection); d != "" {
		t.Errorf("policy after a round trip (-want +got):\n%s", d)
	}
	rules := got.Policy()
	if r := rules.Tables["public.orders"]; r.ColumnsRule == "" || r.Columns != nil {
		t.Errorf("public.orders columns = %+v, want the rule", r)
	}
	if _, err := policy.New(rules, got.PolicyConfig()); err != nil {
		t.Errorf("policy.New: %v", err)
	}
}

func TestPolicyRedactedIsACopy(t *testing.T) {
	c := fullConfig()
	r := c.Redacted()
	r.PolicySection.Tables["public.items"] = TablePolicy{Row: "false"}
	if c.PolicySection.Tables["public.items"].Row == "false" {
		t.Error("changing the redacted copy's rules changed the original")
	}
}

// TestDocsPolicySection keeps the Policy rules section's table to the rule names policy has.
func TestDocsPolicySection(t *testing.T) {
	lines := docSection(t, "Policy rules")
	rows := docRows(lines)
	for key, names := range map[string][]policy.RuleName{
		"policy.tables.<schema.table>": policy.TableRuleNames(),
		`policy.channels."<pattern>"`:  policy.ChannelRuleNames(),
	} {
		row, ok := rows[key]
		if !ok {
			t.Errorf("%s: Policy rules has no row for %s", configDoc, key)
			continue
		}
		var want []string
		for _, n := range names {
			want = append(want, string(n))
		}
		if got := strings.ReplaceAll(row[1], "`", ""); got != strings.Join(want, ", ") {
			t.Errorf("%s: %s holds %q, want %q", configDoc, key, got, strings.Join(want, ", "))
		}
	}
}

// yamlBlocks returns the ```yaml blocks of a markdown file that hold a policy: key.
func yamlBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var block []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "```yaml":
			in, block = true, nil
		case line == "```" && in:
			in = false
			if text := strings.Join(block, "\n"); strings.Contains(text, "policy:\n  tables:") || strings.Contains(text, "policy:\n  channels:") || strings.HasPrefix(text, "channels:\n  \"") {
				out = append(out, text)
			}
		case in:
			block = append(block, line)
		}
	}
	return out
}

// docTables are the tables the documented examples are written against: every column is text,
// but for the ones named here.
var docColumnTypes = map[string]uint32{"id": 20, "qty": 23, "total": 1700, "cost": 1700}

// TestPolicyDocExamples loads every policy example of docs/POLICY.md and docs/CONFIG.md and
// compiles its table rules against tables holding the columns the rules and lists name, so a
// documented rule that stopped compiling fails here.
func TestPolicyDocExamples(t *testing.T) {
	var blocks []string
	for _, path := range []string{"../../docs/POLICY.md", configDoc} {
		blocks = append(blocks, yamlBlocks(t, path)...)
	}
	if len(blocks) < 6 {
		t.Fatalf("found %d policy examples, want at least 6", len(blocks))
	}
	cols := regexp.MustCompile(`(?:row|old)\.([a-z_]+)|"([a-z_]+)"|\b([a-z_]+)\b`)
	for i, text := range blocks {
		if !strings.HasPrefix(text, "policy:") {
			text = "policy:\n" + indentBlock(text)
		}
		c := Default()
		c.AuthSection.AllowAnonymous = true
		if err := c.decodeFile("example.yaml", []byte(text)); err != nil {
			t.Errorf("example %d does not decode: %v\n%s", i, err, text)
			continue
		}
		if err := c.Validate(); err != nil {
			t.Errorf("example %d: %v\n%s", i, err, text)
			continue
		}
		p, err := policy.New(c.Policy(), c.PolicyConfig())
		if err != nil {
			t.Errorf("example %d: %v", i, err)
			continue
		}
		for name, tr := range c.PolicySection.Tables {
			// The table has every identifier its rules and lists name, so an unknown column
			// cannot be the fault; types and syntax can.
			seen := map[string]bool{}
			var table policy.Table
			for _, src := range append([]string{tr.Subscribe, tr.Row, tr.Columns.Rule}, tr.Columns.List...) {
				for _, m := range cols.FindAllStringSubmatch(src, -1) {
					n := m[1] + m[2] + m[3]
					if n == "" || seen[n] {
						continue
					}
					seen[n] = true
					oid, ok := docColumnTypes[n]
					if !ok {
						oid = 25
					}
					table.Columns = append(table.Columns, filter.Column{Name: n, OID: oid})
				}
			}
			if !seen["id"] {
				table.Columns = append(table.Columns, filter.Column{Name: "id", OID: 20})
			}
			table.Key, table.Identity = []string{"id"}, "FULL"
			if _, err := p.Table(name, table); err != nil {
				t.Errorf("example %d, table %s: %v", i, name, err)
			}
		}
	}
}

func indentBlock(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n")
}
