package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"

	"github.com/heraldrt/herald/internal/filter"
)

// Bounds on a rule. A rule is configuration, but it runs on every change or request, so its
// size and its work are bounded as client input is.
const (
	// MaxRuleBytes bounds a rule's text. A rule longer than this is a program, and belongs in
	// the database as row-level data the rule can compare against.
	MaxRuleBytes = 4096
	// DefaultMaxCost is the cost one evaluation may reach, in CEL's cost units (about one per
	// operation, one per element a comprehension visits). A rule over a row and a few claims
	// costs tens; the bound stops a comprehension over a large claim from running away.
	//
	// Only rules with a comprehension (the macros exists, all, exists_one, map, filter) are
	// tracked. Without one, a rule runs at most one operation per node of its tree (at most
	// MaxRuleBytes of text), each linear in its operands: it cannot run away, and tracking
	// would cost it several times its own evaluation (BenchmarkVisible).
	DefaultMaxCost = 10_000
)

// The variables of each kind of rule.
const (
	varAuth    = "auth"
	varRow     = "row"
	varOld     = "old"
	varTable   = "table"
	varChannel = "channel"
	varFilter  = "filter"
	varColumns = "columns"
	varEvent   = "event"
)

// reserved are the names a comprehension may not bind: a rule's variables, whose reads the
// analysis follows by name.
var reserved = []string{varAuth, varRow, varOld, varTable, varChannel, varFilter, varColumns, varEvent}

// ruleKind is the kind of a rule: which variables it has and what it answers.
type ruleKind uint8

const (
	kindTableSubscribe ruleKind = iota
	kindRow
	kindColumns
	kindChannelSubscribe
	kindPublish
	kindPresence
)

// vars lists a rule kind's variables, for a message.
func (k ruleKind) vars() []string {
	switch k {
	case kindTableSubscribe:
		return []string{varAuth, varTable, varFilter, varColumns}
	case kindRow:
		return []string{varRow, varOld, varAuth}
	case kindColumns:
		return []string{varAuth, varTable}
	case kindPublish:
		return []string{varAuth, varChannel, varEvent}
	}
	return []string{varAuth, varChannel}
}

// envOptions declares the variables of a rule kind. row is the table's row type, for kindRow.
func (k ruleKind) envOptions(row *types.Type) []cel.EnvOption {
	auth := cel.Variable(varAuth, types.NewMapType(types.StringType, types.DynType))
	switch k {
	case kindTableSubscribe:
		return []cel.EnvOption{auth, cel.Variable(varTable, types.StringType),
			cel.Variable(varFilter, types.DynType), cel.Variable(varColumns, types.NewListType(types.StringType))}
	case kindRow:
		return []cel.EnvOption{auth, cel.Variable(varRow, row), cel.Variable(varOld, row)}
	case kindColumns:
		return []cel.EnvOption{auth, cel.Variable(varTable, types.StringType)}
	case kindPublish:
		return []cel.EnvOption{auth, cel.Variable(varChannel, types.StringType), cel.Variable(varEvent, types.StringType)}
	}
	return []cel.EnvOption{auth, cel.Variable(varChannel, types.StringType)}
}

// baseOptions are every environment's: the standard library, the string extensions (split,
// lowerAscii, ...), and numeric comparisons across int and double, since claims arrive as JSON
// numbers (doubles) and integer columns read as int.
func baseOptions() []cel.EnvOption {
	return []cel.EnvOption{
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxRuleBytes),
	}
}

// newEnv returns the environment of a rule kind; cols are the table's columns for kindRow.
func newEnv(k ruleKind, cols []filter.Column) (*cel.Env, *rowProvider, error) {
	opts := baseOptions()
	var rp *rowProvider
	var rowType *types.Type
	if k == kindRow {
		base, err := types.NewRegistry()
		if err != nil {
			return nil, nil, err
		}
		rp = newRowProvider(base, cols)
		rowType = rp.typ
		opts = append(opts, cel.CustomTypeProvider(rp))
	}
	opts = append(opts, k.envOptions(rowType)...)
	env, err := cel.NewEnv(opts...)
	return env, rp, err
}

