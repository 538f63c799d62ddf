package pgvalue

import "time"

const (
	// maxYear is the last year RFC 3339 can spell; Postgres prints later years with more digits.
	maxYear = 9999
	// maxOffsetHour is MAX_TZDISP_HOUR in Postgres's datetime.h: offsets run to ±15:59:59.
	maxOffsetHour = 15

	isoTimestampLen   = len("2006-01-02 15:04:05")
	rfc3339MilliLen   = len("2006-01-02T15:04:05.000Z")
	millisecondDigits = 3
)

// clock is a calendar date and wall time, to the millisecond.
type clock struct {
	year, month, day     int
	hour, minute, second int
	milli                int
}

// appendTimestamp emits a timestamptz (zoned) as the RFC 3339 UTC instant with milliseconds,
// 2024-01-06T08:30:00.123Z, and a timestamp as the same wall clock without the Z. Text it does not
// read (infinity, BC, a five-digit year, an instant that would land outside years 1–9999 once
// moved to UTC) is a string of itself.
func appendTimestamp(dst, text []byte, zoned bool) []byte {
	c, offset, ok := parseTimestamp(text, zoned)
	if ok && offset != 0 {
		c, ok = c.shift(-offset)
	}
	if !ok {
		return appendString(dst, text)
	}
	var buf [rfc3339MilliLen]byte
	b := c.appendRFC3339(buf[:0])
	if zoned {
		b = append(b, 'Z')
	}
	return appendString(dst, b)
}

// parseTimestamp reads the ISO text Postgres writes under datestyle=ISO:
//
//	2024-01-06 14:00:00[.f...][±HH[:MM[:SS]]|±HHMM]
//
// The offset, required when zoned and refused otherwise, is returned in seconds east of UTC.
// Postgres writes ±HH, ±HH:MM and ±HH:MM:SS (EncodeTimezone in datetime.c); ±HH:MM:SS is a zone's
// local mean time before it adopted standard time, such as New York's -04:56:02 until 1883.
// ±HHMM is read too, but a seconds field only ever follows a colon-separated minute. The fraction
// may have any number of digits and is truncated, not rounded, to milliseconds: rounding could
// carry into the next second, day or year.
func parseTimestamp(text []byte, zoned bool) (c clock, offset int, ok bool) {
	t := text
	if len(t) < isoTimestampLen || t[4] != '-' || t[7] != '-' || t[10] != ' ' || t[13] != ':' || t[16] != ':' {
		return c, 0, false
	}
	var okY, okMo, okD, okH, okMi, okS bool
	c.year, okY = digits(t[0:4])
	c.month, okMo = digits(t[5:7])
	c.day, okD = digits(t[8:10])
	c.hour, okH = digits(t[11:13])
	c.minute, okMi = digits(t[14:16])
	c.second, okS = digits(t[17:19])
	if !(okY && okMo && okD && okH && okMi && okS) || !c.valid() {
		return c, 0, false
	}
	t = t[isoTimestampLen:]

	if len(t) > 0 && t[0] == '.' {
		n := 1
		for n < len(t) && isDigit(t[n]) {
			n++
		}
		if n == 1 {
			return c, 0, false
		}
		for i := 1; i <= millisecondDigits; i++ {
			c.milli *= 10
			if i < n {
				c.milli += int(t[i] - '0')
			}
		}
		t = t[n:]
	}

	if !zoned {
		return c, 0, len(t) == 0
	}
	offset, ok = parseOffset(t)
	return c, offset, ok
}

// parseOffset reads ±HH, ±HHMM, ±HH:MM or ±HH:MM:SS, and nothing after it, into seconds east of
// UTC. A minute or second past 59 is not an offset at all.
func parseOffset(t []byte) (int, bool) {
	if len(t) < 3 || (t[0] != '+' && t[0] != '-') {
		return 0, false
	}
	h, ok := digits(t[1:3])
	if !ok || h > maxOffsetHour {
		return 0, false
	}
	var m, s int
	switch rest := t[3:]; {
	case len(rest) == 0:
	case len(rest) == 2:
		m, ok = digits(rest)
	case len(rest) == 3 && rest[0] == ':':
		m, ok = digits(rest[1:3])
	case len(rest) == 6 && rest[0] == ':' && rest[3] == ':':
		m, ok = digits(rest[1:3])
		if ok {
			s, ok = digits(rest[4:6])
		}
	default:
		ok = false
	}
	if !ok || m > 59 || s > 59 {
		return 0, false
	}
	off := h*3600 + m*60 + s
	if t[0] == '-' {
		off = -off
	}
	return off, true
}

// digits reads a run of ASCII digits as a decimal number.
func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// valid reports whether c is a date and time Postgres could print in AD years 1–9999. Postgres
// normalises 24:00:00 and leap seconds away on input, so neither is printed.
func (c clock) valid() bool {
	return c.year >= 1 && c.year <= maxYear &&
		c.month >= 1 && c.month <= 12 &&
		c.day >= 1 && c.day <= daysIn(c.year, c.month) &&
		c.hour <= 23 && c.minute <= 59 && c.second <= 59
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// shift moves c by seconds. ok is false when the result leaves years 1–9999: before year 1 it is
// a BC instant, which Postgres would print with BC and this package keeps as text.
func (c clock) shift(seconds int) (clock, bool) {
	// Postgres uses the proleptic Gregorian calendar, as package time does.
	t := time.Date(c.year, time.Month(c.month), c.day, c.hour, c.minute, c.second, 0, time.UTC).
		Add(time.Duration(seconds) * time.Second)
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	out := clock{year: y, month: int(mo), day: d, hour: h, minute: mi, second: s, milli: c.milli}
	return out, y >= 1 && y <= maxYear
}

// appendRFC3339 writes 2006-01-02T15:04:05.000, always with three fraction digits.
func (c clock) appendRFC3339(b []byte) []byte {
	b = append4(b, c.year)
	b = append(b, '-')
	b = append2(b, c.month)
	b = append(b, '-')
	b = append2(b, c.day)
	b = append(b, 'T')
	b = append2(b, c.hour)
	b = append(b, ':')
	b = append2(b, c.minute)
	b = append(b, ':')
	b = append2(b, c.second)
	b = append(b, '.', byte('0'+c.milli/100), byte('0'+c.milli/10%10), byte('0'+c.milli%10))
	return b
}

func append2(b []byte, n int) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }

func append4(b []byte, n int) []byte {
	return append(b, byte('0'+n/1000), byte('0'+n/100%10), byte('0'+n/10%10), byte('0'+n%10))
}
