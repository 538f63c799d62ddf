package pgvalue

import (
	"strings"
	"testing"
)

func BenchmarkAppendJSON(b *testing.B) {
	for _, bc := range []struct {
		name string
		oid  uint32
		text string
	}{
		{"int4", Int4OID, "123456"},
		{"int8", Int8OID, "1234567890123"},
		{"int8_past_2^53", Int8OID, "9223372036854775807"},
		{"numeric", NumericOID, "12345.678"},
		{"numeric_long", NumericOID, "123456789012345678901234567890.123"},
		{"float8", Float8OID, "1.2345678901234568e+17"},
		{"bool", BoolOID, "t"},
		{"text_16", TextOID, "a short text val"},
		{"text_256", TextOID, strings.Repeat("lorem ipsum dolor sit amet, ", 10)[:256]},
		{"text_4096_escapes", TextOID, strings.Repeat("line \"one\"\n", 410)[:4096]},
		{"uuid", UUIDOID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{"jsonb", JSONBOID, `{"id": 42, "tags": ["a", "b"], "price": 12.50, "ok": true}`},
		{"bytea_32", ByteaOID, `\x` + strings.Repeat("0a", 32)},
		{"date", DateOID, "2024-01-06"},
		{"timestamptz_utc", TimestamptzOID, "2024-01-06 14:00:00.123456+00"},
		{"timestamptz_offset", TimestamptzOID, "2024-01-06 14:00:00.123456+05:30"},
		{"timestamptz_lmt", TimestamptzOID, "1883-11-18 07:03:58-04:56:02"},
		{"timestamp", TimestampOID, "2024-01-06 14:00:00.123456"},
		{"unknown_oid", 16452, "happy"},
		{"int4_array_10", Int4ArrayOID, "{1,2,3,4,5,6,7,8,9,10}"},
		{"int4_array_2x2", Int4ArrayOID, "{{1,2},{3,4}}"},
		{"text_array_quoted", TextArrayOID, `{"a,b","c\"d",NULL,"NULL",plain}`},
		{"timestamptz_array_3", TimestamptzArrayOID, `{"2024-01-06 14:00:00+00","2024-01-07 14:00:00+00","2024-01-08 14:00:00.5+00"}`},
		{"malformed_array", Int4ArrayOID, "{1,2,{3}}"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			text := []byte(bc.text)
			dst := make([]byte, 0, 2*len(text)+64)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				dst = AppendJSON(dst[:0], bc.oid, text)
			}
		})
	}
}