// compiled is one checked rule and its program.
type compiled struct {
	ref     string
	prg     cel.Program
	info    analysis
	tracked bool // the program enforces the cost bound: the rule has a comprehension
}

// source is one rule's text and what to call it.
type source struct {
	ref  string // policy.tables."public.items".row
	text string
	kind ruleKind
}

// parse checks a rule's syntax alone, for config validation before any table is known.
func parse(s source) *CompileError {
	if e := checkSize(s); e != nil {
		return e
	}
	env, err := cel.NewEnv(baseOptions()...)
	if err != nil {
		return &CompileError{Stage: stage, Rule: s.ref, Detail: err.Error()}
	}
	if _, iss := env.Parse(s.text); iss.Err() != nil {
		return issueError(s, iss, nil)
	}
	return nil
}

func checkSize(s source) *CompileError {
	if strings.TrimSpace(s.text) == "" {
		return &CompileError{Stage: stage, Rule: s.ref, Detail: "the rule is empty",
			Fix: `write the rule, e.g. "true" to allow everyone, or remove the key to keep it closed`}
	}
	if len(s.text) > MaxRuleBytes {
		return &CompileError{Stage: stage, Rule: s.ref,
			Detail: fmt.Sprintf("the rule is %d bytes long, more than %d", len(s.text), MaxRuleBytes),
			Fix:    "shorten the rule; keep lists of ids in a column the rule compares with a claim"}
	}
	return nil
}

