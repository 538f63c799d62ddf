package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Bounds on a filter. Each keeps what one subscription costs per row, and to compile, small and
// predictable: a filter is untrusted input evaluated against every change of its table.
const (
	// MaxBytes bounds the filter's JSON text, checked before it is read. It matches the default
	// frame limit, so a filter that fits in a frame is not refused for its length alone.
	MaxBytes = 64 << 10
	// MaxDepth bounds nesting: the root is at depth 1, and each and, or and not puts its
	// operands one deeper. Evaluation recurses, and no sensible filter nests deeper.
	MaxDepth = 16
	// MaxNodes bounds operators plus values (each value of an in counts): the work one row
	// can cost.
	MaxNodes = 256
	// MaxInValues bounds the values of one in. A longer list is a sign that the subscription
	// wants a join or a policy rule, not a filter.
	MaxInValues = 100
	// MaxLiteralBytes bounds one value: a string's bytes, a number's characters.
	MaxLiteralBytes = 1024
	// MaxPatternBytes bounds a like pattern, which costs memory per distinct character (see
	// like.go), so its bound is tighter than a value's.
	MaxPatternBytes = 256
)

// parser reads one filter from its JSON tokens, checking it as it goes, so that a refused
// filter is refused at its first fault without reading the rest.
type parser struct {
	dec   *json.Decoder
	cols  []Column
	nodes int
}

// Parse checks a filter against a table's columns, in table order, and compiles it. A nil or
// empty raw, or JSON null, is the filter that matches every row. A refused filter's error is an
// *Error. Neither raw nor cols is retained.
func Parse(raw json.RawMessage, cols []Column) (*Filter, error) {
	trimmed := bytes.Trim(raw, " \t\r\n")
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return &Filter{text: "null"}, nil
	}
	if len(raw) > MaxBytes {
		return nil, &Error{Code: CodeBadFilter,
			Detail: "the filter is " + strconv.Itoa(len(raw)) + " bytes long, more than " + strconv.Itoa(MaxBytes),
			Fix:    "write a shorter filter"}
	}
	p := &parser{dec: json.NewDecoder(bytes.NewReader(raw)), cols: cols}
	p.dec.UseNumber()
	root, err := p.node("", 1)
	if err != nil {
		return nil, err
	}
	if tok, err := p.dec.Token(); err != io.EOF {
		detail := "the filter goes on after its end"
		if err == nil {
			detail += ", with " + describe(tok)
		}
		return nil, &Error{Code: CodeBadFilter, Detail: detail, Fix: "send one JSON object", Err: err}
	}
	return newFilter(root), nil
}

// token reads the next token; a decoder error is a bad_filter at path.
func (p *parser) token(path string) (json.Token, *Error) {
	tok, err := p.dec.Token()
	if err == nil {
		return tok, nil
	}
	detail := "not valid JSON: " + err.Error()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		detail = "the filter ends early"
	}
	return nil, &Error{Code: CodeBadFilter, Path: path, Detail: detail, Fix: "send a complete JSON object", Err: err}
}

func badf(path, detail, fix string) *Error {
	return &Error{Code: CodeBadFilter, Path: path, Detail: detail, Fix: fix}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// count adds one node and checks the bound.
func (p *parser) count(path string) *Error {
	p.nodes++
	if p.nodes > MaxNodes {
		return badf(path, "the filter has more than "+strconv.Itoa(MaxNodes)+" operators and values",
			"write a smaller filter: merge eq on one column into one in, or move the rule into policy")
	}
	return nil
}

// node reads one filter object at path.
func (p *parser) node(path string, depth int) (*node, *Error) {
	tok, err := p.token(path)
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, badf(path, "a filter is a JSON object with one operator; got "+describe(tok),
			`write an object like {"eq":["id",1]}`)
	}
	if depth > MaxDepth {
		return nil, badf(path, "the filter nests deeper than "+strconv.Itoa(MaxDepth)+" levels",
			"flatten it: an and inside an and (or an or inside an or) can be one")
	}
	if err := p.count(path); err != nil {
		return nil, err
	}
	tok, err = p.token(path)
	if err != nil {
		return nil, err
	}
	key, ok := tok.(string)
	if !ok {
		return nil, badf(path, "an empty object is not a filter", `write one operator, like {"eq":["id",1]}`)
	}
	o, ok := lookupOp(key)
	if !ok {
		fix := "use one of " + strings.Join(opNames[:], ", ")
		if lo, ok := lookupOp(strings.ToLower(key)); ok {
			fix = "operators are lowercase: " + lo.String()
		}
		// The path names the object: the key is the client's, of any length.
		return nil, badf(path, "unknown operator "+quote(key), fix)
	}
	opPath := join(path, key)
	n, err := p.operands(o, opPath, depth)
	if err != nil {
		return nil, err
	}
	tok, err = p.token(path)
	if err != nil {
		return nil, err
	}
	if extra, ok := tok.(string); ok {
		return nil, badf(path, "an object holds one operator; this one holds "+quote(key)+" and "+quote(extra),
			`combine operators with and: {"and":[{...},{...}]}`)
	}
	return n, nil
}

// operands reads the operands of operator o at opPath.
func (p *parser) operands(o op, opPath string, depth int) (*node, *Error) {
	n := &node{op: o}
	switch o {
	case opAnd, opOr:
		if err := p.open(opPath, o, `{"`+o.String()+`":[{...},{...}]}`); err != nil {
			return nil, err
		}
		for i := 0; p.dec.More(); i++ {
			kid, err := p.node(index(opPath, i), depth+1)
			if err != nil {
				return nil, err
			}
			n.kids = append(n.kids, kid)
		}
		if _, err := p.token(opPath); err != nil { // the ]
			return nil, err
		}
		return n, nil

	case opNot:
		kid, err := p.node(opPath, depth+1)
		if err != nil {
			return nil, err
		}
		n.kids = []*node{kid}
		return n, nil

	case opIsNull, opNotNull:
		tok, err := p.token(opPath)
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, badf(opPath, o.String()+" takes a column name; got "+describe(tok),
				`write {"`+o.String()+`":"column"}`)
		}
		c, err := p.column(name, opPath)
		if err != nil {
			return nil, err
		}
		n.setColumn(c)
		return n, nil
	}

	// A column operator: [column, value] or, for in, [column, [values]].
	shape := `{"` + o.String() + `":["column",value]}`
	if o == opIn {
		shape = `{"in":["column",[value,...]]}`
	}
	if err := p.open(opPath, o, shape); err != nil {
		return nil, err
	}
	colPath := index(opPath, 0)
	tok, err := p.token(colPath)
	if err != nil {
		return nil, err
	}
	name, ok := tok.(string)
	if !ok {
		detail := o.String() + " takes a column name first; got " + describe(tok)
		if d, isDelim := tok.(json.Delim); isDelim && d == ']' {
			detail = o.String() + " takes two operands; got none"
			colPath = opPath
		}
		return nil, badf(colPath, detail, "write "+shape)
	}
	c, err := p.column(name, colPath)
	if err != nil {
		return nil, err
	}
	if !c.typ.allows(o) {
		fix := "use " + c.typ.allowedOps()
		if c.typ == Unsupported {
			fix = "column " + c.describe() + " takes only is_null and not_null; filter on another column"
		} else if o == opLike {
			fix = "like works on text columns only; " + fix
		}
		return nil, badf(opPath, o.String()+" does not apply to column "+c.describe(), fix)
	}
	n.setColumn(c)

	if !p.dec.More() {
		what := "a value"
		if o == opIn {
			what = "a list"
		}
		return nil, badf(opPath, o.String()+" takes two operands, a column and "+what+"; got only the column",
			"write "+shape)
	}
	valPath := index(opPath, 1)
	if o == opIn {
		err = p.list(n, c, valPath)
	} else {
		err = p.value(n, c, valPath)
	}
	if err != nil {
		return nil, err
	}
	tok, err = p.token(opPath)
	if err != nil {
		return nil, err
	}
	if tok != json.Delim(']') {
		return nil, badf(index(opPath, 2), o.String()+" takes two operands; got more", "write "+shape)
	}
	return n, nil
}

