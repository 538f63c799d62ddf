package policy

import "github.com/heraldrt/herald/internal/change"

// Groups files the subscriber groups of one row rule by the claim value its top-level equality
// compares (ClaimKey), so that Candidates visits only the groups a row image may be visible to.
// A group is whatever the caller evaluates once for many subscribers, typically those of equal
// GroupKey. Not safe for concurrent use: its owner (the router, under its lock) guards it.
type Groups[G comparable] struct {
	rule    *RowRule
	keyed   map[string]map[G]struct{} // by claim key
	unkeyed map[G]struct{}            // no claim key: evaluated for every row
	keyOf   map[G]groupKey
}

type groupKey struct {
	key   string
	keyed bool
}

// NewGroups returns an empty index for rule's groups.
func NewGroups[G comparable](rule *RowRule) *Groups[G] {
	return &Groups[G]{rule: rule, keyed: map[string]map[G]struct{}{}, unkeyed: map[G]struct{}{}, keyOf: map[G]groupKey{}}
}

// Add files group g, whose subscribers have claims c. Adding a group again refiles it.
func (gs *Groups[G]) Add(g G, c *Claims) {
	gs.Remove(g)
	key, ok := gs.rule.ClaimKey(c)
	gs.keyOf[g] = groupKey{key: key, keyed: ok}
	if !ok {
		gs.unkeyed[g] = struct{}{}
		return
	}
	set := gs.keyed[key]
	if set == nil {
		set = map[G]struct{}{}
		gs.keyed[key] = set
	}
	set[g] = struct{}{}
}

// Remove forgets group g.
func (gs *Groups[G]) Remove(g G) {
	k, ok := gs.keyOf[g]
	if !ok {
		return
	}
	delete(gs.keyOf, g)
	if !k.keyed {
		delete(gs.unkeyed, g)
		return
	}
	if set := gs.keyed[k.key]; set != nil {
		delete(set, g)
		if len(set) == 0 {
			delete(gs.keyed, k.key)
		}
	}
}

// Len returns the number of groups filed.
func (gs *Groups[G]) Len() int { return len(gs.keyOf) }

// Candidates calls fn for every group the rule may allow row for, each once: the groups whose
// claim key is the row's value of the indexed column, and the groups without a claim key. When
// the row's value is absent or unreadable, or the rule is not indexed, that is every group.
// Every other group the rule denies, so it need not be evaluated.
func (gs *Groups[G]) Candidates(row change.Row, fn func(G)) {
	key, state := gs.rule.RowKey(row)
	if state == KeyUnknown {
		for g := range gs.keyOf {
			fn(g)
		}
		return
	}
	if state == KeyFound {
		for g := range gs.keyed[key] {
			fn(g)
		}
	}
	for g := range gs.unkeyed {
		fn(g)
	}
}
