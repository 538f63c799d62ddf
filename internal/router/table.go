package router

import (
	"github.com/heraldrt/herald/internal/filter"
)

// entry is one table subscription.
type entry struct {
	sub     string
	target  Target
	filter  *filter.Filter  // nil: every row
	columns map[string]bool // nil: every column
	shape   string          // the column list's name, shared by subscriptions with the same list
	col     string          // the indexed column, or "" when the subscription is in scan
	keys    []string        // its index keys
	seen    uint64          // the routing generation that last collected it; owned by Accept
}

// table holds the subscriptions of one table. Guarded by the Router's mu.
type table struct {
	count int
	byCol map[string]*column
	scan  map[*entry]struct{} // subscriptions no key indexes: evaluated on every change
}

// column indexes the subscriptions whose filter pins one column to equality values.
type column struct {
	typ  filter.Type
	keys map[string]map[*entry]struct{}
	n    int
}

func newTable() *table {
	return &table{byCol: map[string]*column{}, scan: map[*entry]struct{}{}}
}

func (t *table) add(e *entry, types map[string]filter.Type) {
	t.count++
	if e.filter != nil {
		if col, keys, ok := e.filter.IndexKeys(); ok && len(keys) > 0 {
			c := t.byCol[col]
			if c == nil {
				c = &column{typ: types[col], keys: map[string]map[*entry]struct{}{}}
				t.byCol[col] = c
			}
			e.col, e.keys = col, keys
			for _, k := range keys {
				set := c.keys[k]
				if set == nil {
					set = map[*entry]struct{}{}
					c.keys[k] = set
				}
				set[e] = struct{}{}
			}
			c.n++
			return
		}
	}
	t.scan[e] = struct{}{}
}

// remove detaches e and reports whether the table is now empty.
func (t *table) remove(e *entry) bool {
	if e.col == "" {
		if _, ok := t.scan[e]; !ok {
			return false
		}
		delete(t.scan, e)
	} else {
		c := t.byCol[e.col]
		if c == nil {
			return false
		}
		for _, k := range e.keys {
			if set := c.keys[k]; set != nil {
				delete(set, e)
				if len(set) == 0 {
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

// each calls fn for every subscription of the table.
func (t *table) each(fn func(*entry)) {
	for e := range t.scan {
		fn(e)
	}
	for _, c := range t.byCol {
		seen := map[*entry]bool{}
		for _, set := range c.keys {
			for e := range set {
				if !seen[e] {
					seen[e] = true
					fn(e)
				}
			}
		}
	}
}
