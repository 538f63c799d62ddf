package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

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
