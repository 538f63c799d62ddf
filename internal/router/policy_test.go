package router

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/policy"
)

// fixedGate is a Gate over one compiled table.
type fixedGate map[string]*policy.TablePolicy

func (g fixedGate) Table(table string) (*policy.TablePolicy, error) { return g[table], nil }

// newPolicyRouter returns a live router whose public.items has row rule row.
func newPolicyRouter(t testing.TB, row string) *Router {
	t.Helper()
	return newPolicyRouterWith(t, policy.TableRules{Row: row})
}

func newPolicyRouterWith(t testing.TB, rules policy.TableRules) *Router {
	t.Helper()
	p, err := policy.New(policy.Rules{Tables: map[string]policy.TableRules{"public.items": rules}}, policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	info := schema["public.items"]
	tp, err := p.Table("public.items", policy.Table{Columns: info.Columns, Key: info.Key, Identity: info.Identity.String()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Schema: schema, Bus: bus.NewMemory(), Gate: fixedGate{"public.items": tp}})
	if err != nil {
		t.Fatal(err)
	}
	r.Seed(1)
	return r
}

func subscribeAs(t testing.TB, r *Router, target *recorder, sub string, claims map[string]any) {
	t.Helper()
	req := Request{Table: "public.items", Sub: sub, Target: target, Claims: policy.NewClaims(claims)}
	if _, _, err := r.Subscribe(context.Background(), req); err != nil {
		t.Fatalf("subscribe %s: %v", sub, err)
	}
}

// TestRowRuleEvaluatedOncePerReachableGroup: 100 subscribers across 10 organisations; a change
// in one costs one evaluation (the other nine groups are ruled out by the index) and reaches
// that organisation's ten subscribers, who share one body; a move between organisations is a
// leave for one and an enter for the other.
func TestRowRuleEvaluatedOncePerReachableGroup(t *testing.T) {
	r := newPolicyRouter(t, `row.org_id == auth.org_id`)
	rec := newRecorder()
	for i := range 100 {
		subscribeAs(t, r, rec, fmt.Sprintf("s%02d", i), map[string]any{"org_id": fmt.Sprintf("org%d", i%10)})
	}
	if err := r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(1, "org3", 1)})); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.RuleEvaluations != 1 || st.Delivered != 10 {
		t.Errorf("one insert: %d evaluations, %d delivered; want 1 and 10", st.RuleEvaluations, st.Delivered)
	}
	_ = r.Accept(context.Background(), txn(11, change.Event{Op: change.Update, Before: row(1, "org3", 1), After: row(1, "org4", 1)}))
	got := rec.ops()
	if diff := cmp.Diff([]string{"insert:1", "leave:1"}, got["s03"]); diff != "" {
		t.Errorf("org3's subscriber (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"enter:1"}, got["s04"]); diff != "" {
		t.Errorf("org4's subscriber (-want +got):\n%s", diff)
	}
	if len(got["s05"]) != 0 {
		t.Errorf("org5's subscriber got %v", got["s05"])
	}
	if st := r.Stats(); st.RuleEvaluations != 1+4 {
		t.Errorf("after the move: %d evaluations, want 5 (two groups, two images each)", st.RuleEvaluations)
	}
}

// TestRowRuleErrorIsConfinedToItsGroup: a subscriber whose claims make the rule fail gets a
// policy_error gap naming the rule, never the row; the others get their rows; a denial is
// counted by table.
func TestRowRuleErrorIsConfinedToItsGroup(t *testing.T) {
	r := newPolicyRouter(t, `row.qty > auth.min`)
	rec := newRecorder()
	subscribeAs(t, r, rec, "ok", map[string]any{"min": 0})
	subscribeAs(t, r, rec, "strict", map[string]any{"min": 5})
	subscribeAs(t, r, rec, "broken", nil)
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(1, "acme", 2)}))
	got := rec.ops()
	if diff := cmp.Diff([]string{"insert:1"}, got["ok"]); diff != "" {
		t.Errorf("ok (-want +got):\n%s", diff)
	}
	if len(got["strict"]) != 0 {
		t.Errorf("strict got %v, want nothing (denied)", got["strict"])
	}
	rec.mu.Lock()
	frames := rec.frames["broken"]
	rec.mu.Unlock()
	if len(frames) != 1 || frames[0]["type"] != "resync" || frames[0]["reason"] != "policy_error" {
		t.Fatalf("broken got %v, want one policy_error resync", frames)
	}
	st := r.Stats()
	if st.RowsDenied["public.items"] != 1 || st.RuleErrors != 1 || st.RuleErrorsByTable["public.items"] != 1 {
		t.Errorf("rows_denied %v, errors %d (%v); want 1, 1 and 1 for public.items", st.RowsDenied, st.RuleErrors, st.RuleErrorsByTable)
	}
}

