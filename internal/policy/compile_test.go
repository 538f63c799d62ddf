package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestCompileErrorsHavePositions(t *testing.T) {
	tests := []struct {
		name       string
		rules      TableRules
		wantRule   string
		line, col  int
		wantDetail string
		wantFix    string
	}{
		{"unknown column", TableRules{Row: "row.org_id == auth.org_id && row.qyt > 2"},
			`policy.tables."public.items".row`, 1, 33, `the table has no column "qyt"`, `did you mean "qty"?`},
		{"unknown column of old", TableRules{Row: "true &&\n  old.orgid == auth.org_id"},
			`policy.tables."public.items".row`, 2, 6, `the table has no column "orgid"`, `did you mean "org_id"?`},
		{"unknown column in has", TableRules{Row: "has(row.nope)"},
			`policy.tables."public.items".row`, 1, 4, `no column "nope"`, "the table's columns are: id, org_id"},
		{"unknown variable", TableRules{Row: "rows.org_id == auth.org_id"},
			`policy.tables."public.items".row`, 1, 1, "rows is not a variable of this rule", "did you mean row?"},
		{"syntax", TableRules{Row: "row.org_id == "},
			`policy.tables."public.items".row`, 1, 15, "Syntax error", "rule language is CEL"},
		{"type", TableRules{Row: `row.qty > "5"`},
			`policy.tables."public.items".row`, 1, 9, "no matching overload", "docs/POLICY.md#types"},
		{"not a bool", TableRules{Row: "row.title"},
			`policy.tables."public.items".row`, 1, 1, "not true or false", "write a condition"},
		{"subscribe reads row", TableRules{Subscribe: "row.org_id == auth.org_id", Row: "true"},
			`policy.tables."public.items".subscribe`, 1, 1, "row is not a variable of this rule", "reads auth, table, filter, columns"},
		{"columns list literal", TableRules{Row: "true", ColumnsRule: `auth.admin == true ? ["id", "titel"] : ["id"]`},
			`policy.tables."public.items".columns`, 1, 29, `no column "titel"`, `did you mean "title"?`},
		{"columns rule type", TableRules{Row: "true", ColumnsRule: `1`},
			`policy.tables."public.items".columns`, 1, 1, "not a list of column names", ""},
		{"shadowing", TableRules{Row: `auth.orgs.exists(row, row == "a")`},
			`policy.tables."public.items".row`, 1, 17, `binds "row"`, "name the macro's variable otherwise"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Rules{Tables: map[string]TableRules{"public.items": tc.rules}}, Config{})
			if err == nil {
				_, err = p.Table("public.items", items)
			}
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *CompileError", err)
			}
			if ce.Stage != "policy" || ce.Rule != tc.wantRule {
				t.Errorf("stage, rule = %q, %q; want policy, %q", ce.Stage, ce.Rule, tc.wantRule)
			}
			if ce.Line != tc.line || ce.Column != tc.col {
				t.Errorf("position = %d:%d, want %d:%d (%v)", ce.Line, ce.Column, tc.line, tc.col, ce)
			}
			if !strings.Contains(ce.Detail, tc.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", ce.Detail, tc.wantDetail)
			}
			if !strings.Contains(ce.Fix, tc.wantFix) {
				t.Errorf("fix = %q, want it to contain %q", ce.Fix, tc.wantFix)
			}
			if !strings.Contains(ce.Error(), tc.wantRule) {
				t.Errorf("Error() = %q does not name the rule", ce.Error())
			}
		})
	}
}

func TestEntryErrors(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		want  string
	}{
		{"no row rule", Rules{Tables: map[string]TableRules{"public.items": {Subscribe: "true"}}}, "no row rule"},
		{"unqualified table", Rules{Tables: map[string]TableRules{"items": {Row: "true"}}}, "schema.table"},
		{"list and rule", Rules{Tables: map[string]TableRules{"public.items": {Row: "true", Columns: []string{"id"}, ColumnsRule: `["id"]`}}}, "both a list and a rule"},
		{"empty column", Rules{Tables: map[string]TableRules{"public.items": {Row: "true", Columns: []string{""}}}}, "is empty"},
		{"table syntax checked without columns", Rules{Tables: map[string]TableRules{"public.items": {Row: "row.a =="}}}, "Syntax error"},
		{"bad pattern", Rules{Channels: map[string]ChannelRules{"docs/**/x": {Subscribe: "true"}}}, "not a channel pattern"},
		{"channel type-checked", Rules{Channels: map[string]ChannelRules{"docs/*": {Publish: "channel == 1"}}}, "no matching overload"},
		{"channel variable", Rules{Channels: map[string]ChannelRules{"docs/*": {Subscribe: "event == 'x'"}}}, "event is not a variable"},
		{"too long", Rules{Channels: map[string]ChannelRules{"docs/*": {Subscribe: "true" + strings.Repeat(" ", MaxRuleBytes)}}}, "more than 4096"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.rules)
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *CompileError", err)
			}
			if !strings.Contains(ce.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q", ce.Error(), tc.want)
			}
		})
	}
}

