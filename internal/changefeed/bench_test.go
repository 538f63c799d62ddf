package changefeed

import (
	"fmt"
	"testing"

	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

// benchRelation is the research's row shape: items(id bigserial, org_id text, body text, n int,
// updated_at timestamptz).
func benchRelation() msg {
	m := msg{'R'}.u32(200).str("public").str("items").u8('d').u16(5)
	m = m.u8(1).str("id").u32(pgvalue.Int8OID).u32(0xFFFFFFFF)
	m = m.u8(0).str("org_id").u32(pgvalue.TextOID).u32(0xFFFFFFFF)
	m = m.u8(0).str("body").u32(pgvalue.TextOID).u32(0xFFFFFFFF)
	m = m.u8(0).str("n").u32(pgvalue.Int4OID).u32(0xFFFFFFFF)
	m = m.u8(0).str("updated_at").u32(pgvalue.TimestamptzOID).u32(0xFFFFFFFF)
	return m
}

// BenchmarkAssembleInserts decodes 1,000-row transactions of inserts, as a stream delivers
// them: the client-side cost per row, without the socket.
//
//	go test -run '^$' -bench BenchmarkAssembleInserts -benchmem ./internal/changefeed/
func BenchmarkAssembleInserts(b *testing.B) {
	cfg := Config{WriteTagPrefix: "herald.write", MaxTxnBytes: 256 << 20}
	a := newAssembler(newDecoder(func(string) bool { return true }, ""), &cfg)
	if _, err := a.handle(0, benchRelation()); err != nil {
		b.Fatal(err)
	}
	const rows = 1000
	ins := make([]msg, rows)
	for i := range ins {
		ins[i] = msg{'I'}.u32(200).u8('N').raw(tuple(fmt.Sprint(1000000+i), "org_42",
			"0123456789012345678901234567890123456789012345678901234567890123", fmt.Sprint(i), "2026-11-29 21:00:00.123456+00"))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lsn := uint64(i+1) << 20
		if _, err := a.handle(0, begin(lsn, uint32(i+1))); err != nil {
			b.Fatal(err)
		}
		for _, m := range ins {
			if _, err := a.handle(0, m); err != nil {
				b.Fatal(err)
			}
		}
		res, err := a.handle(0, commit(lsn, lsn+64))
		if err != nil || res.txn == nil || len(res.txn.Events) != rows {
			b.Fatalf("commit: %v %+v", err, res)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}
