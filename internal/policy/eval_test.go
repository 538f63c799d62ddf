package policy

import (
	"fmt"
	"strings"
	"testing"
)

func TestRowDecisions(t *testing.T) {
	const full = `{"id":1,"org_id":"acme","title":"a","qty":5,"price":19.99,"secret":"s","updated_at":"2025-01-02T03:04:05.000Z","tags":["x","y"],"meta":{"level":3},"code":"AB   ","owner":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","done":false}`
	tests := []struct {
		name   string
		rule   string
		row    string
		old    string // "" for none
		claims string
		want   Decision
		errHas string
	}{
		{"tenant allowed", "row.org_id == auth.org_id", full, "", `{"org_id":"acme"}`, Allow, ""},
		{"tenant denied", "row.org_id == auth.org_id", full, "", `{"org_id":"other"}`, Deny, ""},
		{"missing claim is an error", "row.org_id == auth.org_id", full, "", `{}`, Error, "org_id"},
		{"missing claim under a false conjunct", "row.org_id == 'nope' && row.org_id == auth.org_id", full, "", `{}`, Deny, ""},
		{"int column against a JSON number", "row.qty == auth.n", full, "", `{"n":5}`, Allow, ""},
		{"int ordering against a JSON number", "row.qty < auth.n", full, "", `{"n":5.5}`, Allow, ""},
		{"numeric as double", "row.price > 19.5", full, "", `{}`, Allow, ""},
		{"timestamp", "row.updated_at > timestamp('2025-01-01T00:00:00Z')", full, "", `{}`, Allow, ""},
		{"array", "'y' in row.tags", full, "", `{}`, Allow, ""},
		{"jsonb", "row.meta.level >= 3", full, "", `{}`, Allow, ""},
		{"bpchar without padding", "row.code == 'AB'", full, "", `{}`, Allow, ""},
		{"uuid as string", "row.owner == auth.sub", full, "", `{"sub":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}`, Allow, ""},
		{"bool", "!row.done", full, "", `{}`, Allow, ""},
		{"null equals null", "row.title == null", `{"id":1,"title":null}`, "", `{}`, Allow, ""},
		{"null compared is an error", "row.qty > 1", `{"id":1,"qty":null}`, "", `{}`, Error, "overload"},
		{"null against a string is false", "row.title == auth.sub", `{"id":1,"title":null}`, "", `{"sub":"u"}`, Deny, ""},
		{"absent column is an error, not null", "row.title == null", `{"id":1}`, "", `{}`, Error, "absent"},
		{"has on an absent column", "has(row.title)", `{"id":1}`, "", `{}`, Deny, ""},
		{"has on a present column", "has(row.title)", `{"id":1,"title":null}`, "", `{}`, Allow, ""},
		{"old is null for an insert", "old == null", full, "", `{}`, Allow, ""},
		{"reading old of an insert is an error", "old.org_id == 'acme'", full, "", `{}`, Error, "null"},
		{"old of an update", "old.org_id != row.org_id", full, `{"id":1,"org_id":"was"}`, `{}`, Allow, ""},
		{"overflow is an error", "row.qty + 9223372036854775807 > 0", full, "", `{}`, Error, "overflow"},
		{"infinity does not read", "row.updated_at > timestamp('2025-01-01T00:00:00Z')", `{"id":1,"updated_at":"infinity"}`, "", `{}`, Error, "outside the times"},
		{"a value of the wrong shape", "row.qty == 1", `{"id":1,"qty":"many"}`, "", `{}`, Error, "cannot be read"},
		{"dyn that is not a bool", "auth.flag", full, "", `{"flag":"yes"}`, Error, "not true or false"},
		{"cost bound", "auth.xs.all(a, auth.xs.all(b, auth.xs.all(c, a + b + c >= 0)))", full, "", `{"xs":[` + strings.Repeat("1,", 99) + `1]}`, Error, "cost"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tablePolicy(t, TableRules{Row: tc.rule}).Row()
			img := r.Decode(row(t, tc.row))
			var old *Image
			if tc.old != "" {
				old = r.Decode(row(t, tc.old))
			}
			got, err := r.Visible(img, old, claims(t, tc.claims))
			if got != tc.want {
				t.Fatalf("Visible = %v (%v), want %v", got, err, tc.want)
			}
			if (err != nil) != (got == Error) {
				t.Errorf("decision %v with error %v: an error comes with Error and only then", got, err)
			}
			if tc.errHas != "" && !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error %q does not contain %q", err, tc.errHas)
			}
			if err != nil && !strings.Contains(err.Error(), `policy.tables."public.items".row`) {
				t.Errorf("error %q does not name the rule", err)
			}
		})
	}
}

