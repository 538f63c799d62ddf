package pgvalue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// ruleOIDs are the types with a rule of their own, and arrays of them: FuzzAppendJSON steers
// most of the fuzzer's OIDs onto these rather than onto the unknown-type path, which is one line.
var ruleOIDs = []uint32{
	BoolOID, ByteaOID, Int8OID, Int2OID, Int4OID, OIDOID, JSONOID, JSONBOID, Float4OID,
	Float8OID, NumericOID, TimestampOID, TimestamptzOID, TextOID, DateOID,
	BoolArrayOID, ByteaArrayOID, Int2ArrayOID, Int4ArrayOID, Int8ArrayOID, TextArrayOID,
	Float8ArrayOID, NumericArrayOID, JSONBArrayOID, JSONArrayOID, TimestampArrayOID,
	TimestamptzArrayOID, DateArrayOID, UUIDArrayOID, BoxArrayOID,
}

// appendJSONSeeds are one or two texts per branch of each rule. The table tests hold many more;
// seeding with all of them would spend a short fuzz run on gathering baseline coverage.
var appendJSONSeeds = []struct {
	oid  uint32
	text string
}{
	{Int4OID, "-2147483648"},
	{Int8OID, "9007199254740993"},
	{Int2OID, "007"},
	{NumericOID, "1.10"},
	{NumericOID, "0.30000000000000004"},
	{NumericOID, "0.1000000000000000055"},
	{NumericOID, "-Infinity"},
	{Float8OID, "1.5e-07"},
	{Float8OID, "NaN"},
	{BoolOID, "t"},
	{JSONBOID, `{"a": [1, 2.50]}`},
	{JSONOID, "\"\xff\""},
	{JSONOID, "\r\n{\"a\":\r\n[1,\t2]}\r\n"},
	{ByteaOID, `\xDEADbeef`},
	{ByteaOID, `\x0a0`},
	{TextOID, "a\"b\\c\n\x01\xff\u2028"},
	{TimestamptzOID, "2024-01-06 14:00:00.123456+05:30"},
	{TimestamptzOID, "1883-11-18 07:03:58-04:56:02"},
	{TimestamptzOID, "2024-01-06 14:00:00+0530"},
	{TimestamptzOID, "0044-03-15 10:00:00+00 BC"},
	{TimestamptzOID, "9999-12-31 23:00:00-05"},
	{TimestampOID, "2024-02-29 23:59:59.9999"},
	{Int4ArrayOID, "{{1,2},{3,NULL}}"},
	{Int4ArrayOID, "[1:2][0:0]={{1},{2}}"},
	{Int4ArrayOID, "{{1,2},{3}}"},
	{TextArrayOID, `{"a,b","c\"d",NULL,"NULL","",null}`},
	{JSONBArrayOID, `{"{\"a\": 1}","null",1.5}`},
	{TimestamptzArrayOID, `{"2024-01-06 14:00:00+05",infinity}`},
	{BoxArrayOID, `{(1,1),(0,0);(2,2),(1,1)}`},
	{16452, "happy"},
}

func FuzzAppendJSON(f *testing.F) {
	for _, s := range appendJSONSeeds {
		f.Add(s.oid, []byte(s.text))
	}
	f.Fuzz(func(t *testing.T, oid uint32, text []byte) {
		// Small OIDs are kept as they are, so unknown types are fuzzed too.
		if oid >= 1<<16 {
			oid = ruleOIDs[oid%uint32(len(ruleOIDs))]
		}
		const prefix = `[0,`
		out := AppendJSON([]byte(prefix), oid, text)
		if !bytes.HasPrefix(out, []byte(prefix)) {
			t.Fatalf("AppendJSON(%q, %d, %q) = %q: the prefix is gone", prefix, oid, text, out)
		}
		v := out[len(prefix):]
		if !json.Valid(v) {
			t.Fatalf("AppendJSON(%d, %q) = %s, which is not valid JSON", oid, text, v)
		}
		// A value goes into frames and lines that a raw line break would split.
		if bytes.ContainsAny(v, "\r\n") {
			t.Fatalf("AppendJSON(%d, %q) = %q, which holds a raw line break", oid, text, v)
		}
		if j := JSON(oid, text); !bytes.Equal(j, v) {
			t.Fatalf("JSON(%d, %q) = %s, AppendJSON gives %s", oid, text, j, v)
		}
		checkScalarMeaning(t, oid, text, v)
		if oid == NumericOID {
			if isNumber, want := v[0] != '"', numericReference(text); isNumber != want {
				t.Fatalf("AppendJSON(numeric, %q) = %s; math/big says a float64 round trip is %v", text, v, want)
			}
		}
	})
}

// numericReference is numericRoundTrips computed another way: the text's exact value and the
// exact value of the float64's shortest decimal, compared as rationals.
func numericReference(text []byte) bool {
	if !isJSONNumber(text) || bytes.ContainsAny(text, "eE") {
		return false
	}
	exact, ok := new(big.Rat).SetString(string(text))
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return false
	}
	back, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && exact.Cmp(back) == 0
}