func TestTableErrors(t *testing.T) {
	tests := []struct {
		name  string
		rules TableRules
		table Table
		want  []string
	}{
		{"old image lacks a column under DEFAULT",
			TableRules{Row: "row.org_id == auth.org_id"},
			Table{Columns: items.Columns, Key: []string{"id"}, Identity: "DEFAULT"},
			[]string{"reads org_id", "REPLICA IDENTITY DEFAULT", "ALTER TABLE public.items REPLICA IDENTITY FULL;"}},
		{"old read whole under USING INDEX",
			TableRules{Row: "old == null || row.id == old.id"},
			Table{Columns: items.Columns, Key: []string{"id"}, Identity: "USING INDEX"},
			[]string{"reads org_id, title", "REPLICA IDENTITY USING INDEX"}},
		{"unknown column in the list",
			TableRules{Row: "true", Columns: []string{"id", "nope"}}, items,
			[]string{`policy.tables."public.items".columns[1]`, `no column "nope"`}},
		{"the list leaves out the key",
			TableRules{Row: "true", Columns: []string{"title"}}, items,
			[]string{"leaves out the key column id"}},
		{"no key under NOTHING",
			TableRules{Row: "row.org_id == auth.org_id"}, Table{Columns: items.Columns, Identity: "NOTHING"},
			[]string{"reads org_id", "REPLICA IDENTITY FULL;"}},
		{"unknown identity",
			TableRules{Row: "true"}, Table{Columns: items.Columns, Key: []string{"id"}},
			[]string{"replica identity \"\" is not one Postgres has"}},
		{"no such table",
			TableRules{Row: "true"}, Table{},
			[]string{"streams no such table"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Rules{Tables: map[string]TableRules{"public.items": tc.rules}}, Config{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Table("public.items", tc.table)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestKeyOnlyRuleUnderDefault(t *testing.T) {
	p, err := New(Rules{Tables: map[string]TableRules{"public.items": {Row: "row.id % 2 == 0 && auth.sub != ''"}}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Table("public.items", Table{Columns: items.Columns, Key: []string{"id"}, Identity: "DEFAULT"}); err != nil {
		t.Errorf("a rule over the key under DEFAULT: %v, want no error", err)
	}
}

func TestAnalysis(t *testing.T) {
	tests := []struct {
		rule      string
		claims    string
		cols      string
		index     string
		indexPath string
	}{
		{"row.org_id == auth.org_id", "auth.org_id", "org_id", "org_id", "auth.org_id"},
		{"auth.org_id == row.org_id && (row.owner == auth.sub || auth.role == 'admin')", "auth.org_id auth.role auth.sub", "org_id owner", "org_id", "auth.org_id"},
		{"row.org_id == auth.app_metadata.tenant && auth.app_metadata.tier > 1", "auth.app_metadata.tenant auth.app_metadata.tier", "org_id", "org_id", "auth.app_metadata.tenant"},
		{"auth.app_metadata['x-t'] == row.title && has(auth.app_metadata)", "auth.app_metadata", "title", "title", `auth.app_metadata["x-t"]`},
		{"row.title in auth.titles", "auth.titles", "title", "", ""},
		{"auth.roles.exists(r, r == row.title)", "auth.roles", "title", "", ""},
		{"auth.roles[0] == 'a' && row.qty > 0", "auth.roles", "qty", "", ""},
		{"auth == {'a': 1} || row.org_id == 'x'", "auth", "org_id", "", ""},
		{"row.org_id == auth.org_id || row.title == 'public'", "auth.org_id", "org_id title", "", ""},
		{"row.price == auth.p", "auth.p", "price", "", ""}, // a double column does not index
		{"row == old", "", "id org_id title qty price secret updated_at tags meta code owner done", "", ""},
		{"true", "", "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			r := tablePolicy(t, TableRules{Row: tc.rule}).Row()
			var got []string
			for _, p := range r.Claims() {
				got = append(got, p.String())
			}
			if g := strings.Join(got, " "); g != tc.claims {
				t.Errorf("claims = %q, want %q", g, tc.claims)
			}
			if g := strings.Join(r.Columns(), " "); g != tc.cols {
				t.Errorf("columns = %q, want %q", g, tc.cols)
			}
			col, path, ok := r.IndexColumn()
			if tc.index == "" {
				if ok {
					t.Errorf("indexed on %s = %s, want no index", col, path)
				}
				return
			}
			if !ok || col != tc.index || path.String() != tc.indexPath {
				t.Errorf("index = %q %q %v, want %q %q", col, path, ok, tc.index, tc.indexPath)
			}
		})
	}
}

// TestCostTracking: the cost bound is enforced on rules with a comprehension, the only ones
// whose work grows with the data, and only on them.
func TestCostTracking(t *testing.T) {
	for rule, want := range map[string]bool{
		"row.org_id == auth.org_id":                        false,
		"row.title.startsWith(auth.prefix) && row.qty > 2": false,
		"auth.orgs.exists(o, o == row.org_id)":             true,
		"row.tags.all(t, t != 'x')":                        true,
		"[1, 2].map(x, x * 2).size() == 2":                 true,
	} {
		if got := tablePolicy(t, TableRules{Row: rule}).Row().rule.tracked; got != want {
			t.Errorf("%s: tracked = %v, want %v", rule, got, want)
		}
	}
}
