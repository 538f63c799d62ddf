package pgvalue

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/heraldrt/herald/internal/change"
)

// AppendJSON appends the JSON form of a text-format value of type oid to dst. It never fails:
// text it cannot read as its type is emitted as a JSON string of the text.
//
// dst must not share memory with text: the value is read while dst is appended to.
func AppendJSON(dst []byte, oid uint32, text []byte) []byte {
	switch oid {
	case TextOID, VarcharOID, BPCharOID, NameOID, CharOID, UUIDOID,
		DateOID, TimeOID, TimetzOID, IntervalOID:
		// Listed ahead of the array lookup only so that the commonest columns skip a map probe.
		return appendString(dst, text)
	case Int2OID:
		return appendInteger(dst, text, 1<<15-1, 1<<15)
	case Int4OID:
		return appendInteger(dst, text, 1<<31-1, 1<<31)
	case OIDOID:
		return appendInteger(dst, text, 1<<32-1, 0)
	case Int8OID:
		return appendInteger(dst, text, maxSafeInteger, maxSafeInteger)
	case NumericOID:
		return appendNumeric(dst, text)
	case Float4OID, Float8OID:
		return appendFloat(dst, text)
	case BoolOID:
		return appendBool(dst, text)
	case JSONOID:
		return appendRawJSON(dst, text, true)
	case JSONBOID:
		return appendRawJSON(dst, text, false)
	case ByteaOID:
		return appendBytea(dst, text)
	case TimestamptzOID:
		return appendTimestamp(dst, text, true)
	case TimestampOID:
		return appendTimestamp(dst, text, false)
	}
	if elem, delim, ok := arrayElem(oid); ok {
		return appendArray(dst, text, elem, delim)
	}
	return appendString(dst, text)
}

// JSON is AppendJSON into a new slice.
func JSON(oid uint32, text []byte) json.RawMessage {
	return AppendJSON(make([]byte, 0, len(text)+8), oid, text)
}

// maxSafeInteger is 2^53: every integer of at most this magnitude is exact in a float64, which
// is the only number a JavaScript client has, so a larger one would silently change in transit.
const maxSafeInteger = 1 << 53

// appendString emits text as a JSON string. The conversion to string does not copy:
// AppendJSONString only reads s while it runs and keeps nothing of it, and a copy here would be
// an allocation for every text value longer than the compiler's 32-byte stack buffer.
func appendString(dst, text []byte) []byte {
	return change.AppendJSONString(dst, unsafe.String(unsafe.SliceData(text), len(text)))
}

// appendInteger emits an integer type as a JSON number when its magnitude is at most maxPos
// (maxNeg when negative), and as a string of its digits otherwise.
func appendInteger(dst, text []byte, maxPos, maxNeg uint64) []byte {
	neg, mag, ok := parseInteger(text)
	if !ok || (!neg && mag > maxPos) || (neg && mag > maxNeg) {
		return appendString(dst, text)
	}
	return append(dst, text...)
}

// parseInteger reads the decimal text Postgres prints for an integer: an optional '-' and digits
// without a leading zero. A '+' or a leading zero, which Postgres reads but never prints and
// JSON does not allow, is refused, so an accepted text is also a valid JSON number.
func parseInteger(text []byte) (neg bool, mag uint64, ok bool) {
	if len(text) > 0 && text[0] == '-' {
		neg, text = true, text[1:]
	}
	if len(text) == 0 || (text[0] == '0' && len(text) > 1) {
		return false, 0, false
	}
	for _, c := range text {
		if c < '0' || c > '9' {
			return false, 0, false
		}
		d := uint64(c - '0')
		if mag > (1<<64-1-d)/10 {
			return false, 0, false
		}
		mag = mag*10 + d
	}
	return neg, mag, true
}

// appendNumeric emits a numeric as a JSON number, in Postgres's own spelling, only when a
// float64 reader gets its exact value back; see numericRoundTrips.
func appendNumeric(dst, text []byte) []byte {
	if numericRoundTrips(text) {
		return append(dst, text...)
	}
	return appendString(dst, text)
}

const (
	// maxShortestDigits is the most significant digits the shortest decimal of a float64 has.
	maxShortestDigits = 17
	// safeDigits is DBL_DIG: a float64 tells apart any two decimals of this many significant
	// digits in its normal range, safeMinExp to safeMaxExp as powers of ten.
	safeDigits             = 15
	safeMinExp, safeMaxExp = -307, 307
)

