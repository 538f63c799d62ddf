package router

import (
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/stream"
)

// entry is one table subscription.
type entry struct {
	sub     string
	target  stream.Receiver
	filter  *filter.Filter  // nil: every row
	columns map[string]bool // nil: every column
	shape   string          // the column list's name, shared by subscriptions with the same list
	col     string          // the indexed column, or "" when the subscription is in scan
	keys    []string        // its index keys
	fkey    string          // its group's name: the filter's canonical text and the row rule's GroupKey
	seen    uint64          // the routing generation that last sent to it (in lists only); owned by Accept

	rule     *policy.RowRule // the table's row rule; nil without a policy
	claims   *policy.Claims  // the subscriber's claims, which the row rule judges
	gkey     string          // rule.GroupKey(claims): the claim values the rule reads
	detached bool            // unsubscribed: a recheck must not file it again
}

// group is the subscriptions of one table that share a filter (and an index key) and, under a
// policy, the values of the claims the row rule reads: the filter and the rule are evaluated
// once per change for all of them, however many sockets hold it. Its members are
// a slice of what delivery needs, copied from their entries: delivering to a group walks
// contiguous memory instead of chasing one pointer per subscriber.
type group struct {
	filter  *filter.Filter
	rule    *policy.RowRule // nil: no policy
	claims  *policy.Claims  // one member's claims: the rule answers every member alike
	members []member
	multi   int // members indexed under several keys (an in list), which need dedupe
	// ckey is the group's index key under the row rule's top-level equality with a claim
	// (RowRule.ClaimKey); keyed is false when it has none, and a row of any key may reach it.
	ckey  string
	keyed bool
	seen  uint64 // the routing generation that last collected it; owned by Accept
}

// member is one subscription's delivery data within a group.
type member struct {
	sub     string
	target  stream.Receiver
	shape   string
	columns map[string]bool
	en      *entry
}

// groups is a set of groups by filter text.
type groups map[string]*group

// add files e in its group, and returns the group if it made one.
func (gs groups) add(e *entry) (made *group) {
	g := gs[e.fkey]
	if g == nil {
		g = &group{filter: e.filter, rule: e.rule, claims: e.claims}
		if g.rule != nil {
			g.ckey, g.keyed = g.rule.ClaimKey(g.claims)
		}
		gs[e.fkey] = g
		made = g
	}
	g.members = append(g.members, member{sub: e.sub, target: e.target, shape: e.shape, columns: e.columns, en: e})
	if len(e.keys) > 1 {
		g.multi++
	}
	return made
}

// remove detaches e, returns its group if that is now empty (and gone), and reports whether
// the set is now empty.
func (gs groups) remove(e *entry) (gone *group, empty bool) {
	if g := gs[e.fkey]; g != nil {
		for i := range g.members {
			if g.members[i].en == e {
				last := len(g.members) - 1
				g.members[i] = g.members[last]
				g.members[last] = member{}
				g.members = g.members[:last]
				if len(e.keys) > 1 {
					g.multi--
				}
				break
			}
		}
		if len(g.members) == 0 {
			delete(gs, e.fkey)
			gone = g
		}
	}
	return gone, len(gs) == 0
}

func (gs groups) has(e *entry) bool {
	if g := gs[e.fkey]; g != nil {
		for i := range g.members {
			if g.members[i].en == e {
				return true
			}
		}
	}
	return false
}

// table holds the subscriptions of one table. Guarded by the Router's mu.
type table struct {
	count int
	byCol map[string]*column
	scan  groups // subscriptions no key indexes: evaluated on every change
	// rule indexes the scan groups by the claim value the table's row rule compares with a
	// column (policy.Groups), so a change visits only the groups whose claim matches the
	// row's value; nil until a subscription with a row rule arrives (a table's subscriptions
	// all have its rule, or none).
	rule *policy.Groups[*group]
	row  *policy.RowRule // the table's row rule, once a subscription with one arrives
}

// column indexes the subscriptions whose filter pins one column to equality values.
type column struct {
	typ  filter.Type
	keys map[string]groups
	n    int
}

func newTable() *table {
	return &table{byCol: map[string]*column{}, scan: groups{}}
}

func (t *table) add(e *entry, types map[string]filter.Type) {
	t.count++
	if e.rule != nil && t.row == nil {
		t.row = e.rule
	}
	e.fkey = ""
	if e.filter != nil {
		e.fkey = e.filter.String()
	}
	if e.rule != nil {
		e.fkey += "\x1f" + e.gkey
	}
	if e.filter != nil {
		if col, keys, ok := e.filter.IndexKeys(); ok && len(keys) > 0 {
			c := t.byCol[col]
			if c == nil {
				c = &column{typ: types[col], keys: map[string]groups{}}
				t.byCol[col] = c
			}
			e.col, e.keys = col, keys
			for _, k := range keys {
				gs := c.keys[k]
				if gs == nil {
					gs = groups{}
					c.keys[k] = gs
				}
				gs.add(e)
			}
			c.n++
			return
		}
	}
	if g := t.scan.add(e); g != nil && g.rule != nil {
		if t.rule == nil {
			t.rule = policy.NewGroups[*group](g.rule)
		}
		t.rule.Add(g, g.claims)
	}
}

// remove detaches e and reports whether the table is now empty.
func (t *table) remove(e *entry) bool {
	if e.col == "" {
		if !t.scan.has(e) {
			return false
		}
		if g, _ := t.scan.remove(e); g != nil && t.rule != nil {
			t.rule.Remove(g)
		}
	} else {
		c := t.byCol[e.col]
		if c == nil {
			return false
		}
		for _, k := range e.keys {
			if gs := c.keys[k]; gs != nil {
				if _, empty := gs.remove(e); empty {
					delete(c.keys, k)
				}
			}
		}
		c.n--
		if c.n == 0 {
			delete(t.byCol, e.col)
		}
	}
	t.count--
	return t.count == 0
}

// each calls fn for every subscription of the table, once.
func (t *table) each(fn func(*entry)) {
	seen := map[*entry]bool{}
	visit := func(gs groups) {
		for _, g := range gs {
			for i := range g.members {
				if e := g.members[i].en; !seen[e] {
					seen[e] = true
					fn(e)
				}
			}
		}
	}
	visit(t.scan)
	for _, c := range t.byCol {
		for _, gs := range c.keys {
			visit(gs)
		}
	}
}
