package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/heraldrt/herald/internal/policy"
)

// PolicySection holds the policy gate's rules: the policy.* keys. max_cost is an ordinary key;
// tables and channels are mappings from a table name or a channel pattern to rules, read from
// the config file only (a rule is code, reviewed with the file, not a value for the
// environment). Without an entry a table or channel is closed. docs/POLICY.md is the reference.
type PolicySection struct {
	// MaxCost bounds the cost of one rule evaluation, in CEL cost units; past it the
	// evaluation is an error for the subscriber or request it concerns.
	MaxCost int `yaml:"max_cost"`
	// Tables maps a schema-qualified table name to its rules.
	Tables map[string]TablePolicy `yaml:"tables,omitempty" config:"rules"`
	// Channels maps a channel pattern to its rules.
	Channels map[string]ChannelPolicy `yaml:"channels,omitempty" config:"rules"`
}

// TablePolicy are one table's rules, as in the file.
type TablePolicy struct {
	Subscribe string        `yaml:"subscribe,omitempty"`
	Row       string        `yaml:"row,omitempty"`
	Columns   PolicyColumns `yaml:"columns,omitempty"`
}

// PolicyColumns is a table's columns key: a list of column names, or a rule giving one.
type PolicyColumns struct {
	List []string
	Rule string
}

// IsZero reports whether neither form is set, so the key is left out when printed.
func (p PolicyColumns) IsZero() bool { return len(p.List) == 0 && p.Rule == "" }

// MarshalYAML writes the list as a list and the rule as a string, as the file spells them.
func (p PolicyColumns) MarshalYAML() (any, error) {
	if p.Rule != "" {
		return p.Rule, nil
	}
	return p.List, nil
}

// ChannelPolicy are one channel pattern's rules, as in the file.
type ChannelPolicy struct {
	Subscribe string `yaml:"subscribe,omitempty"`
	Publish   string `yaml:"publish,omitempty"`
	Presence  string `yaml:"presence,omitempty"`
}

// Policy returns the policy's rules, for policy.New.
func (c *Config) Policy() policy.Rules {
	r := policy.Rules{}
	if len(c.PolicySection.Tables) > 0 {
		r.Tables = map[string]policy.TableRules{}
		for name, t := range c.PolicySection.Tables {
			r.Tables[name] = policy.TableRules{Subscribe: t.Subscribe, Row: t.Row,
				Columns: slices.Clone(t.Columns.List), ColumnsRule: t.Columns.Rule}
		}
	}
	if len(c.PolicySection.Channels) > 0 {
		r.Channels = map[string]policy.ChannelRules{}
		for pat, ch := range c.PolicySection.Channels {
			r.Channels[pat] = policy.ChannelRules{Subscribe: ch.Subscribe, Publish: ch.Publish, Presence: ch.Presence}
		}
	}
	return r
}

// PolicyConfig returns the policy's Config.
func (c *Config) PolicyConfig() policy.Config {
	return policy.Config{MaxCost: uint64(c.PolicySection.MaxCost)}
}

// clonePolicy deep-copies the rule maps, for a copy of a Config that may be changed.
func (s PolicySection) clone() PolicySection {
	out := s
	if s.Tables != nil {
		out.Tables = maps.Clone(s.Tables)
		for k, t := range out.Tables {
			t.Columns.List = slices.Clone(t.Columns.List)
			out.Tables[k] = t
		}
	}
	out.Channels = maps.Clone(s.Channels)
	return out
}

// isRules reports whether name is one of the rule mappings, which the file decoder reads
// itself rather than as keys.
func isRules(name string) bool { return name == "policy.tables" || name == "policy.channels" }

