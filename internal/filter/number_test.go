package filter

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestParseDecimal(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-7", "0.5", "10.25", "1e5", "1E+5", "1e-5", "-1.5e-07",
		"9223372036854775807", "123456789012345678901234567890", "0.000", "00.5e1"[1:]} {
		if _, ok := parseDecimal([]byte(s)); !ok {
			t.Errorf("parseDecimal(%q) refused", s)
		}
	}
	for _, s := range []string{"", "-", "+1", "01", "1.", ".5", "1e", "1e+", "0x10", "1_000", " 1", "1 ", "NaN", "--1", "1.5.5", "1e5e5"} {
		if _, ok := parseDecimal([]byte(s)); ok {
			t.Errorf("parseDecimal(%q) accepted", s)
		}
	}
}

// randomDecimal spells a random number in one of the many ways JSON allows, and returns its
// exact value.
func randomDecimal(rng *rand.Rand) (string, *big.Rat) {
	var b strings.Builder
	if rng.IntN(3) == 0 {
		b.WriteByte('-')
	}
	intDigits := rng.IntN(25)
	if intDigits == 0 {
		b.WriteByte('0')
	} else {
		b.WriteByte(byte('1' + rng.IntN(9)))
		for range intDigits - 1 {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
	}
	if rng.IntN(2) == 0 {
		b.WriteByte('.')
		for range 1 + rng.IntN(25) {
			if rng.IntN(3) == 0 {
				b.WriteByte('0')
			} else {
				b.WriteByte(byte('0' + rng.IntN(10)))
			}
		}
	}
	if rng.IntN(3) == 0 {
		b.WriteString([]string{"e", "E", "e+", "e-", "E-"}[rng.IntN(5)])
		b.WriteString(strconv.Itoa(rng.IntN(40)))
	}
	r, ok := new(big.Rat).SetString(b.String())
	if !ok {
		panic(b.String())
	}
	return b.String(), r
}

// TestDecimalAgainstBigRat checks compare and the canonical spelling against math/big.
func TestDecimalAgainstBigRat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		sa, ra := randomDecimal(rng)
		sb, rb := randomDecimal(rng)
		if rng.IntN(4) == 0 { // equal values in different spellings are the interesting case
			if s, ok := respell(rng, ra); ok {
				sb, rb = s, ra
			}
		}
		a, ok := parseDecimal([]byte(sa))
		if !ok {
			t.Fatalf("parseDecimal(%q) refused", sa)
		}
		b, ok := parseDecimal([]byte(sb))
		if !ok {
			t.Fatalf("parseDecimal(%q) refused", sb)
		}
		if got, want := compareDecimal(&a, &b), ra.Cmp(rb); got != want {
			t.Fatalf("compare(%s, %s) = %d, want %d", sa, sb, got, want)
		}
		ka, kb := string(appendDecimal(nil, &a)), string(appendDecimal(nil, &b))
		if (ka == kb) != (ra.Cmp(rb) == 0) {
			t.Fatalf("keys %s (%s) and %s (%s): equal %v, values equal %v", ka, sa, kb, sb, ka == kb, ra.Cmp(rb) == 0)
		}
		if rk, ok := new(big.Rat).SetString(ka); !ok || rk.Cmp(ra) != 0 {
			t.Fatalf("key %s of %s does not spell its value", ka, sa)
		}
	}
}

// respell writes r's value in another spelling: with trailing zeros, or an exponent. ok is
// false when r has more fraction digits than it writes.
func respell(rng *rand.Rand, r *big.Rat) (string, bool) {
	s, ok := respellAny(rng, r)
	if back, valid := new(big.Rat).SetString(s); !valid || back.Cmp(r) != 0 {
		return "", false
	}
	return s, ok
}

func respellAny(rng *rand.Rand, r *big.Rat) (string, bool) {
	s := r.FloatString(80)
	s = strings.TrimRight(s, "0")
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		s = "0"
	}
	switch rng.IntN(3) {
	case 0:
		if !strings.Contains(s, ".") {
			s += "."
		}
		return s + "000", true
	case 1:
		// move the point left by k and add e+k
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		intPart, frac, _ := strings.Cut(s, ".")
		if len(intPart) < 2 {
			break
		}
		k := len(intPart) - 1
		out := intPart[:1] + "." + intPart[1:] + frac
		if neg {
			out = "-" + out
		}
		return out + "e" + strconv.Itoa(k), true
	}
	return s, true
}

func TestDecimalSpecials(t *testing.T) {
	order := []string{`"-Infinity"`, `-1e400`, `-1`, `-0.5`, `0`, `1e-400`, `0.5`, `1`, `9007199254740993`, `1e400`, `"Infinity"`, `"NaN"`}
	for i, sa := range order {
		for j, sb := range order {
			a, _ := parseNumber([]byte(sa))
			b, _ := parseNumber([]byte(sb))
			if got, want := compareDecimal(&a, &b), cmp3(i, j); got != want {
				t.Errorf("compare(%s, %s) = %d, want %d", sa, sb, got, want)
			}
		}
	}
}

func TestDecimalKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "0"}, {"-0.000", "0"}, {"1", "1"}, {"1.0", "1"}, {"1e0", "1"}, {"10", "10"},
		{"1.50", "1.5"}, {"-2.5e1", "-25"}, {"1e20", "100000000000000000000"}, {"1e21", "1e+21"},
		{"12e21", "1.2e+22"}, {"0.000001", "0.000001"}, {"1e-7", "1e-7"},
		{"0.00000012", "1.2e-7"}, {"123.456", "123.456"}, {"9007199254740993", "9007199254740993"},
		{`"9007199254740993"`, "9007199254740993"}, {`"NaN"`, "NaN"}, {`"-Infinity"`, "-Infinity"},
		{"1e99999999999999999999", "1e+1099511627776"},
	} {
		d, ok := parseNumber([]byte(tc.in))
		if !ok {
			t.Fatalf("parseNumber(%s) refused", tc.in)
		}
		if got := string(appendDecimal(nil, &d)); got != tc.want {
			t.Errorf("key of %s = %s, want %s", tc.in, got, tc.want)
		}
	}
}
