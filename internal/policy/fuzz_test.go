package policy

import (
	"encoding/json"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// fuzzRules are compiled once; the fuzzer varies the rows and claims they meet.
var fuzzRules = []string{
	"row.org_id == auth.org_id",
	"row.org_id == auth.org_id && (auth.role == 'admin' || row.owner == auth.sub)",
	"row.qty > auth.min && row.price < 100.0",
	"row.updated_at > timestamp('2025-01-01T00:00:00Z') || row.done",
	"'x' in row.tags || row.meta.level >= auth.level",
	"old == null || old.org_id == row.org_id",
	"row.code.startsWith('A') && row.title.size() < 10",
	"auth.orgs.exists(o, o == row.org_id)",
	"has(row.secret) && row.secret != null && row.secret.split(',').size() > 1",
	"row == old",
}

// FuzzRowRules feeds arbitrary row images and claims to compiled row rules: no panic, and
// every outcome is Allow, Deny, or Error with an error.
func FuzzRowRules(f *testing.F) {
	f.Add(`{"id":1,"org_id":"acme","qty":5,"price":1.5,"tags":["x"],"meta":{"level":2},"code":"AB ","done":true}`,
		`{"id":1,"org_id":"other"}`, `{"org_id":"acme","role":"admin","min":2,"level":1,"orgs":["acme"]}`)
	f.Add(`{"id":"9007199254740993","qty":null,"updated_at":"infinity","tags":"nope","meta":null}`, ``, `{}`)
	f.Add(`{"org_id":5,"qty":"x","price":"NaN","code":1,"done":"yes","updated_at":"2025-13-40"}`, `{}`, `{"org_id":null,"min":"a","orgs":{}}`)
	f.Add(`{}`, `null`, `{"level":1e309}`)
	var rules []*RowRule
	for _, r := range fuzzRules {
		rules = append(rules, tablePolicy(f, TableRules{Row: r}).Row())
	}
	f.Fuzz(func(t *testing.T, rowJSON, oldJSON, claimsJSON string) {
		var newRow, oldRow change.Row
		if json.Unmarshal([]byte(rowJSON), &newRow) != nil || newRow == nil {
			return
		}
		_ = json.Unmarshal([]byte(oldJSON), &oldRow)
		var m map[string]any
		if json.Unmarshal([]byte(claimsJSON), &m) != nil {
			return
		}
		c := NewClaims(m)
		for _, r := range rules {
			nimg := r.Decode(newRow)
			var oimg *Image
			if oldRow != nil {
				oimg = r.Decode(oldRow)
			}
			for _, pair := range [][2]*Image{{nimg, oimg}, {oimg, nil}} {
				if pair[0] == nil {
					continue
				}
				d, err := r.Visible(pair[0], pair[1], c)
				switch d {
				case Allow, Deny:
					if err != nil {
						t.Fatalf("%s: %v with error %v", r.Ref(), d, err)
					}
				case Error:
					if err == nil {
						t.Fatalf("%s: Error without an error", r.Ref())
					}
				default:
					t.Fatalf("%s: decision %d", r.Ref(), d)
				}
			}
			_ = r.GroupKey(c)
			// The index never leaves out a group the rule does not deny.
			gs := NewGroups[int](r)
			gs.Add(0, c)
			found := false
			gs.Candidates(newRow, func(int) { found = true })
			if d, err := r.Visible(nimg, oimg, c); d != Deny && !found {
				t.Fatalf("%s: %v (%v) for claims the index leaves out", r.Ref(), d, err)
			}
		}
	})
}