// TestRowRuleRecheckRegroups: new claims move a subscription to the rows they allow.
func TestRowRuleRecheckRegroups(t *testing.T) {
	r := newPolicyRouter(t, `row.org_id == auth.org_id`)
	rec := newRecorder()
	sub, _, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: rec, Claims: policy.NewClaims(map[string]any{"org_id": "a"})})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Recheck(policy.NewClaims(map[string]any{"org_id": "b"})); err != nil {
		t.Fatal(err)
	}
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(1, "a", 1)}, change.Event{Op: change.Insert, After: row(2, "b", 1)}))
	if diff := cmp.Diff([]string{"insert:2"}, rec.ops()["s"]); diff != "" {
		t.Errorf("after the recheck (-want +got):\n%s", diff)
	}
}

// TestRecheckColumns: new claims that change the columns an identity may see end the
// subscription (forbidden), whether they hide one or show one more; a hidden column is refused
// in a filter without being named.
func TestRecheckColumns(t *testing.T) {
	r := newPolicyRouterWith(t, policy.TableRules{Row: "true", ColumnsRule: `has(auth.role) ? ["id", "org_id", "qty"] : ["id", "org_id"]`})
	rec := newRecorder()
	_, _, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "f", Target: rec,
		Filter: []byte(`{"gt":["qty",1]}`), Claims: policy.NewClaims(nil)})
	if fe, ok := err.(*fault.Error); !ok || fe.Code != fault.CodeUnknownColumn || strings.Contains(fe.Message, "qty") {
		t.Errorf("a filter on the hidden qty: %v, want unknown_column not naming it", err)
	}
	sub, _, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: rec, Claims: policy.NewClaims(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Recheck(policy.NewClaims(map[string]any{"other": 1})); err != nil {
		t.Errorf("the same columns: %v, want the subscription kept", err)
	}
	if fe, ok := sub.Recheck(policy.NewClaims(map[string]any{"role": "x"})).(*fault.Error); !ok || fe.Code != fault.CodeForbidden {
		t.Errorf("one more column: %v, want forbidden", fe)
	}
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(1, "a", 7)}))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.frames["s"]; len(got) != 1 || got[0]["row"].(map[string]any)["qty"] != nil {
		t.Errorf("frames %v: want one insert without qty", got)
	}
}

// BenchmarkRoutePolicy compares, per change, a tenant's rows reaching its 100 subscribers of
// 5,000 (50 organisations) through a row rule (row.org_id == auth.org_id, no filter) against
// the same fan-out through each subscriber's filter ({"eq":["org_id", ...]}, no policy): what
// the rule adds to routing a change. It logs the ratio.
//
//	go test -run '^$' -bench BenchmarkRoutePolicy -benchmem ./internal/router/
func BenchmarkRoutePolicy(b *testing.B) {
	const subs, orgs = 5000, 50
	events := make([]*change.Txn, 256)
	for i := range events {
		events[i] = txn(change.LSN(i+1), change.Event{Op: change.Insert, After: row(i, fmt.Sprintf("org%d", i%orgs), 1)})
	}
	per := map[string]float64{}
	for _, mode := range []string{"filter", "rule"} {
		b.Run(mode, func(b *testing.B) {
			var r *Router
			target := &countTarget{}
			if mode == "rule" {
				r = newPolicyRouter(b, `row.org_id == auth.org_id`)
				for i := range subs {
					req := Request{Table: "public.items", Sub: fmt.Sprintf("s%d", i), Target: target,
						Claims: policy.NewClaims(map[string]any{"org_id": fmt.Sprintf("org%d", i%orgs)})}
					if _, _, err := r.Subscribe(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				r = newRouter(b)
				for i := range subs {
					subscribe(b, r, target, fmt.Sprintf("s%d", i), fmt.Sprintf(`{"eq":["org_id","org%d"]}`, i%orgs))
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = r.Accept(context.Background(), events[i%len(events)])
			}
			b.StopTimer()
			if target.n != b.N*subs/orgs {
				b.Fatalf("%d deliveries for %d changes, want %d each", target.n, b.N, subs/orgs)
			}
			per[mode] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	if per["filter"] > 0 && per["rule"] > 0 {
		fmt.Printf("time per change to 100 of 5,000 subscribers: filter %.0f ns, row rule %.0f ns: ratio %.2f\n",
			per["filter"], per["rule"], per["rule"]/per["filter"])
	}
}
