package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/heraldrt/herald/internal/channel"
)

// Config configures a Policy. The zero Config takes the defaults.
type Config struct {
	// MaxCost bounds the cost of one evaluation, in CEL's cost units. 0: DefaultMaxCost. A
	// rule that passes it is an Error for that evaluation.
	MaxCost uint64
}

// Policy is the compiled policy of a server: the channel rules, compiled, and the table rules,
// parsed, waiting for their tables' columns (Table). Immutable; safe for concurrent use.
type Policy struct {
	rules    Rules
	maxCost  uint64
	channels []*channelEntry // in pattern order
}

// Validate checks rules as far as can be done without the tables' columns: names and patterns,
// the shape of each entry, and every rule's syntax; channel rules are type-checked in full.
// Errors are *CompileError. Config loading calls it; New repeats it.
func Validate(rules Rules) error {
	_, err := New(rules, Config{})
	return err
}

// New checks rules and compiles the channel rules. Errors are *CompileError.
func New(rules Rules, cfg Config) (*Policy, error) {
	p := &Policy{rules: rules, maxCost: cfg.MaxCost}
	if p.maxCost == 0 {
		p.maxCost = DefaultMaxCost
	}
	for _, name := range sortedKeys(rules.Tables) {
		if e := checkTableEntry(name, rules.Tables[name]); e != nil {
			return nil, e
		}
	}
	for _, pat := range sortedKeys(rules.Channels) {
		ce, e := p.compileChannel(pat, rules.Channels[pat])
		if e != nil {
			return nil, e
		}
		p.channels = append(p.channels, ce)
	}
	return p, nil
}

// Tables returns the names of the tables that have rules, sorted. Every other table is closed.
func (p *Policy) Tables() []string { return sortedKeys(p.rules.Tables) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkTableEntry checks a table entry's name and shape, and each rule's syntax.
func checkTableEntry(name string, t TableRules) *CompileError {
	schema, table, ok := strings.Cut(name, ".")
	if !ok || schema == "" || table == "" || strings.Contains(table, ".") {
		return &CompileError{Stage: stage, Rule: "policy.tables." + fmt.Sprintf("%q", name),
			Detail: "a table is named schema.table",
			Fix:    fmt.Sprintf("name it with its schema, e.g. public.%s", name)}
	}
	if strings.TrimSpace(t.Row) == "" {
		return &CompileError{Stage: stage, Rule: TableRef(name, RuleRow),
			Detail: "the table has rules but no row rule, which every table's rows pass through",
			Fix:    `write the row rule, e.g. row: "row.org_id == auth.org_id", or row: "true" to show every row to whoever may subscribe`}
	}
	if len(t.Columns) > 0 && t.ColumnsRule != "" {
		return &CompileError{Stage: stage, Rule: TableRef(name, RuleColumns),
			Detail: "columns is both a list and a rule", Fix: "give a list of column names, or a rule that gives one"}
	}
	for _, s := range []source{
		{ref: TableRef(name, RuleSubscribe), text: t.Subscribe, kind: kindTableSubscribe},
		{ref: TableRef(name, RuleRow), text: t.Row, kind: kindRow},
		{ref: TableRef(name, RuleColumns), text: t.ColumnsRule, kind: kindColumns},
	} {
		if s.text == "" && s.kind != kindRow {
			continue
		}
		if e := parse(s); e != nil {
			return e
		}
	}
	for i, c := range t.Columns {
		if strings.TrimSpace(c) == "" {
			return &CompileError{Stage: stage, Rule: fmt.Sprintf("%s[%d]", TableRef(name, RuleColumns), i),
				Detail: "is empty", Fix: "give the column's name, as Postgres stores it"}
		}
	}
	return nil
}

// channelEntry is one channel pattern's compiled rules; a nil rule is closed.
type channelEntry struct {
	pattern channel.Pattern
	rules   map[RuleName]*compiled
}

func (p *Policy) compileChannel(pat string, r ChannelRules) (*channelEntry, *CompileError) {
	parsed, err := channel.ParsePattern(pat, "")
	if err != nil {
		return nil, &CompileError{Stage: stage, Rule: "policy.channels." + fmt.Sprintf("%q", pat),
			Detail: "is not a channel pattern: " + err.Error(),
			Fix:    `write a channel name, or a pattern such as "docs/*/inbox" or "users/**"`}
	}
	ce := &channelEntry{pattern: parsed, rules: map[RuleName]*compiled{}}
	for _, s := range []struct {
		name RuleName
		text string
		kind ruleKind
	}{
		{RuleSubscribe, r.Subscribe, kindChannelSubscribe},
		{RulePublish, r.Publish, kindPublish},
		{RulePresence, r.Presence, kindPresence},
	} {
		if s.text == "" {
			continue
		}
		c, e := compile(source{ref: ChannelRef(pat, s.name), text: s.text, kind: s.kind}, nil, p.maxCost)
		if e != nil {
			return nil, e
		}
		ce.rules[s.name] = c
	}
	return ce, nil
}
