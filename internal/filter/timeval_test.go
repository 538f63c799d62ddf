package filter

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

func TestCivilDays(t *testing.T) {
	for y := int64(-5000); y <= 300000; y += 7 {
		for _, md := range [][2]int{{1, 1}, {2, 28}, {3, 1}, {12, 31}} {
			days := daysFromCivil(y, md[0], md[1])
			gy, gm, gd := civilFromDays(days)
			if gy != y || gm != md[0] || gd != md[1] {
				t.Fatalf("civilFromDays(daysFromCivil(%d-%d-%d)) = %d-%d-%d", y, md[0], md[1], gy, gm, gd)
			}
			if y >= 1 && y <= 9999 {
				want := time.Date(int(y), time.Month(md[0]), md[1], 0, 0, 0, 0, time.UTC).Unix() / 86400
				if days != want {
					t.Fatalf("daysFromCivil(%d-%d-%d) = %d, want %d", y, md[0], md[1], days, want)
				}
			}
		}
	}
}

// TestCalendarThroughPgvalue feeds Postgres's text for random instants through pgvalue, as the
// changefeed does, and checks the filter reads back the instant (truncated to milliseconds)
// and that its key is pgvalue's normalised form.
func TestCalendarThroughPgvalue(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		tm := time.Unix(rng.Int64N(253402300800+62135596800)-62135596800, rng.Int64N(1e9)).UTC()
		offset := (rng.IntN(31*4) - 15*4) * 15 * 60 // a zone's offset, in quarter hours
		local := tm.In(time.FixedZone("", offset))
		text := local.Format("2006-01-02 15:04:05.999999-07:00")
		raw := pgvalue.JSON(pgvalue.TimestamptzOID, []byte(text))
		wantMS := tm.Unix()*1000 + int64(tm.Nanosecond()/1e6)
		v, ok := parseValue(Timestamp, raw, nil)
		if !ok {
			if tm.Year() <= 1 || tm.Year() >= 9999 {
				continue // pgvalue keeps an instant that leaves years 1–9999 as text in another zone
			}
			t.Fatalf("parseValue(%s) (from %s) refused", raw, text)
		}
		if v.cal.v != wantMS {
			t.Fatalf("%s -> %s: %d ms, want %d", text, raw, v.cal.v, wantMS)
		}
		key, _ := Key(Timestamp, raw)
		if `"`+key+`"` != string(raw) {
			t.Fatalf("Key(%s) = %s, want pgvalue's spelling", raw, key)
		}
		lit, ok := parseCalendarLiteral(local.Format(time.RFC3339Nano), Timestamp)
		if !ok || lit.v != wantMS {
			t.Fatalf("literal %s: %d, %v; want %d", local.Format(time.RFC3339Nano), lit.v, ok, wantMS)
		}

		ltext := tm.Format("2006-01-02 15:04:05.999999")
		lraw := pgvalue.JSON(pgvalue.TimestampOID, []byte(ltext))
		if v, ok := parseValue(LocalTimestamp, lraw, nil); !ok || v.cal.v != wantMS {
			t.Fatalf("timestamp %s -> %s: %d, %v; want %d", ltext, lraw, v.cal.v, ok, wantMS)
		}
		draw := pgvalue.JSON(pgvalue.DateOID, []byte(tm.Format(time.DateOnly)))
		if v, ok := parseValue(Date, draw, nil); !ok || v.cal.v != floorDiv(wantMS, msPerDay) {
			t.Fatalf("date %s: %d, %v", draw, v.cal.v, ok)
		}
	}
}

func TestCalendarOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		t        Type
		raw, key string
	}{
		{Timestamp, `"0044-03-15 12:00:00+00 BC"`, "-0043-03-15T12:00:00.000Z"},
		{Timestamp, `"10000-01-01 00:00:00+00"`, "+10000-01-01T00:00:00.000Z"},
		{Timestamp, `"294276-12-31 23:59:59.999999+00"`, "+294276-12-31T23:59:59.999Z"},
		{Timestamp, `"4714-11-24 00:00:00+00 BC"`, "-4713-11-24T00:00:00.000Z"},
		{Timestamp, `"infinity"`, "infinity"},
		{LocalTimestamp, `"0001-01-01 00:00:00 BC"`, "0000-01-01T00:00:00.000"},
		{LocalTimestamp, `"-infinity"`, "-infinity"},
		{Date, `"0001-01-01 BC"`, "0000-01-01"},
		{Date, `"0005-02-29 BC"`, "-0004-02-29"}, // 5 BC is the astronomical year -4, a leap year
		{Date, `"5874897-12-31"`, "+5874897-12-31"},
	} {
		if key, ok := Key(tc.t, json.RawMessage(tc.raw)); !ok || key != tc.key {
			t.Errorf("Key(%s, %s) = %q, %v; want %q", tc.t, tc.raw, key, ok, tc.key)
		}
	}
	for _, tc := range []struct {
		t   Type
		raw string
	}{
		{Timestamp, `"2024-01-06T08:30:00.123"`},   // no zone
		{LocalTimestamp, `"2024-01-06T08:30:00Z"`}, // a zone
		{Date, `"2024-01-06T00:00:00"`},
		{Date, `"2024-1-6"`},
		{Date, `"0000-13-01 BC"`},
		{Timestamp, `"2024-01-06T24:00:00Z"`},
		{Timestamp, `"2024-01-06T08:30:00.Z"`},
		{Timestamp, `"2024-01-06T08:30:00+1"`},
		{Timestamp, `"2024-01-06T08:30:00+01:60"`},
		{Date, `"12345678-01-01"`},
	} {
		if key, ok := Key(tc.t, json.RawMessage(tc.raw)); ok {
			t.Errorf("Key(%s, %s) = %q, want not ok", tc.t, tc.raw, key)
		}
	}
}