func TestSubscribeDecisions(t *testing.T) {
	tp := tablePolicy(t, TableRules{
		Subscribe: `table == "public.items" && auth.role in ["member", "admin"] && (columns.size() == 0 || !("secret" in columns))`,
		Row:       "true",
	})
	tests := []struct {
		name    string
		claims  string
		filter  string
		columns []string
		want    Decision
	}{
		{"member, every column", `{"role":"member"}`, "", nil, Allow},
		{"member, no secret", `{"role":"member"}`, `{"eq":["org_id","acme"]}`, []string{"id", "title"}, Allow},
		{"member asks for the secret", `{"role":"member"}`, "", []string{"id", "secret"}, Deny},
		{"guest", `{"role":"guest"}`, "", nil, Deny},
		{"no role", `{}`, "", nil, Error},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f []byte
			if tc.filter != "" {
				f = []byte(tc.filter)
			}
			got, err := tp.Subscribe(claims(t, tc.claims), f, tc.columns)
			if got != tc.want {
				t.Errorf("Subscribe = %v (%v), want %v", got, err, tc.want)
			}
		})
	}

	filtered := tablePolicy(t, TableRules{Subscribe: `filter != null && filter.eq[0] == "org_id" && filter.eq[1] == auth.org_id`, Row: "true"})
	for _, tc := range []struct {
		filter string
		want   Decision
	}{
		{`{"eq":["org_id","acme"]}`, Allow},
		{`{"eq":["org_id","other"]}`, Deny},
		{``, Deny},
	} {
		var f []byte
		if tc.filter != "" {
			f = []byte(tc.filter)
		}
		if got, err := filtered.Subscribe(claims(t, `{"org_id":"acme"}`), f, nil); got != tc.want {
			t.Errorf("filter %s: Subscribe = %v (%v), want %v", tc.filter, got, err, tc.want)
		}
	}

	if got, _ := tablePolicy(t, TableRules{Row: "false"}).Subscribe(claims(t, `{}`), nil, nil); got != Allow {
		t.Errorf("no subscribe rule: %v, want allow (the row rule decides)", got)
	}
	var closed *TablePolicy
	if got, _ := closed.Subscribe(claims(t, `{}`), nil, nil); got != Deny {
		t.Errorf("closed table: %v, want deny", got)
	}
	p, _ := New(Rules{}, Config{})
	if tp, err := p.Table("public.items", items); tp != nil || err != nil {
		t.Errorf("a table without rules: %v, %v; want nil, nil (closed)", tp, err)
	}
}

func TestColumns(t *testing.T) {
	tests := []struct {
		name   string
		rules  TableRules
		claims string
		want   string
		dec    Decision
	}{
		{"every column", TableRules{Row: "true"}, `{}`, "id org_id title qty price secret updated_at tags meta code owner done", Allow},
		{"a list, in table order", TableRules{Row: "true", Columns: []string{"title", "id"}}, `{}`, "id title", Allow},
		{"a rule", TableRules{Row: "true", ColumnsRule: `auth.role == "admin" ? ["id", "title", "secret"] : ["id", "title"]`}, `{"role":"admin"}`, "id title secret", Allow},
		{"a rule, not admin", TableRules{Row: "true", ColumnsRule: `auth.role == "admin" ? ["id", "title", "secret"] : ["id", "title"]`}, `{"role":"user"}`, "id title", Allow},
		{"a rule from a claim", TableRules{Row: "true", ColumnsRule: `auth.cols`}, `{"cols":["id","qty"]}`, "id qty", Allow},
		{"a claim naming no column", TableRules{Row: "true", ColumnsRule: `auth.cols`}, `{"cols":["id","nope"]}`, "", Error},
		{"a claim leaving out the key", TableRules{Row: "true", ColumnsRule: `auth.cols`}, `{"cols":["qty"]}`, "", Error},
		{"a claim of the wrong type", TableRules{Row: "true", ColumnsRule: `auth.cols`}, `{"cols":"id"}`, "", Error},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, dec, err := tablePolicy(t, tc.rules).Columns(claims(t, tc.claims))
			if dec != tc.dec || strings.Join(got, " ") != tc.want {
				t.Errorf("Columns = %q %v (%v), want %q %v", got, dec, err, tc.want, tc.dec)
			}
		})
	}
}

