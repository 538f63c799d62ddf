package filter

import (
	"strconv"
	"strings"
)

// SQL returns the filter as a SQL boolean expression over the table's columns, for the WHERE
// clause of a query that reads the rows the filter matches (a table subscription's snapshot).
// Every value goes into args, as a string, and the expression names it $n, n counting on from
// the args already there, with a cast to the column's type: values are never spelt into the
// SQL. Strings are sent in text format (pgx does so for a string argument), which Postgres
// parses by the cast.
//
// The expression keeps the rows the filter calls True, and when exact it keeps exactly those.
// It is exact unless a number literal lies beyond what numeric can hold or a text literal
// holds a NUL (no Postgres text does, and it cannot be a parameter); then the comparison is
// left out, as TRUE or FALSE, whichever keeps more rows where it stands (under an even or odd
// number of nots), so the expression still keeps every row the filter matches. A caller that
// also evaluates each row with Eval gets the filter's answer either way, and should: Eval
// decides, the expression only narrows the scan.
//
// It means what Eval means only under the settings the changefeed pins (extra_float_digits 3,
// DateStyle ISO, IntervalStyle postgres): floats and the types compared as text are compared as
// they print. Text compares bytewise, as Eval does: ranges and like under COLLATE "C". An eq or
// in on a text column is spelt plainly where it keeps rows (so an index on the column serves
// it), which is bytewise under every deterministic collation, the kind of every built-in and
// default one; under a nondeterministic collation it keeps more rows, never fewer, and is not
// exact. A timestamp compares to the millisecond, as Eval does, by the range of instants that
// truncate to the literal's millisecond, so an index serves it too.
//
// An absent filter gives TRUE.
func (f *Filter) SQL(args *[]any) (where string, exact bool) {
	if f == nil || f.root == nil {
		return "TRUE", true
	}
	w := sqlWriter{args: args, exact: true}
	w.node(f.root, true)
	return w.b.String(), w.exact
}

// sqlWriter renders one filter. pos, threaded through, is true where the node stands under an
// even number of nots: there a TRUE keeps more rows, under an odd number a FALSE does.
type sqlWriter struct {
	b     strings.Builder
	args  *[]any
	exact bool
}

func (w *sqlWriter) node(n *node, pos bool) {
	switch n.op {
	case opAnd, opOr:
		if len(n.kids) == 0 {
			if n.op == opAnd {
				w.b.WriteString("TRUE")
			} else {
				w.b.WriteString("FALSE")
			}
			return
		}
		sep := " AND "
		if n.op == opOr {
			sep = " OR "
		}
		w.b.WriteByte('(')
		for i, k := range n.kids {
			if i > 0 {
				w.b.WriteString(sep)
			}
			w.node(k, pos)
		}
		w.b.WriteByte(')')
		return
	case opNot:
		w.b.WriteString("(NOT ")
		w.node(n.kids[0], !pos)
		w.b.WriteByte(')')
		return
	}
	w.column(n, pos)
}

// inexact stands in for a comparison the SQL cannot make: whatever keeps more rows where it
// stands.
func (w *sqlWriter) inexact(pos bool) {
	w.exact = false
	if pos {
		w.b.WriteString("TRUE")
	} else {
		w.b.WriteString("FALSE")
	}
}

// param adds a value and writes its placeholder with its cast.
func (w *sqlWriter) param(v, cast string) {
	*w.args = append(*w.args, v)
	w.b.WriteByte('$')
	w.b.WriteString(strconv.Itoa(len(*w.args)))
	w.b.WriteString("::")
	w.b.WriteString(cast)
}

// sqlOps spells the comparison operators.
var sqlOps = [...]string{opEq: " = ", opNeq: " <> ", opLt: " < ", opLte: " <= ", opGt: " > ", opGte: " >= "}

// column renders a column operator.
func (w *sqlWriter) column(n *node, pos bool) {
	ident := quoteIdent(n.col)
	switch n.op {
	case opIsNull:
		w.b.WriteString(ident + " IS NULL")
		return
	case opNotNull:
		w.b.WriteString(ident + " IS NOT NULL")
		return
	case opIn:
		if len(n.set) == 0 {
			// As Eval: x IN () is false, even for NULL.
			w.b.WriteString("FALSE")
			return
		}
	}
	switch n.typ {
	case Number:
		w.number(n, ident, pos)
	case Text, Char, Other:
		w.text(n, ident, pos)
	case Bool:
		w.plain(n, ident, "bool")
	case UUID:
		w.plain(n, ident, "uuid")
	case Date:
		w.plain(n, ident, "date")
	case Timestamp, LocalTimestamp:
		w.timestamp(n, ident)
	default:
		// Parse admits only the null tests on other types.
		w.inexact(pos)
	}
}

// literals returns the canonical spellings of a column operator's values: the one, or an in's.
func (n *node) literals() []string {
	if n.op != opIn {
		return []string{n.lit.key}
	}
	keys := make([]string, len(n.set))
	for i := range n.set {
		keys[i] = n.set[i].key
	}
	return keys
}

// compare writes expr op value(s), for one value or an in's list, each value cast.
func (w *sqlWriter) compare(n *node, expr, cast string, keys []string) {
	w.b.WriteString(expr)
	if n.op != opIn {
		w.b.WriteString(sqlOps[n.op])
		w.param(keys[0], cast)
		return
	}
	w.b.WriteString(" IN (")
	for i, k := range keys {
		if i > 0 {
			w.b.WriteString(", ")
		}
		w.param(k, cast)
	}
	w.b.WriteByte(')')
}