// compile parses and type-checks a rule and builds its program. cols are the table's columns
// for a row rule, and for a columns rule, whose list literals must name them.
func compile(s source, cols []filter.Column, maxCost uint64) (*compiled, *CompileError) {
	if e := checkSize(s); e != nil {
		return nil, e
	}
	env, _, err := newEnv(s.kind, cols)
	if err != nil {
		return nil, &CompileError{Stage: stage, Rule: s.ref, Detail: "cannot build the rule's environment: " + err.Error()}
	}
	checked, iss := env.Compile(s.text)
	if iss.Err() != nil {
		return nil, issueError(s, iss, cols)
	}
	if e := checkOutput(s, checked); e != nil {
		return nil, e
	}
	root := checked.NativeRep().Expr()
	info := analyse(root, checked.NativeRep().SourceInfo())
	if info.shadow != nil {
		return nil, info.shadow.at(s)
	}
	if s.kind == kindColumns {
		if e := checkListedColumns(s, root, checked.NativeRep().SourceInfo(), cols); e != nil {
			return nil, e
		}
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	tracked := hasComprehension(root)
	if tracked {
		opts = append(opts, cel.CostLimit(maxCost))
	}
	prg, err := env.Program(checked, opts...)
	if err != nil {
		return nil, &CompileError{Stage: stage, Rule: s.ref, Detail: "cannot plan the rule: " + err.Error()}
	}
	return &compiled{ref: s.ref, prg: prg, info: info, tracked: tracked}, nil
}

// checkOutput requires a decision rule to answer a bool and a columns rule a list of names. A
// rule whose type is only known when it runs (a claim: dyn) is checked then.
func checkOutput(s source, a *cel.Ast) *CompileError {
	out := a.OutputType()
	if out.IsExactType(types.DynType) {
		return nil
	}
	if s.kind == kindColumns {
		if out.Kind() == types.ListKind {
			elem := out.Parameters()[0]
			if elem.IsExactType(types.StringType) || elem.IsExactType(types.DynType) {
				return nil
			}
		}
		return &CompileError{Stage: stage, Rule: s.ref, Line: 1, Column: 1,
			Detail: "the rule gives a " + out.String() + ", not a list of column names",
			Fix:    `give the visible columns as a list of strings, e.g. auth.role == "admin" ? ["id", "title", "price"] : ["id", "title"]`}
	}
	if out.IsExactType(types.BoolType) {
		return nil
	}
	return &CompileError{Stage: stage, Rule: s.ref, Line: 1, Column: 1,
		Detail: "the rule gives a " + out.String() + ", not true or false",
		Fix:    "write a condition, e.g. row.org_id == auth.org_id"}
}

var (
	undefinedField = regexp.MustCompile(`undefined field '([^']*)'`)
	undeclaredRef  = regexp.MustCompile(`undeclared reference to '([^']*)'`)
)

// issueError turns the first of CEL's issues into an *CompileError at its position, with a fix for
// the faults people make most.
func issueError(s source, iss *cel.Issues, cols []filter.Column) *CompileError {
	first := iss.Errors()[0]
	e := &CompileError{Stage: stage, Rule: s.ref, Detail: first.Message}
	if loc := first.Location; loc != nil && loc.Line() > 0 {
		e.Line, e.Column = loc.Line(), loc.Column()+1
	}
	switch {
	case undefinedField.MatchString(first.Message):
		name := undefinedField.FindStringSubmatch(first.Message)[1]
		var names []string
		for _, c := range cols {
			names = append(names, c.Name)
		}
		e.Detail = fmt.Sprintf("the table has no column %q", name)
		e.Fix = "the table's columns are: " + strings.Join(names, ", ")
		if s := suggestion(name, names); s != "" {
			e.Fix = fmt.Sprintf("did you mean %q? ", s) + e.Fix
		}
	case undeclaredRef.MatchString(first.Message):
		name := undeclaredRef.FindStringSubmatch(first.Message)[1]
		vars := s.kind.vars()
		e.Detail = fmt.Sprintf("%s is not a variable of this rule", name)
		e.Fix = "a " + s.kind.String() + " rule reads " + strings.Join(vars, ", ")
		if sug := suggestion(name, vars); sug != "" {
			e.Fix = "did you mean " + sug + "? " + e.Fix
		}
	case strings.Contains(first.Message, "no matching overload"):
		e.Fix = "the operands' types do not go together; docs/POLICY.md#types gives each column type's CEL type (a claim is dyn; compare an int column with 1, not 1.0)"
	case strings.HasPrefix(first.Message, "Syntax error"):
		e.Fix = "correct the syntax; the rule language is CEL (docs/POLICY.md#the-rule-language)"
	}
	return e
}

func (k ruleKind) String() string {
	switch k {
	case kindTableSubscribe, kindChannelSubscribe:
		return "subscribe"
	case kindRow:
		return "row"
	case kindColumns:
		return "columns"
	case kindPublish:
		return "publish"
	}
	return "presence"
}

// checkListedColumns refuses a string in a list literal of a columns rule that names no column,
// so a typo in a column list stops startup rather than hiding a column at run time.
func checkListedColumns(s source, root ast.Expr, info *ast.SourceInfo, cols []filter.Column) *CompileError {
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	var bad *CompileError
	visit(root, func(e ast.Expr) {
		if bad != nil || e.Kind() != ast.ListKind {
			return
		}
		for _, el := range e.AsList().Elements() {
			if el.Kind() != ast.LiteralKind {
				continue
			}
			str, ok := el.AsLiteral().(types.String)
			if !ok || slices.Contains(names, string(str)) {
				continue
			}
			loc := info.GetStartLocation(el.ID())
			bad = &CompileError{Stage: stage, Rule: s.ref, Line: loc.Line(), Column: loc.Column() + 1,
				Detail: fmt.Sprintf("the table has no column %q", string(str)),
				Fix:    "the table's columns are: " + strings.Join(names, ", ")}
			if sug := suggestion(string(str), names); sug != "" {
				bad.Fix = fmt.Sprintf("did you mean %q? ", sug) + bad.Fix
			}
		}
	})
	return bad
}

// Path is a claim path a rule reads: the keys from the claims' root, as in auth.org_id or
// auth.app_metadata.tenant. An empty Path is the claims as a whole.
type Path []string

// String spells the path as a rule would: auth.org_id, auth["x-tenant"].
func (p Path) String() string {
	var b strings.Builder
	b.WriteString(varAuth)
	for _, k := range p {
		if isIdent(k) {
			b.WriteByte('.')
			b.WriteString(k)
		} else {
			b.WriteByte('[')
			b.WriteString(strconv.Quote(k))
			b.WriteByte(']')
		}
	}
	return b.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// analysis is what a checked rule reads: the claim paths, the columns of row and old, and an
// equality between a row column and a claim at its top level, which indexes it.
type analysis struct {
	claims  []Path   // the claim paths read, none a prefix of another, sorted
	rowCols []string // the columns of row read, sorted
	rowAll  bool     // row is read whole (compared, or passed on)
	oldCols []string
	oldAll  bool
	index   *equality // row.<col> == auth.<path> at the top level, if any
	shadow  *shadowing
}

// equality is a top-level conjunct row.Col == <claim path>.
type equality struct {
	col   string
	claim Path
}

type shadowing struct {
	name string
	id   int64
	info *ast.SourceInfo
}

func (sh *shadowing) at(s source) *CompileError {
	loc := sh.info.GetStartLocation(sh.id)
	return &CompileError{Stage: stage, Rule: s.ref, Line: loc.Line(), Column: loc.Column() + 1,
		Detail: fmt.Sprintf("a macro binds %q, which is the name of a variable of the rule", sh.name),
		Fix:    "name the macro's variable otherwise, e.g. x in list.exists(x, ...)"}
}

// hasComprehension reports whether the tree holds a comprehension: the only construct whose
// work grows with the data rather than with the rule.
func hasComprehension(root ast.Expr) bool {
	found := false
	visit(root, func(e ast.Expr) {
		if e.Kind() == ast.ComprehensionKind {
			found = true
		}
	})
	return found
}

// visit calls fn on every expression of the tree, parents first.
func visit(e ast.Expr, fn func(ast.Expr)) {
	fn(e)
	switch e.Kind() {
	case ast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			visit(c.Target(), fn)
		}
		for _, a := range c.Args() {
			visit(a, fn)
		}
	case ast.SelectKind:
		visit(e.AsSelect().Operand(), fn)
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			visit(el, fn)
		}
	case ast.MapKind:
		for _, ent := range e.AsMap().Entries() {
			me := ent.AsMapEntry()
			visit(me.Key(), fn)
			visit(me.Value(), fn)
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			visit(f.AsStructField().Value(), fn)
		}
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		visit(c.IterRange(), fn)
		visit(c.AccuInit(), fn)
		visit(c.LoopCondition(), fn)
		visit(c.LoopStep(), fn)
		visit(c.Result(), fn)
	}
}

