package policy

import (
	"strconv"
)

// Rules is the policy as configured: the rules' text, per table and per channel pattern. The
// zero Rules is the closed policy: no table may be subscribed to, and no channel subscribed to,
// published on or joined.
type Rules struct {
	// Tables maps a schema-qualified table name ("public.items") to its rules.
	Tables map[string]TableRules
	// Channels maps a channel pattern ("docs/*/inbox", "users/**") to its rules.
	Channels map[string]ChannelRules
}

// TableRules are the rules of one table. A table without an entry is closed. An entry needs a
// Row rule: `true` shows every row, written out so that opening a table is visible.
type TableRules struct {
	// Subscribe decides whether an identity may subscribe, with a filter and a column list.
	// Empty: every identity may, and Row decides what it sees.
	Subscribe string
	// Row decides, for each row image a change brings, whether the subscriber may see it.
	// Required.
	Row string
	// Columns, when set, are the columns every subscriber may see: a fixed list. At most one of
	// Columns and ColumnsRule is set; neither means every column.
	Columns []string
	// ColumnsRule computes the visible columns from the identity: a list of column names.
	ColumnsRule string
}

// ChannelRules are the rules of one channel pattern. Each action without a rule is closed on
// the channels the pattern matches.
type ChannelRules struct {
	// Subscribe decides whether an identity may subscribe to a channel or pattern.
	Subscribe string
	// Publish decides whether an identity may publish on a channel from its connection.
	Publish string
	// Presence decides whether an identity may join a channel's presence.
	Presence string
}

// RuleName is the name of one kind of rule, as the config spells it.
type RuleName string

// The rule names.
const (
	RuleSubscribe RuleName = "subscribe"
	RuleRow       RuleName = "row"
	RuleColumns   RuleName = "columns"
	RulePublish   RuleName = "publish"
	RulePresence  RuleName = "presence"
)

// TableRuleNames are the rules a table entry may hold, in the order the docs list them.
func TableRuleNames() []RuleName { return []RuleName{RuleSubscribe, RuleRow, RuleColumns} }

// ChannelRuleNames are the rules a channel entry may hold.
func ChannelRuleNames() []RuleName { return []RuleName{RuleSubscribe, RulePublish, RulePresence} }

// TableRef names a table's rule as the config key spells it: policy.tables."public.items".row.
func TableRef(table string, rule RuleName) string {
	return "policy.tables." + strconv.Quote(table) + "." + string(rule)
}

// ChannelRef names a channel pattern's rule: policy.channels."docs/*".publish.
func ChannelRef(pattern string, rule RuleName) string {
	return "policy.channels." + strconv.Quote(pattern) + "." + string(rule)
}