func TestChannelDecisions(t *testing.T) {
	p, err := New(Rules{Channels: map[string]ChannelRules{
		"users/*/**": {
			Subscribe: `channel.startsWith("users/" + auth.sub + "/")`,
			Publish:   `channel.startsWith("users/" + auth.sub + "/") && event != "system"`,
		},
		"rooms/*":      {Subscribe: "true", Publish: "auth.role == 'member'", Presence: "true"},
		"rooms/secret": {Subscribe: "auth.role == 'admin'"},
	}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		action  RuleName
		channel string
		claims  string
		event   string
		want    Decision
	}{
		{RuleSubscribe, "users/alice/inbox", `{"sub":"alice"}`, "", Allow},
		{RuleSubscribe, "users/alice/**", `{"sub":"alice"}`, "", Allow},
		{RuleSubscribe, "users/bob/inbox", `{"sub":"alice"}`, "", Deny},
		{RuleSubscribe, "users/*/inbox", `{"sub":"alice"}`, "", Deny},
		{RuleSubscribe, "users/alice", `{"sub":"alice"}`, "", Deny}, // ** is one or more segments
		{RuleSubscribe, "users/alice/inbox", `{}`, "", Error},
		{RulePublish, "users/alice/inbox", `{"sub":"alice"}`, "chat", Allow},
		{RulePublish, "users/alice/inbox", `{"sub":"alice"}`, "system", Deny},
		{RulePresence, "users/alice/inbox", `{"sub":"alice"}`, "", Deny}, // no rule: closed
		{RuleSubscribe, "rooms/lobby", `{}`, "", Allow},
		{RuleSubscribe, "rooms/secret", `{"role":"member"}`, "", Deny},
		{RuleSubscribe, "rooms/secret", `{"role":"admin"}`, "", Allow},
		{RuleSubscribe, "rooms/*", `{"role":"member"}`, "", Deny}, // would reach rooms/secret
		{RuleSubscribe, "rooms/*", `{"role":"admin"}`, "", Allow},
		{RulePublish, "rooms/lobby", `{"role":"member"}`, "chat", Allow},
		{RulePublish, "rooms/secret", `{"role":"member"}`, "chat", Deny}, // rooms/secret has no publish rule
		{RuleSubscribe, "rooms/**", `{"role":"admin"}`, "", Deny},        // covers rooms/a/b, which no pattern does
		{RuleSubscribe, "other", `{}`, "", Deny},
		{RuleSubscribe, "**", `{"role":"admin"}`, "", Deny},
	}
	for _, tc := range tests {
		t.Run(string(tc.action)+" "+tc.channel+" "+tc.claims, func(t *testing.T) {
			got, err := p.Channel(tc.action, tc.channel, claims(t, tc.claims), tc.event)
			if got != tc.want {
				t.Errorf("Channel = %v (%v), want %v", got, err, tc.want)
			}
			if (err != nil) != (got == Error) {
				t.Errorf("decision %v with error %v", got, err)
			}
		})
	}
}

func TestCoversOverlaps(t *testing.T) {
	tests := []struct {
		p, s             string
		covers, overlaps bool
	}{
		{"a/b", "a/b", true, true},
		{"a/*", "a/b", true, true},
		{"a/*", "a/*", true, true},
		{"a/b", "a/*", false, true},
		{"a/**", "a/b/c", true, true},
		{"a/**", "a", false, false},
		{"a/**", "a/*", true, true},
		{"a/*", "a/**", false, true},
		{"a/b/c", "a/**", false, true},
		{"**", "x/y", true, true},
		{"*", "x/y", false, false},
		{"a/x", "a/y", false, false},
		{"*/inbox", "bob/*", false, true},
	}
	for _, tc := range tests {
		if got := covers(tc.p, tc.s); got != tc.covers {
			t.Errorf("covers(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.covers)
		}
		if got := overlaps(tc.p, tc.s); got != tc.overlaps {
			t.Errorf("overlaps(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.overlaps)
		}
	}
}

func TestGroupKey(t *testing.T) {
	r := tablePolicy(t, TableRules{Row: "row.org_id == auth.org_id && (auth.role == 'admin' || row.owner == auth.sub)"}).Row()
	a := r.GroupKey(claims(t, `{"org_id":"acme","role":"admin","sub":"u1","exp":1}`))
	b := r.GroupKey(claims(t, `{"org_id":"acme","role":"admin","sub":"u1","exp":2,"name":"x"}`))
	c := r.GroupKey(claims(t, `{"org_id":"acme","role":"admin","sub":"u2"}`))
	d := r.GroupKey(claims(t, `{"org_id":"acme","role":null,"sub":"u1"}`))
	e := r.GroupKey(claims(t, `{"org_id":"acme","sub":"u1"}`))
	if a != b {
		t.Errorf("claims the rule does not read changed the key: %q != %q", a, b)
	}
	if a == c || d == e || a == d {
		t.Errorf("keys that must differ are equal: %q %q %q %q", a, c, d, e)
	}
}

func TestIndexKeys(t *testing.T) {
	r := tablePolicy(t, TableRules{Row: "row.org_id == auth.org_id"}).Row()
	if k, ok := r.ClaimKey(claims(t, `{"org_id":"acme"}`)); !ok || k != "acme" {
		t.Errorf("ClaimKey = %q %v", k, ok)
	}
	for _, c := range []string{`{}`, `{"org_id":null}`, `{"org_id":5}`} {
		if k, ok := r.ClaimKey(claims(t, c)); ok {
			t.Errorf("ClaimKey(%s) = %q, want none", c, k)
		}
	}
	for _, tc := range []struct {
		row   string
		key   string
		state KeyState
	}{
		{`{"id":1,"org_id":"acme"}`, "acme", KeyFound},
		{`{"id":1,"org_id":null}`, "", KeyNull},
		{`{"id":1}`, "", KeyUnknown},
	} {
		if k, s := r.RowKey(row(t, tc.row)); k != tc.key || s != tc.state {
			t.Errorf("RowKey(%s) = %q %v, want %q %v", tc.row, k, s, tc.key, tc.state)
		}
	}

	ints := tablePolicy(t, TableRules{Row: "auth.n == row.qty"}).Row()
	for _, tc := range []struct {
		claims string
		key    string
		ok     bool
	}{
		{`{"n":5}`, "5", true},
		{`{"n":"5"}`, "5", true},
		{`{"n":5.5}`, "", false},
		{`{"n":1e300}`, "", false},
	} {
		if k, ok := ints.ClaimKey(claims(t, tc.claims)); k != tc.key || ok != tc.ok {
			t.Errorf("int ClaimKey(%s) = %q %v, want %q %v", tc.claims, k, ok, tc.key, tc.ok)
		}
	}
	if k, s := ints.RowKey(row(t, `{"qty":5}`)); k != "5" || s != KeyFound {
		t.Errorf("int RowKey = %q %v", k, s)
	}
}

// TestIndexIsSound checks the index's promise: whenever the rule allows a row for an identity,
// the row's key is the identity's claim key, or the identity has none.
func TestIndexIsSound(t *testing.T) {
	r := tablePolicy(t, TableRules{Row: "row.code == auth.c && row.qty == auth.n"}).Row()
	rows := []string{`{"code":"AB   ","qty":1}`, `{"code":"AB","qty":2}`, `{"code":"ab","qty":1}`, `{"code":null,"qty":1}`}
	cl := []string{`{"c":"AB","n":1}`, `{"c":"AB ","n":1.0}`, `{"c":"ab","n":1}`, `{"c":null,"n":1}`, `{"n":1}`}
	for _, rs := range rows {
		for _, cs := range cl {
			c := claims(t, cs)
			d, _ := r.Visible(r.Decode(row(t, rs)), nil, c)
			if d != Allow {
				continue
			}
			ck, hasKey := r.ClaimKey(c)
			rk, state := r.RowKey(row(t, rs))
			if hasKey && (state != KeyFound || rk != ck) && state != KeyUnknown {
				t.Errorf("row %s claims %s: allowed, but row key %q (%v) does not find claim key %q", rs, cs, rk, state, ck)
			}
		}
	}
}

// TestConcurrentEvaluation: one compiled rule and one decoded image serve many goroutines at
// once, as the router's groups share them (run with -race).
func TestConcurrentEvaluation(t *testing.T) {
	r := tablePolicy(t, TableRules{Row: "row.org_id == auth.org_id && row.qty > 1"}).Row()
	img := r.Decode(row(t, `{"id":1,"org_id":"acme","qty":5}`))
	allow, deny := claims(t, `{"org_id":"acme"}`), claims(t, `{"org_id":"other"}`)
	done := make(chan error)
	for g := range 4 {
		go func() {
			for i := range 200 {
				c, want := allow, Allow
				if (i+g)%2 == 1 {
					c, want = deny, Deny
				}
				if d, err := r.Visible(img, nil, c); d != want {
					done <- fmt.Errorf("goroutine %d, round %d: %v (%v), want %v", g, i, d, err, want)
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