// TestNumericAgainstReference compares numericRoundTrips with numericReference on decimals of 1
// to 20 significant digits, from far below to far above float64's range.
func TestNumericAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	numbers := 0
	for range 3000 {
		digits := strconv.FormatUint(rng.Uint64(), 10)
		digits = digits[:1+rng.IntN(len(digits))]
		exp := rng.IntN(700) - 350
		text := decimalText(digits, exp, rng.IntN(2) == 0, rng.IntN(4))
		got, want := numericRoundTrips([]byte(text)), numericReference([]byte(text))
		if got != want {
			t.Fatalf("numericRoundTrips(%q) = %v, math/big says %v", text, got, want)
		}
		if got {
			numbers++
		}
	}
	// Both answers must be common, or the comparison says little.
	if numbers < 300 || numbers > 2700 {
		t.Errorf("%d of 3000 decimals round-trip; the sample is lopsided", numbers)
	}
}

// decimalText writes digits × 10^exp as numeric_out would, plain, with zeros trailing to pad the
// scale.
func decimalText(digits string, exp int, neg bool, pad int) string {
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	switch {
	case exp >= 0:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", exp))
		if pad > 0 {
			b.WriteString("." + strings.Repeat("0", pad))
		}
	case -exp < len(digits):
		b.WriteString(digits[:len(digits)+exp] + "." + digits[len(digits)+exp:])
		b.WriteString(strings.Repeat("0", pad))
	default:
		b.WriteString("0." + strings.Repeat("0", -exp-len(digits)) + digits)
		b.WriteString(strings.Repeat("0", pad))
	}
	return b.String()
}

// checkScalarMeaning checks what a scalar's output says about its text: a number or a jsonb value
// is the text verbatim, a json value the text compacted, only a bool is true or false, and a
// string is the text itself unless the type is one whose strings are rewritten.
func checkScalarMeaning(t *testing.T, oid uint32, text, v []byte) {
	t.Helper()
	if _, _, isArray := arrayElem(oid); isArray || bytes.Equal(v, text) {
		return
	}
	if oid == JSONOID && utf8.Valid(text) && json.Valid(text) {
		var want bytes.Buffer
		_ = json.Compact(&want, text)
		if !bytes.Equal(v, want.Bytes()) {
			t.Fatalf("AppendJSON(json, %q) = %s, want the text compacted: %s", text, v, want.Bytes())
		}
		return
	}
	switch {
	case string(v) == "true" || string(v) == "false":
		if oid != BoolOID {
			t.Fatalf("AppendJSON(%d, %q) = %s: a bool from a type that is not bool", oid, text, v)
		}
	case v[0] != '"':
		t.Fatalf("AppendJSON(%d, %q) = %s: neither a string nor the text", oid, text, v)
	case oid != TimestamptzOID && oid != TimestampOID && oid != ByteaOID:
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			t.Fatalf("AppendJSON(%d, %q) = %s: %v", oid, text, v, err)
		}
		if want := string([]rune(string(text))); s != want {
			t.Fatalf("AppendJSON(%d, %q) = %s, want the text %q", oid, text, v, want)
		}
	}
}

// FuzzArray builds arrays the way array_out writes them, from any elements, in one or two
// dimensions, with or without a decoration, and checks that each reads back element for element.
// Elements are the fuzz bytes split at 0x00; an element that is the single byte 0x01 is NULL.
func FuzzArray(f *testing.F) {
	f.Add([]byte("a\x00b,c\x00\x01\x00NULL\x00\x00 x\x00\"\\{}"), uint8(0), int8(1))
	f.Add([]byte("1\x002\x003\x004"), uint8(2), int8(0))
	f.Add([]byte("null\x00\x01\x00x\x00y\x00\xff\xfe"), uint8(3), int8(-5))
	f.Add([]byte(""), uint8(0), int8(1))
	f.Fuzz(func(t *testing.T, data []byte, rows uint8, lower int8) {
		var elems []*string
		for _, p := range bytes.Split(data, []byte{0}) {
			if len(p) == 1 && p[0] == 1 {
				elems = append(elems, nil)
				continue
			}
			s := string(p)
			elems = append(elems, &s)
		}
		r := int(rows)
		if r < 2 || len(elems)%r != 0 {
			r = 0
		}
		text, want := arrayOut(elems, r, int(lower))

		got := AppendJSON(nil, TextArrayOID, text)
		var gotV, wantV any
		if err := json.Unmarshal(got, &gotV); err != nil {
			t.Fatalf("AppendJSON(_text, %q) = %s: %v", text, got, err)
		}
		if err := json.Unmarshal(want, &wantV); err != nil {
			t.Fatalf("want %s: %v", want, err)
		}
		if !reflect.DeepEqual(gotV, wantV) {
			t.Fatalf("AppendJSON(_text, %q) = %s, want %s", text, got, want)
		}
	})
}

