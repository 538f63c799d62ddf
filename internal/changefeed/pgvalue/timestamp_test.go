package pgvalue

import "testing"

func TestTimestamptz(t *testing.T) { runJSONCases(t, timestamptzCases) }

var timestamptzCases = []jsonCase{
	{"UTC", TimestamptzOID, "2024-01-06 14:00:00+00", `"2024-01-06T14:00:00.000Z"`},
	{"half-hour offset", TimestamptzOID, "2024-01-06 14:00:00.123456+05:30", `"2024-01-06T08:30:00.123Z"`},
	{"hour-only offset", TimestamptzOID, "2024-01-06 14:00:00+05", `"2024-01-06T09:00:00.000Z"`},
	{"offset without colon", TimestamptzOID, "2024-01-06 14:00:00+0530", `"2024-01-06T08:30:00.000Z"`},
	{"negative offset", TimestamptzOID, "2024-01-06 14:00:00-05", `"2024-01-06T19:00:00.000Z"`},
	{"negative half-hour offset", TimestamptzOID, "2024-01-06 14:00:00-03:30", `"2024-01-06T17:30:00.000Z"`},
	{"New York LMT", TimestamptzOID, "1883-11-18 07:03:58-04:56:02", `"1883-11-18T12:00:00.000Z"`},
	{"Kolkata LMT", TimestamptzOID, "1900-01-01 05:21:10+05:21:10", `"1900-01-01T00:00:00.000Z"`},
	{"Amsterdam mean time", TimestamptzOID, "1930-06-01 01:19:32+01:19:32", `"1930-06-01T00:00:00.000Z"`},
	{"largest offset", TimestamptzOID, "2024-01-06 14:00:00+15:59:59", `"2024-01-05T22:00:01.000Z"`},
	{"back across a year", TimestamptzOID, "2024-01-01 02:00:00+05", `"2023-12-31T21:00:00.000Z"`},
	{"forward across a leap day", TimestamptzOID, "2024-02-29 23:00:00-02", `"2024-03-01T01:00:00.000Z"`},
	{"year 1", TimestamptzOID, "0001-01-01 00:00:00-01", `"0001-01-01T01:00:00.000Z"`},
	{"year 9999", TimestamptzOID, "9999-12-31 23:59:59.999999+00", `"9999-12-31T23:59:59.999Z"`},
	{"fraction 1 digit", TimestamptzOID, "2024-01-06 14:00:00.1+00", `"2024-01-06T14:00:00.100Z"`},
	{"fraction 2 digits", TimestamptzOID, "2024-01-06 14:00:00.12+00", `"2024-01-06T14:00:00.120Z"`},
	{"fraction 3 digits", TimestamptzOID, "2024-01-06 14:00:00.123+00", `"2024-01-06T14:00:00.123Z"`},
	{"fraction 4 digits", TimestamptzOID, "2024-01-06 14:00:00.1234+00", `"2024-01-06T14:00:00.123Z"`},
	{"fraction 5 digits", TimestamptzOID, "2024-01-06 14:00:00.12345+00", `"2024-01-06T14:00:00.123Z"`},
	{"fraction 6 digits", TimestamptzOID, "2024-01-06 14:00:00.123456+00", `"2024-01-06T14:00:00.123Z"`},
	{"fraction truncated, not rounded", TimestamptzOID, "2024-12-31 23:59:59.999999+00", `"2024-12-31T23:59:59.999Z"`},
	{"fraction with an offset", TimestamptzOID, "2024-01-06 14:00:00.000999+05:30", `"2024-01-06T08:30:00.000Z"`},

	{"infinity", TimestamptzOID, "infinity", `"infinity"`},
	{"-infinity", TimestamptzOID, "-infinity", `"-infinity"`},
	{"BC", TimestamptzOID, "0044-03-15 10:00:00+00 BC", `"0044-03-15 10:00:00+00 BC"`},
	{"BC with LMT", TimestamptzOID, "0044-03-15 05:03:58-04:56:02 BC", `"0044-03-15 05:03:58-04:56:02 BC"`},
	{"five-digit year", TimestamptzOID, "12345-01-01 00:00:00+00", `"12345-01-01 00:00:00+00"`},
	{"UTC is after 9999", TimestamptzOID, "9999-12-31 23:00:00-05", `"9999-12-31 23:00:00-05"`},
	{"UTC is BC", TimestamptzOID, "0001-01-01 00:00:00+01", `"0001-01-01 00:00:00+01"`},
	{"year 0", TimestamptzOID, "0000-01-01 00:00:00+00", `"0000-01-01 00:00:00+00"`},
	{"minute offset past 59", TimestamptzOID, "2024-01-06 14:00:00+05:60", `"2024-01-06 14:00:00+05:60"`},
	{"second offset past 59", TimestamptzOID, "2024-01-06 14:00:00+05:30:60", `"2024-01-06 14:00:00+05:30:60"`},
	{"compact minute past 59", TimestamptzOID, "2024-01-06 14:00:00+0560", `"2024-01-06 14:00:00+0560"`},
	{"seconds after a compact minute", TimestamptzOID, "2024-01-06 14:00:00-0456:02", `"2024-01-06 14:00:00-0456:02"`},
	{"offset hour past 15", TimestamptzOID, "2024-01-06 14:00:00+16", `"2024-01-06 14:00:00+16"`},
	{"one-digit offset", TimestamptzOID, "2024-01-06 14:00:00+5", `"2024-01-06 14:00:00+5"`},
	{"one-digit offset minute", TimestamptzOID, "2024-01-06 14:00:00+05:3", `"2024-01-06 14:00:00+05:3"`},
	{"no offset", TimestamptzOID, "2024-01-06 14:00:00", `"2024-01-06 14:00:00"`},
	{"Z is not what Postgres writes", TimestamptzOID, "2024-01-06 14:00:00Z", `"2024-01-06 14:00:00Z"`},
	{"T separator", TimestamptzOID, "2024-01-06T14:00:00+00", `"2024-01-06T14:00:00+00"`},
	{"empty fraction", TimestamptzOID, "2024-01-06 14:00:00.+00", `"2024-01-06 14:00:00.+00"`},
	{"trailing text", TimestamptzOID, "2024-01-06 14:00:00+00 x", `"2024-01-06 14:00:00+00 x"`},
	{"no such day", TimestamptzOID, "2023-02-29 00:00:00+00", `"2023-02-29 00:00:00+00"`},
	{"day 31 of a 30-day month", TimestamptzOID, "2024-04-31 00:00:00+00", `"2024-04-31 00:00:00+00"`},
	{"month 13", TimestamptzOID, "2024-13-01 00:00:00+00", `"2024-13-01 00:00:00+00"`},
	{"month 0", TimestamptzOID, "2024-00-01 00:00:00+00", `"2024-00-01 00:00:00+00"`},
	{"hour 24", TimestamptzOID, "2024-01-06 24:00:00+00", `"2024-01-06 24:00:00+00"`},
	{"leap second", TimestamptzOID, "2016-12-31 23:59:60+00", `"2016-12-31 23:59:60+00"`},
	{"sign in the year", TimestamptzOID, "+024-01-06 14:00:00+00", `"+024-01-06 14:00:00+00"`},
	{"date only", TimestamptzOID, "2024-01-06", `"2024-01-06"`},
	{"empty", TimestamptzOID, "", `""`},
}

