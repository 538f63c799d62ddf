package filter

import "slices"

// IndexKeys tells the router where it may file the filter: a column, and keys such that a row
// can match (Eval returns True) only if the column is in the row and the key of its value,
// Key(type, value), is one of keys. The router can then find the filter by looking the row's
// key up, rather than evaluating every filter on the table. ok is false when the filter has no
// such column, and the router must evaluate it for every row.
//
// The keys come from an eq or an in on one column: the filter itself, or an operand of an
// and at the top level (ands within it included). Where there are several, the one with fewest
// keys wins, then the first: so eq is preferred over in. An or whose every operand has keys for
// one column has their union. keys is sorted, without duplicates; it is empty for a filter no
// row can match (an in of no values).
//
// A row image in which the column is absent has no key, yet the filter may evaluate to Unknown
// on it: a router that must act on Unknown (to send a conservative update) has to consider
// every filter filed under a column the image lacks.
func (f *Filter) IndexKeys() (col string, keys []string, ok bool) {
	if f == nil || !f.idxOK {
		return "", nil, false
	}
	return f.idxCol, slices.Clone(f.idxKeys), true
}

func indexOf(n *node) (col string, keys []string, ok bool) {
	if n == nil {
		return "", nil, false
	}
	switch n.op {
	case opEq:
		return n.col, []string{n.lit.key}, true
	case opIn:
		keys = make([]string, 0, len(n.set))
		for _, l := range n.set {
			keys = append(keys, l.key)
		}
		slices.Sort(keys) // the set is in value order; keys go in one order for every type
		return n.col, keys, true
	case opAnd:
		for _, k := range n.kids {
			if c, ks, kok := indexOf(k); kok && (!ok || len(ks) < len(keys)) {
				col, keys, ok = c, ks, true
			}
		}
		return col, keys, ok
	case opOr:
		if len(n.kids) == 0 {
			return "", nil, false
		}
		for i, k := range n.kids {
			c, ks, kok := indexOf(k)
			if !kok || (i > 0 && c != col) {
				return "", nil, false
			}
			col = c
			keys = append(keys, ks...)
		}
		slices.Sort(keys)
		return col, slices.Compact(keys), true
	}
	return "", nil, false
}

// appendNode appends the canonical JSON form of n.
func appendNode(dst []byte, n *node) []byte {
	dst = append(dst, `{"`...)
	dst = append(dst, n.op.String()...)
	dst = append(dst, `":`...)
	switch n.op {
	case opAnd, opOr:
		dst = append(dst, '[')
		for i, k := range n.kids {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendNode(dst, k)
		}
		dst = append(dst, ']')
	case opNot:
		dst = appendNode(dst, n.kids[0])
	case opIsNull, opNotNull:
		dst = appendJSONString(dst, n.col)
	case opIn:
		dst = append(dst, '[')
		dst = appendJSONString(dst, n.col)
		dst = append(dst, ",["...)
		for i, l := range n.set {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, l.json...)
		}
		dst = append(dst, "]]"...)
	default:
		dst = append(dst, '[')
		dst = appendJSONString(dst, n.col)
		dst = append(dst, ',')
		dst = append(dst, n.lit.json...)
		dst = append(dst, ']')
	}
	return append(dst, '}')
}
