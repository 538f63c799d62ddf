package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
)

// Table is a table as Postgres reports it, for compiling its rules.
type Table struct {
	// Columns are the published columns in table order, each with the OID its values decode
	// as (filter.Column).
	Columns []filter.Column
	// Key names the replica identity's columns: the primary key's under DEFAULT, the index's
	// under USING INDEX.
	Key []string
	// Identity is the table's replica identity as ALTER TABLE spells it: DEFAULT, USING INDEX,
	// FULL or NOTHING. It says which columns an old image holds.
	Identity string
}

// logged reports whether Postgres logs col in the old image of an update or delete.
func (t *Table) logged(col string) bool {
	switch t.Identity {
	case "FULL":
		return true
	case "DEFAULT", "USING INDEX":
		return slices.Contains(t.Key, col)
	}
	return false
}

// TablePolicy is one table's compiled rules. A nil *TablePolicy is a closed table: every
// decision is Deny. Immutable; safe for concurrent use.
type TablePolicy struct {
	name      string
	cols      []filter.Column
	kinds     []kind
	key       []string
	subscribe *compiled // nil: every identity may subscribe
	row       *RowRule
	columns   []string  // a fixed column list; nil with columnsRule nil: every column
	colsRule  *compiled // the columns rule, if any
	rowType   *types.Type
}

// Table compiles the rules of table name against its columns. It returns nil, and no error,
// for a table without rules: it is closed.
//
// Besides a rule that does not compile, or names a column the table does not have, it refuses
// a row rule that reads a column the table's old images lack: such a rule decides whether a
// subscriber could see a row before an update or a delete from the old image, so under
// REPLICA IDENTITY DEFAULT it could never tell which subscribers a delete or an update that
// moves a row out of their view concerns. The fix names the ALTER TABLE that makes it exact.
func (p *Policy) Table(name string, t Table) (*TablePolicy, error) {
	r, ok := p.rules.Tables[name]
	if !ok {
		return nil, nil
	}
	if e := checkTableEntry(name, r); e != nil {
		return nil, e
	}
	tp := &TablePolicy{name: name, cols: slices.Clone(t.Columns), key: slices.Clone(t.Key)}
	for _, c := range tp.cols {
		tp.kinds = append(tp.kinds, kindOf(c.OID))
	}
	if len(t.Columns) == 0 {
		return nil, &CompileError{Stage: stage, Rule: TableRef(name, RuleRow),
			Detail: "the table has rules, but Herald streams no such table (it does not exist, or the publication does not cover it)",
			Fix:    "check the table's name in policy.tables, and changefeed.tables"}
	}
	var err *CompileError
	if r.Subscribe != "" {
		if tp.subscribe, err = compile(source{ref: TableRef(name, RuleSubscribe), text: r.Subscribe, kind: kindTableSubscribe}, t.Columns, p.maxCost); err != nil {
			return nil, err
		}
	}
	row, err := compile(source{ref: TableRef(name, RuleRow), text: r.Row, kind: kindRow}, t.Columns, p.maxCost)
	if err != nil {
		return nil, err
	}
	tp.row = newRowRule(tp, row)
	tp.rowType = types.NewObjectType(rowTypeName)
	switch t.Identity {
	case "DEFAULT", "USING INDEX", "FULL", "NOTHING":
	default:
		return nil, &CompileError{Stage: stage, Rule: TableRef(name, RuleRow),
			Detail: fmt.Sprintf("the table's replica identity %q is not one Postgres has", t.Identity),
			Fix:    "pass the identity as ALTER TABLE spells it: DEFAULT, USING INDEX, FULL or NOTHING"}
	}
	if need := tp.row.oldNeeds(&t); len(need) > 0 {
		fix := fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL; (Postgres then logs whole old rows of updates and deletes)", name)
		if len(t.Key) > 0 && t.Identity != "NOTHING" {
			fix += fmt.Sprintf(", or write the rule over the key columns (%s)", strings.Join(t.Key, ", "))
		}
		return nil, &CompileError{Stage: stage, Rule: TableRef(name, RuleRow),
			Detail: fmt.Sprintf("the rule reads %s, which the old images of %s do not hold under REPLICA IDENTITY %s, so whether a subscriber could see a deleted or updated row could not be told",
				strings.Join(need, ", "), name, t.Identity),
			Fix: fix}
	}
	if len(r.Columns) > 0 {
		for i, c := range r.Columns {
			if !slices.ContainsFunc(t.Columns, func(tc filter.Column) bool { return tc.Name == c }) {
				return nil, &CompileError{Stage: stage, Rule: fmt.Sprintf("%s[%d]", TableRef(name, RuleColumns), i),
					Detail: fmt.Sprintf("the table has no column %q", c), Fix: "the table's columns are: " + strings.Join(tp.names(), ", ")}
			}
		}
		for _, k := range t.Key {
			if !slices.Contains(r.Columns, k) {
				return nil, &CompileError{Stage: stage, Rule: TableRef(name, RuleColumns),
					Detail: fmt.Sprintf("the list leaves out the key column %s; clients apply changes by key, so every change carries it", k),
					Fix:    "add the key columns to the list: " + strings.Join(t.Key, ", ")}
			}
		}
		tp.columns = slices.Clone(r.Columns)
	}
	if r.ColumnsRule != "" {
		if tp.colsRule, err = compile(source{ref: TableRef(name, RuleColumns), text: r.ColumnsRule, kind: kindColumns}, t.Columns, p.maxCost); err != nil {
			return nil, err
		}
	}
	return tp, nil
}