func TestTimestamp(t *testing.T) { runJSONCases(t, timestampCases) }

var timestampCases = []jsonCase{
	{"fraction", TimestampOID, "2024-01-06 14:00:00.123456", `"2024-01-06T14:00:00.123"`},
	{"no fraction", TimestampOID, "2024-01-06 14:00:00", `"2024-01-06T14:00:00.000"`},
	{"fraction 1 digit", TimestampOID, "2024-01-06 14:00:00.5", `"2024-01-06T14:00:00.500"`},
	{"fraction truncated", TimestampOID, "1999-12-31 23:59:59.9999", `"1999-12-31T23:59:59.999"`},
	{"leap day", TimestampOID, "2000-02-29 00:00:00", `"2000-02-29T00:00:00.000"`},
	{"not a leap year", TimestampOID, "1900-02-29 00:00:00", `"1900-02-29 00:00:00"`},
	{"with an offset", TimestampOID, "2024-01-06 14:00:00+00", `"2024-01-06 14:00:00+00"`},
	{"infinity", TimestampOID, "infinity", `"infinity"`},
	{"-infinity", TimestampOID, "-infinity", `"-infinity"`},
	{"BC", TimestampOID, "0044-03-15 10:00:00 BC", `"0044-03-15 10:00:00 BC"`},
	{"five-digit year", TimestampOID, "12345-01-01 00:00:00", `"12345-01-01 00:00:00"`},
}

func TestParseOffset(t *testing.T) {
	for _, tc := range []struct {
		text   string
		want   int
		wantOK bool
	}{
		{"+00", 0, true},
		{"-00", 0, true},
		{"+05", 5 * 3600, true},
		{"+0530", 5*3600 + 30*60, true},
		{"+05:30", 5*3600 + 30*60, true},
		{"-04:56:02", -(4*3600 + 56*60 + 2), true},
		{"+15:59:59", 15*3600 + 59*60 + 59, true},
		{"+16", 0, false},
		{"+05:60", 0, false},
		{"+05:30:60", 0, false},
		{"-0456:02", 0, false},
		{"+05:", 0, false},
		{"+05:30:", 0, false},
		{"+053", 0, false},
		{"05", 0, false},
		{"Z", 0, false},
		{"", 0, false},
	} {
		t.Run(tc.text, func(t *testing.T) {
			got, ok := parseOffset([]byte(tc.text))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("parseOffset(%q) = %d, %v, want %d, %v", tc.text, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