// rules reads policy.tables or policy.channels from the mapping n.
func (d fileDecoder) rules(name string, n *yaml.Node) error {
	if isNull(n) {
		return nil
	}
	what, example := "table", "public.items: {row: \"row.org_id == auth.org_id\"}"
	if name == "policy.channels" {
		what, example = "channel pattern", "\"users/*/**\": {subscribe: 'channel.startsWith(\"users/\" + auth.sub + \"/\")'}"
	}
	if n.Kind != yaml.MappingNode {
		return &Error{Stage: stage, Key: name, Source: d.at(n),
			Detail: fmt.Sprintf("is a %s, want a mapping of each %s to its rules", kindName(n), what),
			Fix:    "write one entry per " + what + ", indented under " + strings.TrimPrefix(name, "policy.") + ":, e.g. " + example}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := resolve(n.Content[i]), resolve(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode || isNull(kn) || kn.Value == "" {
			return &Error{Stage: stage, Key: name, Source: d.at(kn),
				Detail: fmt.Sprintf("an entry's name is a %s, want a %s", kindName(kn), what), Fix: "write the " + what + " as the key, e.g. " + example}
		}
		entry := name + "." + strconv.Quote(kn.Value)
		if line, dup := seen[kn.Value]; dup {
			return &Error{Stage: stage, Key: entry, Source: d.at(kn),
				Detail: fmt.Sprintf("is set twice, here and on line %d", line), Fix: "keep one of them"}
		}
		seen[kn.Value] = kn.Line
		if vn.Kind != yaml.MappingNode {
			return &Error{Stage: stage, Key: entry, Source: d.at(vn),
				Detail: fmt.Sprintf("is a %s, want a mapping of rules", kindName(vn)), Fix: "write the rules indented under it, e.g. " + example}
		}
		var t TablePolicy
		var ch ChannelPolicy
		ruleNames := policy.TableRuleNames()
		if name == "policy.channels" {
			ruleNames = policy.ChannelRuleNames()
		}
		got := map[string]bool{}
		for j := 0; j+1 < len(vn.Content); j += 2 {
			rk, rv := resolve(vn.Content[j]), resolve(vn.Content[j+1])
			key := entry + "." + rk.Value
			var names []string
			for _, r := range ruleNames {
				names = append(names, string(r))
			}
			if rk.Kind != yaml.ScalarNode || !slices.Contains(names, rk.Value) {
				return &Error{Stage: stage, Key: key, Source: d.at(rk), Detail: "unknown rule",
					Fix: suggestFix(rk.Value, names, "The rules of a "+what+" are "+strings.Join(names, ", "))}
			}
			if got[rk.Value] {
				return &Error{Stage: stage, Key: key, Source: d.at(rk), Detail: "is set twice", Fix: "keep one of them"}
			}
			got[rk.Value] = true
			if isNull(rv) {
				continue
			}
			if rk.Value == string(policy.RuleColumns) && rv.Kind == yaml.SequenceNode {
				for k, item := range rv.Content {
					item = resolve(item)
					if item.Kind != yaml.ScalarNode || isNull(item) {
						return &Error{Stage: stage, Key: fmt.Sprintf("%s[%d]", key, k), Source: d.at(item),
							Detail: fmt.Sprintf("is a %s, want a column name", kindName(item)), Fix: "give each column's name as a string"}
					}
					t.Columns.List = append(t.Columns.List, item.Value)
				}
				d.c.setSource(key, d.at(rv))
				continue
			}
			if rv.Kind != yaml.ScalarNode {
				fix := `write the rule as one string; quote it, or use a block (|) for several lines`
				if rk.Value == string(policy.RuleColumns) {
					fix = "give a list of column names, or a rule (a string) that gives one"
				}
				return &Error{Stage: stage, Key: key, Source: d.at(rv), Detail: fmt.Sprintf("is a %s, want a rule", kindName(rv)), Fix: fix}
			}
			text := rv.Value
			switch policy.RuleName(rk.Value) {
			case policy.RuleSubscribe:
				t.Subscribe, ch.Subscribe = text, text
			case policy.RuleRow:
				t.Row = text
			case policy.RuleColumns:
				t.Columns.Rule = text
			case policy.RulePublish:
				ch.Publish = text
			case policy.RulePresence:
				ch.Presence = text
			}
			// A block (|) begins on the line after its key; other rules on the key's line.
			line := rv.Line
			if rv.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				line = rk.Line + 1
			}
			d.c.setSource(key, fmt.Sprintf("%s:%d", d.name, line))
			if rv.Style&yaml.LiteralStyle != 0 || !strings.Contains(text, "\n") {
				d.c.setSource(key+"#exact", "1") // the rule's lines are the file's
			}
		}
		if name == "policy.tables" {
			if d.c.PolicySection.Tables == nil {
				d.c.PolicySection.Tables = map[string]TablePolicy{}
			}
			d.c.PolicySection.Tables[kn.Value] = t
		} else {
			if d.c.PolicySection.Channels == nil {
				d.c.PolicySection.Channels = map[string]ChannelPolicy{}
			}
			d.c.PolicySection.Channels[kn.Value] = ch
		}
		d.c.setSource(entry, d.at(kn))
	}
	return nil
}

// checkPolicy checks the rules as far as can be done without the database: every rule's
// syntax, and channel rules in full. The tables' rules are type-checked against their columns
// when the server starts.
func (c *Config) checkPolicy() error {
	return c.PolicyError(policy.Validate(c.Policy()))
}

// PolicyError turns a rule's *policy.CompileError into an *Error naming where the rule is in
// the file: the line of the fault itself when the rule's lines are the file's. Other errors,
// and nil, are returned as they are. For the table rules, which are compiled against the
// tables' columns after Validate.
func (c *Config) PolicyError(err error) error {
	var ce *policy.CompileError
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	e := &Error{Stage: stage, Key: ce.Rule, Source: c.sources[ce.Rule], Detail: ce.Detail, Fix: ce.Fix, Err: err}
	if ce.Line > 0 {
		e.Detail = fmt.Sprintf("at %d:%d of the rule: %s", ce.Line, ce.Column, ce.Detail)
		if file, line, ok := splitSource(e.Source); ok && c.sources[ce.Rule+"#exact"] != "" {
			e.Source = fmt.Sprintf("%s:%d", file, line+ce.Line-1)
		}
	}
	if e.Source == "" {
		// An entry-level fault (no row rule): where the entry is.
		entry := ce.Rule
		if i := strings.LastIndexByte(entry, '.'); i > 0 && strings.HasSuffix(entry[:i], `"`) {
			entry = entry[:i]
		}
		e.Source = c.sources[entry]
	}
	return e
}

// splitSource splits "herald.yaml:14" into its file and line.
func splitSource(s string) (string, int, bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(s[i+1:])
	return s[:i], n, err == nil
}
