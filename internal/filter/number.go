package filter

// Numbers compare by exact decimal value, never through a float64: int8 and numeric values
// beyond what a float64 holds arrive as strings of their digits, and two of them a float64 would
// round to the same value are still different rows.

// numClass orders the kinds of number as Postgres orders float8 and numeric: -Infinity, then
// every finite value, then Infinity, then NaN, which equals itself.
type numClass int8

const (
	numNegInf numClass = iota
	numFinite
	numPosInf
	numNaN
)

// maxExp bounds an exponent as it is read. Any value whose exponent goes past it compares as if
// its exponent were at the bound, which is still exact against every value with fewer than
// 2^40 digits: no value Postgres can hold comes near.
const maxExp = 1 << 40

// decimal is a number parsed for comparison. A finite value is 0.d1d2...dn × 10^exp with d1
// not zero, or zero (n == 0). Its digits are not copied: digits spans them, first significant
// to last, in the text it was parsed from, and may hold the decimal point.
type decimal struct {
	class  numClass
	neg    bool
	digits []byte
	n      int   // significant digits in digits
	exp    int64 // see above
	// small is the value when it is an integer of at most 18 digits, for a fast compare of the
	// commonest case.
	small   int64
	isSmall bool
}

// parseDecimal reads a JSON number (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?): the
// spelling of every number Herald writes, and of every numeric string it writes but NaN and the
// infinities.
func parseDecimal(b []byte) (d decimal, ok bool) {
	d.class = numFinite
	i := 0
	if i < len(b) && b[i] == '-' {
		d.neg = true
		i++
	}
	intStart := i
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	intEnd := i
	if intEnd == intStart || (b[intStart] == '0' && intEnd-intStart > 1) {
		return d, false
	}
	fracEnd := intEnd
	if i < len(b) && b[i] == '.' {
		i++
		for i < len(b) && isDigit(b[i]) {
			i++
		}
		if i == intEnd+1 {
			return d, false
		}
		fracEnd = i
	}
	var e int64
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		start := i
		for i < len(b) && isDigit(b[i]) {
			if e < maxExp {
				e = e*10 + int64(b[i]-'0')
			}
			i++
		}
		if i == start {
			return d, false
		}
		e = min(e, maxExp)
		if eneg {
			e = -e
		}
	}
	if i != len(b) {
		return d, false
	}

	first := -1
	for k := intStart; k < fracEnd; k++ {
		if b[k] != '.' && b[k] != '0' {
			first = k
			break
		}
	}
	if first < 0 {
		d.neg = false // -0 is 0
		d.isSmall = true
		return d, true
	}
	last := fracEnd - 1
	for b[last] == '0' || b[last] == '.' {
		last--
	}
	d.digits = b[first : last+1]
	d.n = len(d.digits)
	if first < intEnd && last > intEnd {
		d.n-- // the point lies between them
	}
	if first < intEnd {
		d.exp = int64(intEnd - first)
	} else {
		d.exp = -int64(first - intEnd - 1)
	}
	d.exp += e

	if d.exp >= int64(d.n) && d.exp <= 18 {
		var v int64
		for _, c := range d.digits {
			if c != '.' {
				v = v*10 + int64(c-'0')
			}
		}
		for k := int64(d.n); k < d.exp; k++ {
			v *= 10
		}
		if d.neg {
			v = -v
		}
		d.small, d.isSmall = v, true
	}
	return d, true
}

// parseNumber reads a row value or literal of a Number column: a JSON number, or a JSON string
// holding one or NaN, Infinity or -Infinity.
func parseNumber(raw []byte) (decimal, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return parseDecimal(raw)
	}
	if len(raw) < 2 || raw[len(raw)-1] != '"' {
		return decimal{}, false
	}
	return parseNumberText(raw[1 : len(raw)-1])
}

// parseNumberText reads the content of a numeric string.
func parseNumberText(s []byte) (decimal, bool) {
	switch string(s) {
	case "NaN":
		return decimal{class: numNaN}, true
	case "Infinity":
		return decimal{class: numPosInf}, true
	case "-Infinity":
		return decimal{class: numNegInf}, true
	}
	return parseDecimal(s)
}

// compareDecimal orders a and b: -1, 0 or +1.
func compareDecimal(a, b *decimal) int {
	if a.isSmall && b.isSmall {
		return cmp3(a.small, b.small)
	}
	if a.class != b.class {
		return cmp3(a.class, b.class)
	}
	if a.class != numFinite {
		return 0
	}
	sa, sb := a.sign(), b.sign()
	if sa != sb {
		return cmp3(sa, sb)
	}
	if sa == 0 {
		return 0
	}
	c := compareMagnitude(a, b)
	if sa < 0 {
		return -c
	}
	return c
}

func (d *decimal) sign() int {
	switch {
	case d.n == 0:
		return 0
	case d.neg:
		return -1
	}
	return 1
}

// compareMagnitude orders two non-zero finite values by absolute value.
func compareMagnitude(a, b *decimal) int {
	if a.exp != b.exp {
		return cmp3(a.exp, b.exp)
	}
	i, j := 0, 0
	for {
		for i < len(a.digits) && a.digits[i] == '.' {
			i++
		}
		for j < len(b.digits) && b.digits[j] == '.' {
			j++
		}
		switch {
		case i == len(a.digits) && j == len(b.digits):
			return 0
		case i == len(a.digits):
			return -1 // b has more digits, and its last one is not zero
		case j == len(b.digits):
			return 1
		case a.digits[i] != b.digits[j]:
			return cmp3(a.digits[i], b.digits[j])
		}
		i++
		j++
	}
}

// appendDecimal appends the canonical spelling of d: the one key and literal spelling of its
// value. Finite values are JSON numbers: plain up to 21 integer digits or 6 leading fraction
// zeros, as JavaScript prints them, and in exponent form beyond. NaN and the infinities are
// their names.
func appendDecimal(dst []byte, d *decimal) []byte {
	switch d.class {
	case numNaN:
		return append(dst, "NaN"...)
	case numPosInf:
		return append(dst, "Infinity"...)
	case numNegInf:
		return append(dst, "-Infinity"...)
	}
	if d.n == 0 {
		return append(dst, '0')
	}
	if d.neg {
		dst = append(dst, '-')
	}
	n, exp := int64(d.n), d.exp
	switch {
	case exp >= n && exp <= 21:
		dst = appendDigits(dst, d.digits)
		for k := n; k < exp; k++ {
			dst = append(dst, '0')
		}
	case exp > 0 && exp < n:
		k := int64(0)
		for _, c := range d.digits {
			if c == '.' {
				continue
			}
			if k == exp {
				dst = append(dst, '.')
			}
			dst = append(dst, c)
			k++
		}
	case exp <= 0 && exp > -6:
		dst = append(dst, '0', '.')
		for k := exp; k < 0; k++ {
			dst = append(dst, '0')
		}
		dst = appendDigits(dst, d.digits)
	default:
		k := 0
		for _, c := range d.digits {
			if c == '.' {
				continue
			}
			if k == 1 {
				dst = append(dst, '.')
			}
			dst = append(dst, c)
			k++
		}
		dst = append(dst, 'e')
		if exp-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = appendInt(dst, exp-1)
	}
	return dst
}

func appendDigits(dst, digits []byte) []byte {
	for _, c := range digits {
		if c != '.' {
			dst = append(dst, c)
		}
	}
	return dst
}

func appendInt(dst []byte, v int64) []byte {
	if v < 0 {
		dst = append(dst, '-')
		v = -v
	}
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func cmp3[T int | int8 | int64 | byte | numClass](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