// arrayOut writes elems as array_out does: rows sub-arrays when rows > 0, a decoration when the
// lower bound is not 1. It returns the text and the JSON that text must read as.
func arrayOut(elems []*string, rows, lower int) (text, want []byte) {
	var b strings.Builder
	var values []any
	for _, e := range elems {
		if e == nil {
			values = append(values, nil)
		} else {
			values = append(values, *e)
		}
	}
	var shape any = values
	if rows > 0 {
		cols := len(values) / rows
		var m [][]any
		for i := range rows {
			m = append(m, values[i*cols:(i+1)*cols])
		}
		shape = m
		if lower != 1 {
			fmt.Fprintf(&b, "[%d:%d][1:%d]=", lower, lower+rows-1, cols)
		}
	} else if lower != 1 {
		fmt.Fprintf(&b, "[%d:%d]=", lower, lower+len(values)-1)
	}
	want, err := json.Marshal(shape)
	if err != nil {
		panic(err)
	}

	cols := len(elems)
	if rows > 0 {
		cols = len(elems) / rows
		b.WriteByte('{')
	}
	for i, e := range elems {
		if i%cols == 0 {
			if i > 0 {
				b.WriteString("},")
			}
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		writeArrayElement(&b, e)
	}
	b.WriteByte('}')
	if rows > 0 {
		b.WriteByte('}')
	}
	return []byte(b.String()), want
}

// writeArrayElement quotes as array_out does: an empty element, NULL in any case, and anything
// holding a delimiter, brace, quote, backslash or white space.
func writeArrayElement(b *strings.Builder, e *string) {
	if e == nil {
		b.WriteString("NULL")
		return
	}
	s := *e
	quote := s == "" || strings.EqualFold(s, "NULL") || strings.ContainsAny(s, "{},\"\\ \t\n\r\v\f")
	if !quote {
		b.WriteString(s)
		return
	}
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}

// FuzzTimestamptz prints an instant in a fixed offset as Postgres would, and checks that it
// decodes to the instant package time computes, truncated to the millisecond.
func FuzzTimestamptz(f *testing.F) {
	f.Add(int64(1704549600), uint32(123456), int32(19800), false)   // 2024-01-06 14:00 UTC, +05:30
	f.Add(int64(-2717668800), uint32(0), int32(-17762), false)      // 1883-11-18 12:00 UTC, LMT
	f.Add(int64(-2208988800), uint32(999999), int32(19270), false)  // 1900, +05:21:10
	f.Add(int64(253402297199), uint32(999999), int32(-18000), true) // 9999-12-31 23:59:59 UTC, -05
	f.Add(int64(-62135596800), uint32(1), int32(3600), true)        // 0001-01-01 00:00 UTC, +01
	f.Fuzz(func(t *testing.T, sec int64, micros uint32, offset int32, compact bool) {
		first := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
		last := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
		sec = first + mod(sec, last-first+1)
		const maxOffset = 15*3600 + 59*60 + 59
		off := int(mod(int64(offset), 2*maxOffset+1)) - maxOffset
		instant := time.Unix(sec, int64(micros%1e6)*1e3).UTC()
		wall := instant.Add(time.Duration(off) * time.Second)

		frac := strings.TrimRight(fmt.Sprintf("%06d", instant.Nanosecond()/1e3), "0")
		if frac != "" {
			frac = "." + frac
		}
		zoned := wall.Format("2006-01-02 15:04:05") + frac + postgresOffset(off, compact)

		want, _ := json.Marshal(zoned)
		if y := wall.Year(); y >= 1 && y <= 9999 {
			want = []byte(`"` + instant.Format("2006-01-02T15:04:05.000Z") + `"`)
		}
		if got := AppendJSON(nil, TimestamptzOID, []byte(zoned)); !bytes.Equal(got, want) {
			t.Fatalf("timestamptz %q = %s, want %s", zoned, got, want)
		}

		if y := wall.Year(); y >= 1 && y <= 9999 {
			plain := wall.Format("2006-01-02 15:04:05") + frac
			want := `"` + wall.Format("2006-01-02T15:04:05.000") + `"`
			if got := AppendJSON(nil, TimestampOID, []byte(plain)); string(got) != want {
				t.Fatalf("timestamp %q = %s, want %s", plain, got, want)
			}
		}
	})
}

// postgresOffset spells an offset as EncodeTimezone does (±HH, then :MM and :SS only when not
// zero), or, when compact and there are no seconds, as ±HHMM.
func postgresOffset(off int, compact bool) string {
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	h, m, s := off/3600, off/60%60, off%60
	switch {
	case compact && s == 0:
		return fmt.Sprintf("%c%02d%02d", sign, h, m)
	case s != 0:
		return fmt.Sprintf("%c%02d:%02d:%02d", sign, h, m, s)
	case m != 0:
		return fmt.Sprintf("%c%02d:%02d", sign, h, m)
	}
	return fmt.Sprintf("%c%02d", sign, h)
}

func mod(a, n int64) int64 {
	r := a % n
	if r < 0 {
		r += n
	}
	return r
}
