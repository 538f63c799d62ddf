package filter

import (
	"encoding/json"
	"slices"
	"sort"

	"github.com/heraldrt/herald/internal/change"
)

// Filter is a compiled filter. It is immutable and safe for concurrent use. A nil *Filter, and
// the one Parse returns for an absent filter, match every row.
type Filter struct {
	root *node  // nil: every row
	text string // the canonical JSON form
	cols []string

	// The index the router may file the filter under; see IndexKeys.
	idxCol  string
	idxKeys []string
	idxOK   bool
}

// node is one operator of a compiled filter.
type node struct {
	op   op
	kids []*node // and, or: the operands; not: the one

	// A column operator's column.
	col  string
	hint int // its position in the table, where a row in table order holds it
	typ  Type
	oid  uint32 // its type OID, which SQL casts by

	lit     literal   // eq, neq, lt, lte, gt, gte; like: only json, the pattern
	set     []literal // in: sorted by compare, without duplicates
	like    *likeMatcher
	pattern string
}

func (n *node) setColumn(c column) { n.col, n.hint, n.typ, n.oid = c.name, c.hint, c.typ, c.oid }

func newFilter(root *node) *Filter {
	f := &Filter{root: root}
	f.text = string(appendNode(nil, root))
	seen := map[string]bool{}
	walk(root, func(n *node) {
		if n.col != "" && !seen[n.col] {
			seen[n.col] = true
			f.cols = append(f.cols, n.col)
		}
	})
	sort.Strings(f.cols)
	f.idxCol, f.idxKeys, f.idxOK = indexOf(root)
	return f
}

func walk(n *node, fn func(*node)) {
	fn(n)
	for _, k := range n.kids {
		walk(k, fn)
	}
}

// String returns the filter's canonical JSON form: the same operators in the same order, each
// value in its canonical spelling (numbers as exact decimals, uuids in lowercase, timestamps in
// UTC with milliseconds), the values of an in sorted and without duplicates. Parsing it gives an
// equal filter, and two filters that differ only in spelling have the same form, so it serves
// as a key for grouping subscriptions by filter. It is "null" for the filter that matches every
// row.
func (f *Filter) String() string {
	if f == nil {
		return "null"
	}
	return f.text
}

// Columns returns the names of the columns the filter reads, sorted, each once. The caller may
// modify the slice.
func (f *Filter) Columns() []string {
	if f == nil {
		return nil
	}
	return slices.Clone(f.cols)
}

// Result is what a filter says about a row image.
type Result uint8

const (
	// False: the row does not match. A comparison with SQL NULL does not match, as in a SQL
	// WHERE clause, and neither does its negation.
	False Result = iota
	// True: the row matches.
	True
	// Unknown: the filter cannot tell, because a column it reads is absent from the image (an
	// unchanged TOAST value, or a key-only old image), and the answer depends on its value; or
	// because a value cannot be read as its column's type. The caller must act as if the row
	// might match.
	Unknown
)

func (r Result) String() string {
	switch r {
	case False:
		return "false"
	case True:
		return "true"
	}
	return "unknown"
}

// outcomes is the set of SQL truth values an expression may take on a row: one value when every
// column it reads is in the image, several when an absent column could make it any of them.
// Combining sets value by value makes and, or and not exact: false AND (anything) is false, true
// OR (anything) is true, and NOT of an unknown is unknown.
type outcomes uint8

const (
	isTrue  outcomes = 1 << iota // SQL true
	isFalse                      // SQL false
	isNull                       // SQL NULL: a comparison with NULL
)

const (
	anyBool  = isTrue | isFalse          // a non-null value we cannot read or see
	anyTruth = isTrue | isFalse | isNull // a comparison with an absent column
)

// andOf, orOf and notOf are the three-valued connectives lifted to sets of truth values.
var andOf, orOf, notOf = connectives()

func connectives() (and, or [8][8]outcomes, not [8]outcomes) {
	values := []outcomes{isTrue, isFalse, isNull}
	and3 := func(a, b outcomes) outcomes {
		switch {
		case a == isFalse || b == isFalse:
			return isFalse
		case a == isNull || b == isNull:
			return isNull
		}
		return isTrue
	}
	or3 := func(a, b outcomes) outcomes {
		switch {
		case a == isTrue || b == isTrue:
			return isTrue
		case a == isNull || b == isNull:
			return isNull
		}
		return isFalse
	}
	not3 := map[outcomes]outcomes{isTrue: isFalse, isFalse: isTrue, isNull: isNull}
	for s := range 8 {
		for t := range 8 {
			for _, a := range values {
				for _, b := range values {
					if outcomes(s)&a != 0 && outcomes(t)&b != 0 {
						and[s][t] |= and3(a, b)
						or[s][t] |= or3(a, b)
					}
				}
			}
		}
		for _, a := range values {
			if outcomes(s)&a != 0 {
				not[s] |= not3[a]
			}
		}
	}
	return and, or, not
}

// Eval evaluates the filter on a row image. It does not allocate, except to unescape a long
// string value that holds JSON escapes.
func (f *Filter) Eval(row change.Row) Result {
	if f == nil || f.root == nil {
		return True
	}
	o := f.root.eval(row)
	switch {
	case o == isTrue:
		return True
	case o&isTrue == 0:
		return False
	}
	return Unknown
}

func (n *node) eval(row change.Row) outcomes {
	switch n.op {
	case opAnd:
		acc := isTrue
		for _, k := range n.kids {
			if acc = andOf[acc][k.eval(row)]; acc == isFalse {
				return acc
			}
		}
		return acc
	case opOr:
		acc := isFalse
		for _, k := range n.kids {
			if acc = orOf[acc][k.eval(row)]; acc == isTrue {
				return acc
			}
		}
		return acc
	case opNot:
		return notOf[n.kids[0].eval(row)]
	}
	return n.evalColumn(row)
}

// evalColumn evaluates a column operator.
func (n *node) evalColumn(row change.Row) outcomes {
	raw, present := lookup(row, n.col, n.hint)
	switch {
	case n.op == opIn && len(n.set) == 0:
		return isFalse // x IN () is false even for NULL, as x = ANY('{}') is
	case !present:
		if n.op == opIsNull || n.op == opNotNull {
			return anyBool
		}
		return anyTruth
	case len(raw) == 0 || string(raw) == "null":
		switch n.op {
		case opIsNull:
			return isTrue
		case opNotNull:
			return isFalse
		}
		return isNull
	case n.op == opIsNull:
		return isFalse
	case n.op == opNotNull:
		return isTrue
	}

	var buf [64]byte
	v, ok := parseValue(n.typ, raw, buf[:0])
	if !ok {
		return anyBool
	}
	var hit bool
	switch n.op {
	case opLike:
		hit = n.like.match(v.text)
	case opIn:
		hit = n.contains(&v)
	default:
		c := compare(n.typ, &v, &n.lit.v)
		switch n.op {
		case opEq:
			hit = c == 0
		case opNeq:
			hit = c != 0
		case opLt:
			hit = c < 0
		case opLte:
			hit = c <= 0
		case opGt:
			hit = c > 0
		case opGte:
			hit = c >= 0
		}
	}
	if hit {
		return isTrue
	}
	return isFalse
}

// lookup finds a column's value in a row image, first where a row in table order holds it.
func lookup(row change.Row, name string, hint int) (json.RawMessage, bool) {
	if hint < len(row) && row[hint].Name == name {
		return row[hint].Value, true
	}
	return row.Get(name)
}

// contains reports whether v is one of an in's values, by binary search.
func (n *node) contains(v *scalar) bool {
	lo, hi := 0, len(n.set)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch c := compare(n.typ, v, &n.set[mid].v); {
		case c == 0:
			return true
		case c > 0:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return false
}
