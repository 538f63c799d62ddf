package filter

import "time"

// Dates and timestamps compare as numbers: days since 1970-01-01 for a date, milliseconds since
// 1970-01-01T00:00:00 for a timestamp (UTC for timestamptz, the wall clock for timestamp), on the
// proleptic Gregorian calendar with astronomical years (1 BC is year 0), as Postgres counts.
// Milliseconds, because pgvalue truncates every timestamp it normalises to milliseconds.

// calendar is a parsed date or timestamp. inf is -1 for -infinity and +1 for infinity, which
// order before and after every finite value; v is the count above when inf is 0.
type calendar struct {
	inf int8
	v   int64
}

func compareCalendar(a, b *calendar) int {
	if a.inf != b.inf {
		return cmp3(a.inf, b.inf)
	}
	if a.inf != 0 {
		return 0
	}
	return cmp3(a.v, b.v)
}

const msPerDay = 86_400_000

// maxYearDigits bounds the year a row value may spell: Postgres's own limit is 294276 AD.
const maxYearDigits = 7

// parseCalendar reads a row value of a Date (want == Date), LocalTimestamp or Timestamp
// column, in any of the spellings pgvalue passes on: its normalised form
// (2024-01-06T08:30:00.123Z, 2024-01-06T14:00:00.123, 2024-01-06), infinity and -infinity, and
// Postgres's own ISO text for what that form cannot spell (0044-03-15 12:00:00+00 BC,
// 10000-01-01 01:02:03.4567). A fraction is truncated to milliseconds.
func parseCalendar(s []byte, want Type) (c calendar, ok bool) {
	switch string(s) {
	case "infinity":
		return calendar{inf: 1}, true
	case "-infinity":
		return calendar{inf: -1}, true
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i < 4 || i > maxYearDigits || len(s) < i+6 || s[i] != '-' || s[i+3] != '-' {
		return c, false
	}
	year, _ := digits(s[:i])
	month, ok1 := digits(s[i+1 : i+3])
	day, ok2 := digits(s[i+4 : i+6])
	if !ok1 || !ok2 {
		return c, false
	}
	s = s[i+6:]

	var hour, minute, second, milli, offset int
	if want != Date {
		if len(s) < 9 || (s[0] != 'T' && s[0] != ' ') || s[3] != ':' || s[6] != ':' {
			return c, false
		}
		var okH, okM, okS bool
		hour, okH = digits(s[1:3])
		minute, okM = digits(s[4:6])
		second, okS = digits(s[7:9])
		if !okH || !okM || !okS || hour > 23 || minute > 59 || second > 59 {
			return c, false
		}
		s = s[9:]
		if len(s) > 0 && s[0] == '.' {
			n := 1
			for n < len(s) && isDigit(s[n]) {
				n++
			}
			if n == 1 {
				return c, false
			}
			for k := 1; k <= 3; k++ {
				milli *= 10
				if k < n {
					milli += int(s[k] - '0')
				}
			}
			s = s[n:]
		}
		if want == Timestamp {
			var n int
			if offset, n, ok = parseOffset(s); !ok {
				return c, false
			}
			s = s[n:]
		}
	}
	if len(s) > 0 {
		if string(s) != " BC" {
			return c, false
		}
		year = 1 - year
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) {
		return c, false
	}
	days := daysFromCivil(int64(year), month, day)
	if want == Date {
		return calendar{v: days}, true
	}
	ms := days*msPerDay + int64(hour)*3_600_000 + int64(minute)*60_000 + int64(second)*1000 +
		int64(milli) - int64(offset)*1000
	return calendar{v: ms}, true
}

// parseOffset reads the zone of a timestamptz: Z, or ±HH, ±HHMM, ±HH:MM or ±HH:MM:SS (the
// spellings Postgres writes), returning it in seconds east of UTC and the bytes it took.
func parseOffset(s []byte) (offset, n int, ok bool) {
	if len(s) > 0 && s[0] == 'Z' {
		return 0, 1, true
	}
	if len(s) < 3 || (s[0] != '+' && s[0] != '-') {
		return 0, 0, false
	}
	h, ok := digits(s[1:3])
	if !ok {
		return 0, 0, false
	}
	var m, sec int
	n = 3
	switch {
	case len(s) >= 9 && s[3] == ':' && s[6] == ':' && isDigit(s[7]):
		var okS bool
		m, ok = digits(s[4:6])
		sec, okS = digits(s[7:9])
		ok = ok && okS
		n = 9
	case len(s) >= 6 && s[3] == ':':
		m, ok = digits(s[4:6])
		n = 6
	case len(s) >= 5 && isDigit(s[3]):
		m, ok = digits(s[3:5])
		n = 5
	}
	if !ok || m > 59 || sec > 59 {
		return 0, 0, false
	}
	offset = h*3600 + m*60 + sec
	if s[0] == '-' {
		offset = -offset
	}
	return offset, n, true
}

// parseCalendarLiteral reads a literal for a Date, LocalTimestamp or Timestamp column: RFC 3339
// (a full date, a date and time without offset, or a date and time with one), or infinity or
// -infinity. The result must lie in years 0001–9999, in UTC for a Timestamp.
func parseCalendarLiteral(s string, t Type) (calendar, bool) {
	switch s {
	case "infinity":
		return calendar{inf: 1}, true
	case "-infinity":
		return calendar{inf: -1}, true
	}
	layout := time.RFC3339
	switch t {
	case Date:
		layout = time.DateOnly
	case LocalTimestamp:
		layout = "2006-01-02T15:04:05"
	}
	tm, err := time.Parse(layout, s)
	if err != nil {
		return calendar{}, false
	}
	tm = tm.UTC()
	if tm.Year() < 1 || tm.Year() > 9999 {
		return calendar{}, false
	}
	days := daysFromCivil(int64(tm.Year()), int(tm.Month()), tm.Day())
	if t == Date {
		return calendar{v: days}, true
	}
	ms := days*msPerDay + int64(tm.Hour())*3_600_000 + int64(tm.Minute())*60_000 +
		int64(tm.Second())*1000 + int64(tm.Nanosecond()/1_000_000)
	return calendar{v: ms}, true
}

// appendCalendar appends the canonical spelling of c, the key and literal spelling of its
// value: the form pgvalue normalises to (2024-01-06T08:30:00.123Z, 2024-01-06T14:00:00.123,
// 2024-01-06) for years 0001–9999, and ISO 8601's expanded years beyond (+10000-01-01,
// -0043-03-15 for 44 BC), which no literal can spell and no normalised value has.
func appendCalendar(dst []byte, c *calendar, t Type) []byte {
	switch c.inf {
	case 1:
		return append(dst, "infinity"...)
	case -1:
		return append(dst, "-infinity"...)
	}
	days, ms := c.v, int64(0)
	if t != Date {
		days, ms = floorDiv(c.v, msPerDay), floorMod(c.v, msPerDay)
	}
	y, m, d := civilFromDays(days)
	switch {
	case y < 0:
		dst = append(dst, '-')
		y = -y
	case y > 9999:
		dst = append(dst, '+')
	}
	if y < 10000 {
		dst = append4(dst, int(y))
	} else {
		dst = appendInt(dst, y)
	}
	dst = append(dst, '-')
	dst = append2(dst, m)
	dst = append(dst, '-')
	dst = append2(dst, d)
	if t == Date {
		return dst
	}
	dst = append(dst, 'T')
	dst = append2(dst, int(ms/3_600_000))
	dst = append(dst, ':')
	dst = append2(dst, int(ms/60_000%60))
	dst = append(dst, ':')
	dst = append2(dst, int(ms/1000%60))
	dst = append(dst, '.', byte('0'+ms/100%10), byte('0'+ms/10%10), byte('0'+ms%10))
	if t == Timestamp {
		dst = append(dst, 'Z')
	}
	return dst
}

func append2(b []byte, n int) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }

func append4(b []byte, n int) []byte {
	return append(b, byte('0'+n/1000), byte('0'+n/100%10), byte('0'+n/10%10), byte('0'+n%10))
}

// digits reads a run of ASCII digits as a decimal number.
func digits(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
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

// daysFromCivil counts the days from 1970-01-01 to y-m-d (Howard Hinnant's days_from_civil).
func daysFromCivil(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y int64, m, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	m = int(mp + 3)
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }
