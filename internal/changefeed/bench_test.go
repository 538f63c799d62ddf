package changefeed

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"testing"

	"github.com/heraldrt/herald/internal/change"
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

// BenchmarkPump drains 1,000-row transactions through the whole client side of a stream: a Unix
// socket, pgconn's framing, the reader goroutine (decode, assemble), the handoff queue, and a
// sink that encodes every event as a JSON line, as `herald tail` does. A fake walsender writes
// the stream ahead of the reader, so the socket always has data: this is the client's cost when
// it is the slower stage, as scripts/bench-changefeed finds it over a Unix socket. One op is
// one transaction.
//
//	go test -run '^$' -bench BenchmarkPump -benchmem ./internal/changefeed/
func BenchmarkPump(b *testing.B) {
	const rows = 1000
	// One transaction's frames, written again for each op with its LSNs patched in.
	txn := xlogData(0, begin(0, 1))
	beginLSN := len(txn) - 20 // the Begin's final LSN
	for i := 0; i < rows; i++ {
		txn = append(txn, xlogData(0, msg{'I'}.u32(200).u8('N').raw(tuple(fmt.Sprint(1000000+i), "org_42",
			"0123456789012345678901234567890123456789012345678901234567890123", fmt.Sprint(i), "2026-11-29 21:00:00.123456+00")))...)
	}
	txn = append(txn, xlogData(0, commit(0, 0))...)
	commitLSN := len(txn) - 24 // the Commit's LSN, then its end LSN

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out []byte
	seen := 0
	p, server := fakeStream(b, Config{}, SinkFunc(func(_ context.Context, txn *change.Txn) error {
		for i := range txn.Events {
			out = txn.Events[i].AppendJSON(out[:0])
			out = append(out, '\n')
		}
		if seen++; seen == b.N {
			cancel()
		}
		return nil
	}))
	go func() { _, _ = io.Copy(io.Discard, server) }() // status updates
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		if _, err := server.Write(xlogData(0, benchRelation())); err != nil {
			return
		}
		buf := make([]byte, len(txn))
		for i := 0; i < b.N; i++ {
			copy(buf, txn)
			lsn := uint64(i+1) << 24
			binary.BigEndian.PutUint64(buf[beginLSN:], lsn)
			binary.BigEndian.PutUint64(buf[commitLSN:], lsn)
			binary.BigEndian.PutUint64(buf[commitLSN+8:], lsn+64)
			if _, err := server.Write(buf); err != nil {
				return
			}
		}
	}()
	if err := p.run(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if seen != b.N {
		b.Fatalf("the sink saw %d transactions, want %d", seen, b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}
