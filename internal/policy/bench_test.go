package policy

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// BenchmarkVisible is one row rule evaluation on an image decoded beforehand, as the router
// evaluates a rule once per group per change.
func BenchmarkVisible(b *testing.B) {
	for _, bc := range []struct{ name, rule string }{
		{"tenant", "row.org_id == auth.org_id"},
		{"tenant_and_owner", "row.org_id == auth.org_id && (auth.role == 'admin' || row.owner == auth.sub)"},
		{"int_and_time", "row.qty > 2 && row.updated_at > timestamp('2025-01-01T00:00:00Z')"},
		{"claim_list", "auth.orgs.exists(o, o == row.org_id)"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := tablePolicy(b, TableRules{Row: bc.rule}).Row()
			img := r.Decode(row(b, `{"id":1,"org_id":"acme","title":"a","qty":5,"updated_at":"2025-06-01T00:00:00.000Z","owner":"u1"}`))
			c := claims(b, `{"org_id":"acme","role":"member","sub":"u1","orgs":["a","b","c","acme"]}`)
			b.ReportAllocs()
			for b.Loop() {
				if d, err := r.Visible(img, nil, c); d != Allow {
					b.Fatal(d, err)
				}
			}
		})
	}
}

// BenchmarkDecode is decoding one row image for a rule: once per image per change, shared by
// every evaluation.
func BenchmarkDecode(b *testing.B) {
	r := tablePolicy(b, TableRules{Row: "row.org_id == auth.org_id && row.qty > 2 && row.updated_at > timestamp('2025-01-01T00:00:00Z')"}).Row()
	img := row(b, `{"id":1,"org_id":"acme","title":"a","qty":5,"price":1.5,"secret":"s","updated_at":"2025-06-01T00:00:00.000Z","owner":"u1"}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Decode(img)
	}
}

// BenchmarkTenants is the multi-tenant case at the policy level: 100,000 subscribers across
// 10,000 tenants (10 each), one row rule comparing row.org_id with a claim, and each change in
// the next tenant. It reports the rule evaluations one change costs:
//
//   - per_subscriber: the rule once per subscriber, as a per-socket check would;
//   - per_group: once per group of subscribers with equal values of the claims the rule reads
//     (GroupKey): one per tenant;
//   - indexed: the groups filed in Groups by their claim key, and only the Candidates for the
//     row evaluated: those the rule's top-level equality lets through;
//   - no_rule: no policy, the subscribers found by an index on org_id as a filter's are, for
//     the cost of finding them alone.
//
// Each reports evals/change and ns per change; delivered/change is the same for every mode.
func BenchmarkTenants(b *testing.B) {
	const subscribers, tenants = 100_000, 10_000
	r := tablePolicy(b, TableRules{Row: "row.org_id == auth.org_id"}).Row()
	subs := make([]*Claims, subscribers)
	for i := range subs {
		subs[i] = NewClaims(map[string]any{"org_id": "org-" + strconv.Itoa(i%tenants), "sub": "u" + strconv.Itoa(i)})
	}
	type group struct {
		claims *Claims
		n      int
	}
	groups := map[string]*group{}
	for _, c := range subs {
		k := r.GroupKey(c)
		if g := groups[k]; g != nil {
			g.n++
		} else {
			groups[k] = &group{claims: c, n: 1}
		}
	}
	var groupList []*group
	index := NewGroups[*group](r)
	for _, g := range groups {
		groupList = append(groupList, g)
		index.Add(g, g.claims)
	}
	if len(groupList) != tenants {
		b.Fatalf("%d groups, want %d", len(groupList), tenants)
	}
	rows := make([]change.Row, tenants)
	for i := range rows {
		rows[i] = change.Row{{Name: "id", Value: []byte(strconv.Itoa(i))}, {Name: "org_id", Value: []byte(`"org-` + strconv.Itoa(i) + `"`)}}
	}

	run := func(b *testing.B, change func(i int) (evals, delivered int)) {
		var evals, delivered, n int
		for b.Loop() {
			e, d := change(n % tenants)
			evals += e
			delivered += d
			n++
		}
		b.ReportMetric(float64(evals)/float64(n), "evals/change")
		b.ReportMetric(float64(delivered)/float64(n), "delivered/change")
	}
	b.Run("per_subscriber", func(b *testing.B) {
		run(b, func(i int) (evals, delivered int) {
			img := r.Decode(rows[i])
			for _, c := range subs {
				evals++
				if d, _ := r.Visible(img, nil, c); d == Allow {
					delivered++
				}
			}
			return
		})
	})
	b.Run("per_group", func(b *testing.B) {
		run(b, func(i int) (evals, delivered int) {
			img := r.Decode(rows[i])
			for _, g := range groupList {
				evals++
				if d, _ := r.Visible(img, nil, g.claims); d == Allow {
					delivered += g.n
				}
			}
			return
		})
	})
	b.Run("indexed", func(b *testing.B) {
		run(b, func(i int) (evals, delivered int) {
			img := r.Decode(rows[i])
			index.Candidates(rows[i], func(g *group) {
				evals++
				if d, _ := r.Visible(img, nil, g.claims); d == Allow {
					delivered += g.n
				}
			})
			return
		})
	})
	b.Run("no_rule", func(b *testing.B) {
		bySub := map[string]int{}
		for _, g := range groupList {
			k, _ := r.ClaimKey(g.claims)
			bySub[k] += g.n
		}
		run(b, func(i int) (evals, delivered int) {
			k, _ := r.RowKey(rows[i])
			return 0, bySub[k]
		})
	})
}

// BenchmarkCompile is compiling a table's rules, once per table at startup.
func BenchmarkCompile(b *testing.B) {
	p, err := New(Rules{Tables: map[string]TableRules{"public.items": {
		Subscribe: "auth.role in ['member', 'admin']",
		Row:       "row.org_id == auth.org_id && (auth.role == 'admin' || row.owner == auth.sub)",
	}}}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Table("public.items", items); err != nil {
			b.Fatal(fmt.Sprint(err))
		}
	}
}