// numericRoundTrips reports whether text is a plain decimal (-?D+(.D+)?, as numeric_out writes
// it) whose value is the shortest decimal of some float64. Such a text and the float64 it reads
// as name each other: a client that parses the JSON number and prints it back gets the same
// value, trailing zeros aside (1.10 comes back as 1.1). The test is exact: both sides are
// compared as digit strings, never as floats.
func numericRoundTrips(text []byte) bool {
	t := text
	if len(t) > 0 && t[0] == '-' {
		t = t[1:]
	}
	intLen := 0
	for intLen < len(t) && isDigit(t[intLen]) {
		intLen++
	}
	if intLen == 0 || (t[0] == '0' && intLen > 1) {
		return false
	}
	frac := t[intLen:]
	if len(frac) > 0 {
		if frac[0] != '.' || len(frac) == 1 {
			return false
		}
		frac = frac[1:]
		for _, c := range frac {
			if !isDigit(c) {
				return false
			}
		}
	}
	digitAt := func(k int) byte {
		if k < intLen {
			return t[k]
		}
		return frac[k-intLen]
	}
	n := intLen + len(frac)
	first := 0
	for first < n && digitAt(first) == '0' {
		first++
	}
	if first == n {
		return true // zero, in any scale
	}
	last := n - 1
	for digitAt(last) == '0' {
		last--
	}
	ns, exp := last-first+1, intLen-first-1
	switch {
	case ns > maxShortestDigits:
		return false
	case ns <= safeDigits && exp >= safeMinExp && exp <= safeMaxExp:
		// The float64 this reads as is nearer to it than to any other decimal of as few digits,
		// so its shortest decimal is this one. TestSafeDigitsAreShortest checks the claim.
		return true
	}
	var sig [maxShortestDigits]byte
	for k := first; k <= last; k++ {
		sig[k-first] = digitAt(k)
	}
	return isShortestFloat64(sig[:ns], exp)
}

// isShortestFloat64 reports whether the decimal sig[0].sig[1:] × 10^exp is the shortest decimal
// of the float64 nearest to it. It spells the value the way strconv writes a float64 in 'e'
// form, reads that, writes the float back in its shortest 'e' form, and compares the spellings.
func isShortestFloat64(sig []byte, exp int) bool {
	var in, out [32]byte
	want := appendScientific(in[:0], sig, exp)
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(want), len(want)), 64)
	if err != nil {
		return false
	}
	got := strconv.AppendFloat(out[:0], f, 'e', -1, 64)
	return string(got) == string(want)
}

// appendScientific writes d1.d2d3...e±XX, with at least two exponent digits, as strconv's 'e'
// format does.
func appendScientific(dst, sig []byte, exp int) []byte {
	dst = append(dst, sig[0])
	if len(sig) > 1 {
		dst = append(dst, '.')
		dst = append(dst, sig[1:]...)
	}
	dst = append(dst, 'e')
	if exp < 0 {
		dst = append(dst, '-')
		exp = -exp
	} else {
		dst = append(dst, '+')
	}
	if exp < 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, int64(exp), 10)
}

// appendFloat emits a float4 or float8 as a JSON number. NaN and the infinities have no JSON
// number, so they, like anything else that is not one, become a string of their text.
func appendFloat(dst, text []byte) []byte {
	if isJSONNumber(text) {
		return append(dst, text...)
	}
	return appendString(dst, text)
}

// isJSONNumber reports whether b is a number in JSON's grammar: -?(0|[1-9]D*)(.D+)?([eE][+-]?D+)?
func isJSONNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i == len(b):
		return false
	case b[i] == '0':
		i++
	case isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		j := i
		for i < len(b) && isDigit(b[i]) {
			i++
		}
		if i == j {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := i
		for i < len(b) && isDigit(b[i]) {
			i++
		}
		if i == j {
			return false
		}
	}
	return i == len(b)
}

func appendBool(dst, text []byte) []byte {
	switch string(text) {
	case "t":
		return append(dst, "true"...)
	case "f":
		return append(dst, "false"...)
	}
	return appendString(dst, text)
}

// appendRawJSON passes json and jsonb on without decoding them: decoding would lose number
// precision and key order. A json value is compacted, the white space between its tokens
// dropped: Postgres keeps a json column's text as it was written, line breaks included, and a
// value must fit on one line (an SSE data line, a line of herald tail). jsonb is Postgres's own
// spelling, which is already one line. Text that is not valid JSON in UTF-8 (a SQL_ASCII
// database can hold any bytes) becomes a string, so the output stays valid JSON.
func appendRawJSON(dst, text []byte, compact bool) []byte {
	if !utf8.Valid(text) || !json.Valid(text) {
		return appendString(dst, text)
	}
	if compact {
		return change.AppendCompactJSON(dst, text)
	}
	return append(dst, text...)
}

// appendBytea keeps Postgres's hex spelling, \x0a0b, as a string, lowercase. A text that is not
// \x and whole hex bytes (an escape-format value, say) is a string of itself.
func appendBytea(dst, text []byte) []byte {
	if len(text) < 2 || text[0] != '\\' || text[1] != 'x' || len(text)%2 != 0 {
		return appendString(dst, text)
	}
	upper := false
	for _, c := range text[2:] {
		switch {
		case isDigit(c), 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			upper = true
		default:
			return appendString(dst, text)
		}
	}
	start := len(dst)
	dst = appendString(dst, text)
	if upper {
		// Hex digits are their own JSON spelling, so the digits sit after `"\\x` unchanged and
		// can be lowered in place.
		for i := start + len(`"\\x`); i < len(dst)-1; i++ {
			if c := dst[i]; 'A' <= c && c <= 'F' {
				dst[i] = c + ('a' - 'A')
			}
		}
	}
	return dst
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