// plain renders a type whose SQL comparison is Eval's: bool, uuid (by value, whatever the
// spelling), date (by day, infinities at the ends).
func (w *sqlWriter) plain(n *node, ident, cast string) {
	w.compare(n, ident, cast, n.literals())
}

// number renders a Number column. Eval compares exact decimal values. numeric and the integer
// types compare exactly in SQL too; an integer column against int8 values keeps its index. A
// float compares as the decimal Herald sends for it, which is its text under
// extra_float_digits 3 (the shortest that reads back as the same float), read as numeric:
// comparing the float itself would round the literal to a float first.
func (w *sqlWriter) number(n *node, ident string, pos bool) {
	keys := n.literals()
	for _, k := range keys {
		if !numericFits(k) {
			w.inexact(pos)
			return
		}
	}
	switch n.oid {
	case float4OID, float8OID:
		w.compare(n, "("+ident+"::text)::numeric", "numeric", keys)
		return
	case numericOID:
		w.compare(n, ident, "numeric", keys)
		return
	}
	expr := ident
	if n.oid == oidOID {
		expr = ident + "::int8" // oid has no comparison with the other integer types
	}
	cast := "int8"
	for _, k := range keys {
		if _, err := strconv.ParseInt(k, 10, 64); err != nil {
			cast = "numeric" // a fraction, or beyond int8: the column is compared as numeric
			break
		}
	}
	w.compare(n, expr, cast, keys)
}

// Bounds of numeric: digits before the decimal point, and after it.
const (
	numericMaxWeightDigits = 131072
	numericMaxScale        = 16383
)

// numericFits reports whether a canonical number spelling (appendDecimal) is a value numeric
// can hold: NaN and the infinities are; a finite value must have at most 131072 digits before
// the point and 16383 after it.
func numericFits(key string) bool {
	switch key {
	case "NaN", "Infinity", "-Infinity":
		return true
	}
	d, ok := parseDecimal([]byte(key))
	if !ok {
		return false
	}
	if d.n == 0 {
		return true
	}
	return d.exp <= numericMaxWeightDigits && int64(d.n)-d.exp <= numericMaxScale
}

// text renders a Text, Char or Other column, compared bytewise as Eval compares. Ranges and
// like compare under COLLATE "C". An eq or in where it keeps rows, and a neq where it drops
// them, compare plainly, so an index on the column serves them: bytewise under any
// deterministic collation, and under a nondeterministic one still keeping (or dropping) more
// rows than Eval, never fewer; elsewhere they compare under COLLATE "C" too. A char(n) compares
// as bpchar, which ignores trailing spaces as Eval does, except in like, which sees them. The
// types compared as text are compared as their text.
func (w *sqlWriter) text(n *node, ident string, pos bool) {
	keys := n.literals()
	if n.op == opLike {
		keys = []string{n.pattern}
	}
	for _, k := range keys {
		if strings.IndexByte(k, 0) >= 0 {
			w.inexact(pos)
			return
		}
	}
	expr, cast := ident, "text"
	switch {
	case n.typ == Char:
		cast = "bpchar"
	case n.typ == Other, n.oid == charOID:
		// Compared as the text Postgres prints; "char" has no comparison with text.
		expr = "(" + ident + "::text)"
	}
	var plain bool
	switch n.op {
	case opEq, opIn:
		plain = pos
	case opNeq:
		plain = !pos
	}
	if !plain || n.typ == Other {
		expr += ` COLLATE "C"`
	}
	if n.op == opLike {
		w.b.WriteString(expr + " LIKE ")
		w.param(n.pattern, "text")
		return
	}
	w.compare(n, expr, cast, keys)
}

// timestamp renders a Timestamp or LocalTimestamp column. Eval truncates a row's value to the
// millisecond and compares it with the literal, itself a whole millisecond L: so the value
// equals L exactly when it lies in [L, L + 1 ms), is below L when it lies before L, and above
// it from L + 1 ms on. The infinities compare as themselves.
func (w *sqlWriter) timestamp(n *node, ident string) {
	cast := "timestamptz"
	if n.typ == LocalTimestamp {
		cast = "timestamp"
	}
	keys := n.literals()
	if n.op == opIn {
		w.b.WriteByte('(')
		for i, k := range keys {
			if i > 0 {
				w.b.WriteString(" OR ")
			}
			w.instant(opEq, ident, cast, k)
		}
		w.b.WriteByte(')')
		return
	}
	w.instant(n.op, ident, cast, keys[0])
}

// instant writes one timestamp comparison with literal key.
func (w *sqlWriter) instant(o op, ident, cast, key string) {
	if key == "infinity" || key == "-infinity" {
		w.b.WriteString(ident + sqlOps[o])
		w.param(key, cast)
		return
	}
	*w.args = append(*w.args, key)
	lo := "$" + strconv.Itoa(len(*w.args)) + "::" + cast
	hi := "(" + lo + " + interval '1 millisecond')"
	switch o {
	case opEq:
		w.b.WriteString("(" + ident + " >= " + lo + " AND " + ident + " < " + hi + ")")
	case opNeq:
		w.b.WriteString("(" + ident + " < " + lo + " OR " + ident + " >= " + hi + ")")
	case opLt:
		w.b.WriteString(ident + " < " + lo)
	case opLte:
		w.b.WriteString(ident + " < " + hi)
	case opGt:
		w.b.WriteString(ident + " >= " + hi)
	case opGte:
		w.b.WriteString(ident + " >= " + lo)
	}
}

// quoteIdent quotes a column name as a SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
