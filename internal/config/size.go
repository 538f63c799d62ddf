package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes. It is written as a whole number of bytes (65536) or of a binary
// unit (64KiB, 4MiB, 1GiB), and printed in the largest unit that divides it exactly.
type Size int64

// The binary units a Size may be written in.
const (
	B   Size = 1
	KiB      = 1024 * B
	MiB      = 1024 * KiB
	GiB      = 1024 * MiB
	TiB      = 1024 * GiB
)

var sizeUnits = []struct {
	name string
	mult Size
}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}, {"B", B}}

// ParseSize reads a Size: digits, then optionally a unit (B, KiB, MiB, GiB, TiB; any case),
// with or without a space between. Decimal units (KB, MB) are refused rather than guessed at:
// whether 4MB means 4000000 or 4194304 bytes is exactly the doubt a limit must not have.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	digits, unit := t[:i], strings.TrimSpace(t[i:])
	if digits == "" {
		return 0, fmt.Errorf("%q is not a size: want a whole number of bytes, or of KiB, MiB, GiB or TiB, e.g. 4MiB", s)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	mult := Size(0)
	for _, u := range sizeUnits {
		if strings.EqualFold(unit, u.name) {
			mult = u.mult
		}
	}
	if unit == "" {
		mult = B
	}
	if mult == 0 {
		hint := "KiB, MiB, GiB or TiB"
		switch strings.ToUpper(unit) {
		case "K", "KB":
			hint = "KiB (1024 bytes)"
		case "M", "MB":
			hint = "MiB (1048576 bytes)"
		case "G", "GB":
			hint = "GiB"
		case "T", "TB":
			hint = "TiB"
		}
		return 0, fmt.Errorf("%q has an unknown unit %q: sizes are binary, write %s", s, unit, hint)
	}
	if Size(n) > Size(math.MaxInt)/mult || Size(n) > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	return Size(n) * mult, nil
}

// String prints the size in the largest binary unit that divides it exactly: 65536 is "64KiB",
// 65537 is "65537".
func (s Size) String() string {
	for _, u := range sizeUnits {
		if u.mult > 1 && s != 0 && s%u.mult == 0 {
			return strconv.FormatInt(int64(s/u.mult), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalText writes the size as String does, so a marshalled Config reads back the same.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a size as ParseSize does.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