func (tp *TablePolicy) names() []string {
	out := make([]string, len(tp.cols))
	for i, c := range tp.cols {
		out[i] = c.Name
	}
	return out
}

// Subscribe decides whether an identity may subscribe to the table with a filter (its JSON;
// nil for none) and a column list (nil for every column). A closed table denies.
func (tp *TablePolicy) Subscribe(c *Claims, filterJSON json.RawMessage, columns []string) (Decision, error) {
	if tp == nil {
		return Deny, nil
	}
	if tp.subscribe == nil {
		return Allow, nil
	}
	f, err := jsonValue(filterJSON)
	if err != nil {
		return Error, &EvalError{Rule: tp.subscribe.ref, Detail: "the filter is not JSON: " + err.Error()}
	}
	if columns == nil {
		columns = []string{}
	}
	act := activation{auth: c.val, name: types.String(tp.name), nameVar: varTable, filter: f,
		columns: types.DefaultTypeAdapter.NativeToValue(columns)}
	return tp.subscribe.decide(&act)
}

// Columns returns the columns an identity may see, in table order: every column without a
// columns rule or list. Its Decision is Allow, or Error when the rule could not answer, or
// answered with a name that is no column, or left out a key column.
//
// They are the table as far as that identity is concerned: checking its filter against them
// alone (filter.Parse) refuses a filter on a hidden column as on a column that does not exist,
// and the refusal lists only these; a requested column outside them is refused the same way.
// Call it again when the identity's claims change (a token refresh).
func (tp *TablePolicy) Columns(c *Claims) ([]string, Decision, error) {
	if tp == nil {
		return nil, Deny, nil
	}
	switch {
	case tp.colsRule != nil:
		act := activation{auth: c.val, name: types.String(tp.name), nameVar: varTable}
		out, _, err := tp.colsRule.prg.Eval(&act)
		if err != nil {
			return nil, Error, tp.colsRule.evalError(err)
		}
		names, e := tp.columnList(out)
		if e != nil {
			return nil, Error, e
		}
		return names, Allow, nil
	case tp.columns != nil:
		return tp.inOrder(tp.columns), Allow, nil
	}
	return tp.names(), Allow, nil
}

// columnList reads a columns rule's answer: a list of column names that includes the key.
func (tp *TablePolicy) columnList(out ref.Val) ([]string, *EvalError) {
	bad := func(detail string) *EvalError { return &EvalError{Rule: tp.colsRule.ref, Detail: detail} }
	native, err := out.ConvertToNative(reflectStrings)
	if err != nil {
		return nil, bad("the rule gave a " + out.Type().TypeName() + ", not a list of column names")
	}
	names := native.([]string)
	for _, n := range names {
		if !slices.Contains(tp.names(), n) {
			return nil, bad(fmt.Sprintf("the rule gave %q, which is not a column of the table", n))
		}
	}
	for _, k := range tp.key {
		if !slices.Contains(names, k) {
			return nil, bad(fmt.Sprintf("the rule left out the key column %s, which every change carries", k))
		}
	}
	return tp.inOrder(names), nil
}