// chain reads e as a variable followed by field selections and constant string indexes:
// auth.a["b"].c is ("auth", [a b c]). ok is false for anything else.
func chain(e ast.Expr) (root string, path []string, ok bool) {
	for {
		switch e.Kind() {
		case ast.IdentKind:
			slices.Reverse(path)
			return e.AsIdent(), path, true
		case ast.SelectKind:
			s := e.AsSelect()
			path = append(path, s.FieldName())
			e = s.Operand()
		case ast.CallKind:
			c := e.AsCall()
			if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != ast.LiteralKind {
				return "", nil, false
			}
			key, isStr := c.Args()[1].AsLiteral().(types.String)
			if !isStr {
				return "", nil, false
			}
			path = append(path, string(key))
			e = c.Args()[0]
		default:
			return "", nil, false
		}
	}
}

// analyse finds what a checked rule reads. Every read of auth, row or old is the longest chain
// of constant selections from it; where a chain breaks (auth.roles[0], auth[row.k]), the read
// is its part before the break, which covers what is read and more. So two identities that
// agree on every claim path found give the same answer, whatever the row.
func analyse(root ast.Expr, info *ast.SourceInfo) analysis {
	var a analysis
	claims := map[string]Path{}
	rowCols, oldCols := map[string]bool{}, map[string]bool{}
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		if r, path, ok := chain(e); ok {
			switch r {
			case varAuth:
				claims[strings.Join(path, "\x00")] = Path(path)
				return
			case varRow, varOld:
				cols, all := rowCols, &a.rowAll
				if r == varOld {
					cols, all = oldCols, &a.oldAll
				}
				if len(path) == 0 {
					*all = true
				} else {
					cols[path[0]] = true
				}
				return
			}
		}
		switch e.Kind() {
		case ast.CallKind:
			c := e.AsCall()
			if c.IsMemberFunction() {
				walk(c.Target())
			}
			for _, arg := range c.Args() {
				walk(arg)
			}
		case ast.SelectKind:
			walk(e.AsSelect().Operand())
		case ast.ListKind:
			for _, el := range e.AsList().Elements() {
				walk(el)
			}
		case ast.MapKind:
			for _, ent := range e.AsMap().Entries() {
				me := ent.AsMapEntry()
				walk(me.Key())
				walk(me.Value())
			}
		case ast.StructKind:
			for _, f := range e.AsStruct().Fields() {
				walk(f.AsStructField().Value())
			}
		case ast.ComprehensionKind:
			c := e.AsComprehension()
			for _, v := range []string{c.IterVar(), c.IterVar2()} {
				if v != "" && slices.Contains(reserved, v) && a.shadow == nil {
					a.shadow = &shadowing{name: v, id: e.ID(), info: info}
				}
			}
			walk(c.IterRange())
			walk(c.AccuInit())
			walk(c.LoopCondition())
			walk(c.LoopStep())
			walk(c.Result())
		}
	}
	walk(root)

	for _, p := range claims {
		covered := false
		for _, q := range claims {
			if len(q) < len(p) && slices.Equal(q, p[:len(q)]) {
				covered = true
				break
			}
		}
		if !covered {
			a.claims = append(a.claims, p)
		}
	}
	slices.SortFunc(a.claims, func(x, y Path) int { return strings.Compare(strings.Join(x, "\x00"), strings.Join(y, "\x00")) })
	for c := range rowCols {
		a.rowCols = append(a.rowCols, c)
	}
	for c := range oldCols {
		a.oldCols = append(a.oldCols, c)
	}
	slices.Sort(a.rowCols)
	slices.Sort(a.oldCols)
	a.index = topEquality(root)
	return a
}

// topEquality finds a conjunct row.C == <claim path> (either way round) at the top of the
// rule: when it is false the rule is false, whatever else it says, errors included (CEL's &&
// is false if any operand is false).
func topEquality(e ast.Expr) *equality {
	if e.Kind() != ast.CallKind {
		return nil
	}
	c := e.AsCall()
	switch c.FunctionName() {
	case operators.LogicalAnd:
		for _, arg := range c.Args() {
			if eq := topEquality(arg); eq != nil {
				return eq
			}
		}
	case operators.Equals:
		args := c.Args()
		for _, pair := range [][2]ast.Expr{{args[0], args[1]}, {args[1], args[0]}} {
			rr, rp, ok1 := chain(pair[0])
			ar, ap, ok2 := chain(pair[1])
			if ok1 && ok2 && rr == varRow && len(rp) == 1 && ar == varAuth && len(ap) > 0 {
				if pair[0].Kind() == ast.SelectKind && pair[0].AsSelect().IsTestOnly() {
					continue
				}
				return &equality{col: rp[0], claim: Path(ap)}
			}
		}
	}
	return nil
}