// open reads the [ that starts an operator's operands.
func (p *parser) open(opPath string, o op, shape string) *Error {
	tok, err := p.token(opPath)
	if err != nil {
		return err
	}
	if tok != json.Delim('[') {
		return badf(opPath, o.String()+" takes an array of operands; got "+describe(tok), "write "+shape)
	}
	return nil
}

// column resolves a column name against the table.
func (p *parser) column(name, path string) (column, *Error) {
	for i, c := range p.cols {
		if c.Name == name {
			return column{name: name, oid: c.OID, typ: TypeOf(c.OID), hint: i}, nil
		}
	}
	return column{}, &Error{Code: CodeUnknownColumn, Path: path,
		Detail: "the table has no column " + quote(name), Fix: p.suggest(name)}
}

// maxListedColumns bounds how many of a table's column names an error lists.
const maxListedColumns = 20

// suggest names the column the client probably meant, and the table's columns.
func (p *parser) suggest(name string) string {
	var fix string
	best, bestDist := "", 3 // suggest only within two edits
	for _, c := range p.cols {
		if strings.EqualFold(c.Name, name) {
			best, bestDist = c.Name, 0
			break
		}
		if d := editDistance(c.Name, name, bestDist); d < bestDist {
			best, bestDist = c.Name, d
		}
	}
	if best != "" {
		fix = "did you mean " + quote(best) + "? "
	}
	names := make([]string, 0, min(len(p.cols), maxListedColumns))
	for i, c := range p.cols {
		if i == maxListedColumns {
			names = append(names, "...")
			break
		}
		names = append(names, c.Name)
	}
	return fix + "the table's columns are: " + strings.Join(names, ", ")
}

// editDistance is the Levenshtein distance between a and b, or limit when it is at least that.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

// value reads the value operand of a comparison or like.
func (p *parser) value(n *node, c column, path string) *Error {
	if err := p.count(path); err != nil {
		return err
	}
	tok, err := p.token(path)
	if err != nil {
		return err
	}
	if n.op == opLike {
		pattern, ok := tok.(string)
		if !ok {
			return badf(path, "like takes a pattern string; got "+describe(tok), `write a pattern, like "abc%"`)
		}
		if len(pattern) > MaxPatternBytes {
			return badf(path, "the pattern is "+strconv.Itoa(len(pattern))+" bytes long, more than the "+
				strconv.Itoa(MaxPatternBytes)+" a like pattern may be", "write a shorter pattern")
		}
		lm, ok := compileLike(pattern)
		if !ok {
			return badf(path, "the pattern ends with a backslash, which escapes nothing",
				`escape a backslash as \\ (in JSON, "\\\\")`)
		}
		n.like, n.pattern = lm, pattern
		n.lit.json = appendJSONString(nil, pattern)
		return nil
	}
	lit, lerr := compileLiteral(tok, c, n.op, path)
	if lerr != nil {
		return lerr
	}
	n.lit = lit
	return nil
}

// list reads the values of an in.
func (p *parser) list(n *node, c column, path string) *Error {
	tok, err := p.token(path)
	if err != nil {
		return err
	}
	if tok != json.Delim('[') {
		fix := `write the values as an array: {"in":[` + quote(c.name) + `,[...]]}`
		return badf(path, "in takes a list of values; got "+describe(tok), fix)
	}
	for i := 0; p.dec.More(); i++ {
		vpath := index(path, i)
		if i == MaxInValues {
			return badf(vpath, "in takes at most "+strconv.Itoa(MaxInValues)+" values",
				"narrow the list, or split the subscription")
		}
		if err := p.count(vpath); err != nil {
			return err
		}
		tok, err := p.token(vpath)
		if err != nil {
			return err
		}
		lit, lerr := compileLiteral(tok, c, opIn, vpath)
		if lerr != nil {
			return lerr
		}
		n.set = append(n.set, lit)
	}
	if _, err := p.token(path); err != nil { // the ]
		return err
	}
	slices.SortStableFunc(n.set, func(a, b literal) int { return compare(c.typ, &a.v, &b.v) })
	n.set = slices.CompactFunc(n.set, func(a, b literal) bool { return compare(c.typ, &a.v, &b.v) == 0 })
	return nil
}