// inOrder returns the names in table order, each once.
func (tp *TablePolicy) inOrder(names []string) []string {
	var out []string
	for _, c := range tp.cols {
		if slices.Contains(names, c.Name) {
			out = append(out, c.Name)
		}
	}
	return out
}

// Row returns the table's row rule; nil for a closed table.
func (tp *TablePolicy) Row() *RowRule {
	if tp == nil {
		return nil
	}
	return tp.row
}

// RowRule is a table's compiled row rule and what it reads. Immutable; safe for concurrent
// use.
//
// It decides whether a subscriber may see one row image, so the router asks it what it asks a
// filter: was the row visible before the change (the old image), and is it after (the new
// one). Visible(new, old, c) judges the new image of an insert or update, with old the old
// image (nil for an insert); Visible(old, nil, c) judges the old image of an update or a
// delete. Updates whose answer changes are enter and leave, exactly like a filter's.
//
// The answer depends on the identity only through the claim paths Claims returns, so
// subscribers whose GroupKey is equal share one evaluation per image.
type RowRule struct {
	tp    *TablePolicy
	rule  *compiled
	need  []bool // by column position: read by the rule
	index int    // the column of the rule's top-level equality with a claim; -1: none
}

func newRowRule(tp *TablePolicy, c *compiled) *RowRule {
	r := &RowRule{tp: tp, rule: c, need: make([]bool, len(tp.cols)), index: -1}
	for i, col := range tp.cols {
		r.need[i] = c.info.rowAll || c.info.oldAll ||
			slices.Contains(c.info.rowCols, col.Name) || slices.Contains(c.info.oldCols, col.Name)
	}
	if eq := c.info.index; eq != nil {
		i := slices.IndexFunc(tp.cols, func(col filter.Column) bool { return col.Name == eq.col })
		if i >= 0 && indexable(tp.kinds[i]) {
			r.index = i
		}
	}
	return r
}

// indexable reports whether equal index keys (filter.Key) are implied by CEL equality for a
// column of kind k, so that a lookup by key finds every group the rule may allow. Doubles and
// times are not: their CEL equality is not the filter's decimal or millisecond equality.
func indexable(k kind) bool {
	switch k {
	case kindInt, kindString, kindChar, kindBool:
		return true
	}
	return false
}

// oldNeeds lists the columns the rule needs from old images that t's replica identity does not
// log: every column it reads of row (judged on old images too) and of old.
func (r *RowRule) oldNeeds(t *Table) []string {
	info := r.rule.info
	var need []string
	for _, c := range r.tp.cols {
		read := info.rowAll || info.oldAll || slices.Contains(info.rowCols, c.Name) || slices.Contains(info.oldCols, c.Name)
		if read && !t.logged(c.Name) {
			need = append(need, c.Name)
		}
	}
	return need
}

// Ref names the rule: policy.tables."public.items".row.
func (r *RowRule) Ref() string { return r.rule.ref }

// Claims returns the claim paths the rule reads, none a prefix of another. An empty Path in
// it means the rule reads the claims whole.
func (r *RowRule) Claims() []Path { return slices.Clone(r.rule.info.claims) }

// Columns returns the columns the rule reads, of row or old, in table order.
func (r *RowRule) Columns() []string {
	var out []string
	for i, c := range r.tp.cols {
		if r.need[i] {
			out = append(out, c.Name)
		}
	}
	return out
}

