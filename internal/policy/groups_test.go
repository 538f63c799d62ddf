package policy

import (
	"slices"
	"testing"
)

func TestGroups(t *testing.T) {
	r := tablePolicy(t, TableRules{Row: "row.org_id == auth.org_id"}).Row()
	gs := NewGroups[string](r)
	gs.Add("acme", claims(t, `{"org_id":"acme"}`))
	gs.Add("globex", claims(t, `{"org_id":"globex"}`))
	gs.Add("no-claim", claims(t, `{}`))
	gs.Add("null", claims(t, `{"org_id":null}`))
	candidates := func(rowJSON string) []string {
		var out []string
		gs.Candidates(row(t, rowJSON), func(g string) { out = append(out, g) })
		slices.Sort(out)
		return out
	}
	tests := []struct {
		row  string
		want []string
	}{
		{`{"id":1,"org_id":"acme"}`, []string{"acme", "no-claim", "null"}},
		{`{"id":1,"org_id":"initech"}`, []string{"no-claim", "null"}},
		{`{"id":1,"org_id":null}`, []string{"no-claim", "null"}},
		{`{"id":1}`, []string{"acme", "globex", "no-claim", "null"}},
	}
	for _, tc := range tests {
		if got := candidates(tc.row); !slices.Equal(got, tc.want) {
			t.Errorf("Candidates(%s) = %v, want %v", tc.row, got, tc.want)
		}
	}
	gs.Add("acme", claims(t, `{"org_id":"globex"}`)) // refiled
	gs.Remove("no-claim")
	gs.Remove("missing")
	if got := candidates(`{"id":1,"org_id":"globex"}`); !slices.Equal(got, []string{"acme", "globex", "null"}) {
		t.Errorf("after refiling: %v", got)
	}
	if gs.Len() != 3 {
		t.Errorf("Len = %d, want 3", gs.Len())
	}

	// Every group the rule allows a row for is a candidate for it.
	all := []string{`{"org_id":"acme"}`, `{"org_id":"globex"}`, `{"org_id":null}`, `{}`, `{"org_id":5}`}
	byClaims := NewGroups[string](r)
	for _, c := range all {
		byClaims.Add(c, claims(t, c))
	}
	for _, rs := range []string{`{"id":1,"org_id":"acme"}`, `{"id":1,"org_id":"globex"}`, `{"id":1,"org_id":null}`, `{"id":1,"org_id":"5"}`} {
		img := r.Decode(row(t, rs))
		var cands []string
		byClaims.Candidates(row(t, rs), func(g string) { cands = append(cands, g) })
		for _, c := range all {
			if d, _ := r.Visible(img, nil, claims(t, c)); d != Deny && !slices.Contains(cands, c) {
				t.Errorf("row %s: the rule gives %v for %s, whose group is no candidate (%v)", rs, d, c, cands)
			}
		}
	}

	unindexed := NewGroups[int](tablePolicy(t, TableRules{Row: "row.title in auth.titles"}).Row())
	unindexed.Add(1, claims(t, `{"titles":["a"]}`))
	unindexed.Add(2, claims(t, `{"titles":["b"]}`))
	n := 0
	unindexed.Candidates(row(t, `{"id":1,"title":"a"}`), func(int) { n++ })
	if n != 2 {
		t.Errorf("a rule without an index: %d candidates, want every group (2)", n)
	}
}