// GroupKey returns a key equal for two identities exactly when they agree on every claim path
// the rule reads: the rule gives them the same answer on every row, so the router may evaluate
// it once for all subscribers of a group. The key is the values' JSON, an absent claim
// spelled apart from null.
func (r *RowRule) GroupKey(c *Claims) string {
	var b []byte
	for i, p := range r.rule.info.claims {
		if i > 0 {
			b = append(b, 0x1f)
		}
		v, ok := c.lookup(p)
		if !ok {
			b = append(b, 0) // absent: no JSON text begins with NUL
			continue
		}
		j, err := json.Marshal(v)
		if err != nil {
			b = append(b, 1) // not encodable: never equal to a value's JSON
			continue
		}
		b = append(b, j...)
	}
	return string(b)
}

// IndexColumn returns the column of the rule's top-level equality with a claim, as in
// row.org_id == auth.org_id, and the claim's path. ok is false when the rule has no such
// equality, or its column's type does not index (numeric, float, times, json).
func (r *RowRule) IndexColumn() (col string, claim Path, ok bool) {
	if r.index < 0 {
		return "", nil, false
	}
	return r.tp.cols[r.index].Name, slices.Clone(r.rule.info.index.claim), true
}

// ClaimKey returns the index key of an identity's value of the indexed claim, in the indexed
// column's canonical spelling (filter.Key). ok is false when the rule is not indexed, or the
// claim is absent, null, or not a value of the column's type: a group without a key must be
// evaluated on every row, as the equality cannot rule it out.
func (r *RowRule) ClaimKey(c *Claims) (string, bool) {
	if r.index < 0 {
		return "", false
	}
	v, ok := c.lookup(r.rule.info.index.claim)
	if !ok || v == nil {
		return "", false
	}
	if f, isNum := v.(float64); isNum && (math.Abs(f) > 1<<53 || f != math.Trunc(f)) && r.tp.kinds[r.index] == kindInt {
		// An integer column equals a double exactly only within 2^53, where the key is exact.
		return "", false
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	return filter.Key(filter.TypeOf(r.tp.cols[r.index].OID), raw)
}

// KeyState says what a row image's index key tells of the groups a row rule may allow.
type KeyState uint8

const (
	// KeyFound: only the groups with this key, and the groups without one, may allow it.
	KeyFound KeyState = iota
	// KeyNull: the column is NULL; only the groups without a key may allow it.
	KeyNull
	// KeyUnknown: the column is absent from the image, or cannot be read as its type, or the
	// rule is not indexed: every group must be evaluated.
	KeyUnknown
)

// RowKey returns the index key of a row image's value of the indexed column.
func (r *RowRule) RowKey(row change.Row) (string, KeyState) {
	if r.index < 0 {
		return "", KeyUnknown
	}
	col := r.tp.cols[r.index]
	var raw json.RawMessage
	var ok bool
	if r.index < len(row) && row[r.index].Name == col.Name {
		raw, ok = row[r.index].Value, true
	} else {
		raw, ok = row.Get(col.Name)
	}
	if !ok {
		return "", KeyUnknown
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "", KeyNull
	}
	key, ok := filter.Key(filter.TypeOf(col.OID), raw)
	if !ok {
		return "", KeyUnknown
	}
	return key, KeyFound
}

// Decode decodes a row image for the rule: the columns it reads, once per image, shared by
// every evaluation of it. A column the image lacks reads as an error, not as NULL.
func (r *RowRule) Decode(row change.Row) *Image {
	if row == nil {
		return nil
	}
	return decodeImage(r.tp.cols, r.tp.kinds, r.need, r.tp.rowType, row)
}

// Visible decides whether an identity may see the row image row; old is the image before it,
// for the new image of an update, and nil otherwise (then the rule's old is null).
func (r *RowRule) Visible(row, old *Image, c *Claims) (Decision, error) {
	if r == nil {
		return Deny, nil
	}
	if row == nil {
		return Error, &EvalError{Rule: r.rule.ref, Detail: "no row image to judge"}
	}
	act := activations.Get().(*activation)
	*act = activation{auth: c.val, row: row.val, old: types.NullValue}
	if old != nil {
		act.old = old.val
	}
	d, err := r.rule.decide(act)
	*act = activation{} // hold no claims or rows while pooled
	activations.Put(act)
	return d, err
}

// reflectStrings is the native type a columns rule's answer converts to.
var reflectStrings = reflect.TypeFor[[]string]()
