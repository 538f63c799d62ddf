package changefeed

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

// msg builds pgoutput messages byte by byte, as a walsender sends them.
type msg []byte

func (m msg) u8(v byte) msg    { return append(m, v) }
func (m msg) u16(v uint16) msg { return binary.BigEndian.AppendUint16(m, v) }
func (m msg) u32(v uint32) msg { return binary.BigEndian.AppendUint32(m, v) }
func (m msg) u64(v uint64) msg { return binary.BigEndian.AppendUint64(m, v) }
func (m msg) str(s string) msg { return append(append(m, s...), 0) }
func (m msg) xid(x uint32) msg { return m.u32(x) }
func (m msg) raw(b []byte) msg { return append(m, b...) }
func begin(final uint64, xid uint32) msg {
	return msg{'B'}.u64(final).u64(0).u32(xid)
}
func commit(lsn, end uint64) msg { return msg{'C'}.u8(0).u64(lsn).u64(end).u64(0) }

// relationMsg describes table public.t(id int4 key, body text, org text).
func relationMsg(stream bool, xid uint32, identity byte) msg {
	m := msg{'R'}
	if stream {
		m = m.xid(xid)
	}
	m = m.u32(100).str("public").str("t").u8(identity).u16(3)
	m = m.u8(1).str("id").u32(pgvalue.Int4OID).u32(0xFFFFFFFF)
	m = m.u8(0).str("body").u32(pgvalue.TextOID).u32(0xFFFFFFFF)
	m = m.u8(0).str("org").u32(pgvalue.TextOID).u32(0xFFFFFFFF)
	return m
}

// tuple encodes columns: "n" null, "u" unchanged toast, anything else text.
func tuple(cols ...string) []byte {
	m := msg{}.u16(uint16(len(cols)))
	for _, c := range cols {
		switch c {
		case "n":
			m = m.u8('n')
		case "u":
			m = m.u8('u')
		default:
			m = m.u8('t').u32(uint32(len(c))).raw([]byte(c))
		}
	}
	return m
}

func insert(stream bool, xid uint32, cols ...string) msg {
	m := msg{'I'}
	if stream {
		m = m.xid(xid)
	}
	return m.u32(100).u8('N').raw(tuple(cols...))
}

func streamStart(xid uint32) msg      { return msg{'S'}.u32(xid).u8(1) }
func streamStop() msg                 { return msg{'E'} }
func streamAbort(xid, sub uint32) msg { return msg{'A'}.u32(xid).u32(sub) }
func streamCommit(xid uint32, lsn, end uint64) msg {
	return msg{'c'}.u32(xid).u8(0).u64(lsn).u64(end).u64(0)
}

func newTestAssembler() *assembler {
	cfg := Config{WriteTagPrefix: "herald.write", MaxTxnBytes: 1 << 20}
	return newAssembler(newDecoder(func(string) bool { return true }, "org"), &cfg)
}

func feedAll(t *testing.T, a *assembler, msgs ...msg) []*change.Txn {
	t.Helper()
	var out []*change.Txn
	for i, m := range msgs {
		res, err := a.handle(0, m)
		if err != nil {
			t.Fatalf("message %d (%q): %v", i, m[0], err)
		}
		if res.txn != nil {
			out = append(out, res.txn)
		}
	}
	return out
}

func ids(txn *change.Txn) []string {
	var out []string
	for _, e := range txn.Events {
		v, _ := e.After.Get("id")
		out = append(out, string(v))
	}
	return out
}

func TestInterleavedStreamsAndSubtransactionAbort(t *testing.T) {
	a := newTestAssembler()
	txns := feedAll(t, a,
		streamStart(10), relationMsg(true, 10, 'd'), insert(true, 10, "1", "a", "o"), insert(true, 11, "2", "sub", "o"), streamStop(),
		streamStart(20), relationMsg(true, 20, 'd'), insert(true, 20, "100", "b", "o"), streamStop(),
		streamStart(10), insert(true, 10, "3", "c", "o"), streamStop(),
		streamAbort(10, 11), // subtransaction 11 of 10 rolled back
		streamAbort(20, 20), // 20 rolled back whole
		streamCommit(10, 0x500, 0x540),
		streamCommit(20, 0x600, 0x640), // a commit after an abort: nothing buffered, nothing to hand on
	)
	if len(txns) != 2 {
		t.Fatalf("got %d transactions, want 2", len(txns))
	}
	if diff := cmp.Diff([]string{"1", "3"}, ids(txns[0])); diff != "" {
		t.Errorf("xid 10 ids (-want +got):\n%s", diff)
	}
	if txns[0].CommitLSN != 0x500 || txns[0].EndLSN != 0x540 || txns[0].XID != 10 {
		t.Errorf("xid 10 position = %s..%s xid %d", txns[0].CommitLSN, txns[0].EndLSN, txns[0].XID)
	}
	if len(txns[1].Events) != 0 {
		t.Errorf("aborted xid 20 handed on %d events", len(txns[1].Events))
	}
	if a.open() {
		t.Error("assembler still open after every stream ended")
	}
}

func TestReplayedTransactionsAreSkipped(t *testing.T) {
	a := newTestAssembler()
	a.skipThrough = 0x200
	for _, tt := range []struct {
		lsn, end uint64
		skip     bool
	}{{0x100, 0x140, true}, {0x200, 0x240, true}, {0x300, 0x340, false}, {0x300, 0x340, true}} {
		feedAll(t, a, begin(tt.lsn, 5), relationMsg(false, 0, 'd'), insert(false, 0, "1", "a", "o"))
		res, err := a.handle(0, commit(tt.lsn, tt.end))
		if err != nil {
			t.Fatal(err)
		}
		if skipped := res.txn == nil; skipped != tt.skip || skipped && res.skipped != change.LSN(tt.end) {
			t.Errorf("commit %#x: skipped=%v (end %s), want skipped=%v", tt.lsn, skipped, res.skipped, tt.skip)
		}
	}
}

func TestUnchangedToastIsOmittedNotNull(t *testing.T) {
	a := newTestAssembler()
	up := msg{'U'}.u32(100).u8('N').raw(tuple("1", "u", "o"))
	txns := feedAll(t, a, begin(0x10, 1), relationMsg(false, 0, 'd'), up, commit(0x10, 0x20))
	e := txns[0].Events[0]
	if got := mustJSON(e.After); got != `{"id":1,"org":"o"}` {
		t.Errorf("after = %s, want body absent", got)
	}
	if diff := cmp.Diff([]string{"body"}, e.Omitted); diff != "" {
		t.Errorf("omitted (-want +got):\n%s", diff)
	}
	// With a full old image the value is filled in and not listed.
	full := msg{'U'}.u32(100).u8('O').raw(tuple("1", "long", "o")).u8('N').raw(tuple("1", "u", "p"))
	txns = feedAll(t, a, begin(0x30, 2), relationMsg(false, 0, 'f'), full, commit(0x30, 0x40))
	e = txns[0].Events[0]
	if got := mustJSON(e.After); got != `{"id":1,"body":"long","org":"p"}` || len(e.Omitted) != 0 || e.Tenant != "p" {
		t.Errorf("after = %s omitted=%v tenant=%q, want body filled, nothing omitted, tenant p", got, e.Omitted, e.Tenant)
	}
}

func TestKeyTupleKeepsOnlyKeyColumns(t *testing.T) {
	a := newTestAssembler()
	del := msg{'D'}.u32(100).u8('K').raw(tuple("7", "n", "n"))
	txns := feedAll(t, a, begin(0x10, 1), relationMsg(false, 0, 'd'), del, commit(0x10, 0x20))
	e := txns[0].Events[0]
	if got := mustJSON(e.Before); got != `{"id":7}` || !e.BeforeKeyOnly {
		t.Errorf("before = %s key-only=%v; 'n' in a key tuple means not part of the key, not NULL", got, e.BeforeKeyOnly)
	}
}

func TestOversizedTransactionBecomesAnOverflow(t *testing.T) {
	cfg := Config{WriteTagPrefix: "herald.write", MaxTxnBytes: 4096}
	a := newAssembler(newDecoder(func(string) bool { return true }, ""), &cfg)
	msgs := []msg{begin(0x10, 1), relationMsg(false, 0, 'd')}
	for i := 0; i < 100; i++ {
		msgs = append(msgs, insert(false, 0, fmt.Sprint(i), strings.Repeat("x", 100), "o"))
	}
	msgs = append(msgs, commit(0x10, 0x20))
	txns := feedAll(t, a, msgs...)
	if len(txns) != 1 || txns[0].Overflow == nil {
		t.Fatalf("got %+v, want one overflow transaction", txns)
	}
	if o := txns[0].Overflow; o.Changes != 100 || o.Tables["public.t"] != 100 || len(txns[0].Events) != 0 {
		t.Errorf("overflow = %+v with %d events, want 100 changes of public.t and no rows", o, len(txns[0].Events))
	}
}

func TestMalformedMessagesAreErrorsNotPanics(t *testing.T) {
	for _, m := range []msg{
		{},
		{'I'},
		msg{'I'}.u32(100).u8('N').u16(3).u8('t').u32(1000),  // text longer than the message
		msg{'T'}.u32(0xFFFFFFFF).u8(0),                      // four billion relations
		msg{'R'}.u32(1).str("public"),                       // cut short
		msg{'M'}.u8(1).u64(1).str("p").u32(1 << 30),         // content longer than the message
		msg{'U'}.u32(100).u8('X'),                           // unknown tuple kind
		insert(false, 0, "1", "a", "o"),                     // a change outside a transaction
		msg{'I'}.u32(999).u8('N').raw(tuple("1", "a", "o")), // unknown relation
	} {
		a := newTestAssembler()
		feedAll(t, a, relationMsg(false, 0, 'd'))
		if _, err := a.handle(0, m); err == nil {
			t.Errorf("message %q: no error", []byte(m))
		}
	}
}

func FuzzAssemble(f *testing.F) {
	seq := func(ms ...msg) []byte {
		var out []byte
		for _, m := range ms {
			out = binary.BigEndian.AppendUint16(out, uint16(len(m)))
			out = append(out, m...)
		}
		return out
	}
	f.Add(seq(begin(0x10, 1), relationMsg(false, 0, 'd'), insert(false, 0, "1", "a", "o"), commit(0x10, 0x20)))
	f.Add(seq(streamStart(10), relationMsg(true, 10, 'f'), insert(true, 10, "1", "a", "o"), streamStop(), streamAbort(10, 11), streamCommit(10, 0x30, 0x40)))
	f.Add(seq(begin(0x10, 1), msg{'T'}.u32(1).u8(0).u32(100), msg{'M'}.u8(1).u64(5).str("herald.write").u32(3).raw([]byte("tag")), commit(0x10, 0x20)))
	f.Add(seq(begin(0x10, 1), msg{'U'}.u32(100).u8('O').raw(tuple("1", "b", "n")).u8('N').raw(tuple("1", "u", "o")), commit(0x10, 0x20)))
	f.Add(seq(msg{'Y'}.u32(16500).str("").str("int4"), msg{'M'}.u8(0).u64(5).str("x").u32(1).raw([]byte("y"))))
	f.Fuzz(func(t *testing.T, data []byte) {
		input := len(data)
		a := newTestAssembler()
		a.messages = func(string) bool { return true }
		// Every sequence starts with the relation known, so changes reach the tuple decoder.
		if _, err := a.handle(0, relationMsg(false, 0, 'd')); err != nil {
			t.Fatal(err)
		}
		for len(data) >= 2 {
			n := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			if n > len(data) {
				n = len(data)
			}
			res, err := a.handle(0, data[:n])
			data = data[n:]
			if err != nil || res.txn == nil {
				continue
			}
			for _, e := range res.txn.Events {
				b := e.AppendJSON(nil)
				if len(b) > 64*input+4096 {
					t.Fatalf("a %d-byte input made a %d-byte event: %.300s", input, len(b), b)
				}
				if !jsonValid(b) {
					t.Fatalf("event encodes to invalid JSON: %s", b)
				}
			}
		}
	})
}

// TestMessageLengthCannotReachPastTheMessage: a logical message whose content length runs past
// its end must fail, even when the bytes after it are there (the rest of a receive buffer).
func TestMessageLengthCannotReachPastTheMessage(t *testing.T) {
	m := msg{'M'}.u8(0).u64(5).str("p").u32(64).raw([]byte("short"))
	buf := append(append([]byte{}, m...), make([]byte, 4096)...) // the "rest of the buffer"
	a := newTestAssembler()
	a.messages = func(string) bool { return true }
	res, err := a.handle(0, buf[:len(m)])
	if err == nil {
		t.Fatalf("a content length past the message was accepted: %+v", res.txn)
	}
}

// TestNonTransactionalMessageHasNoCommitTime: a logical message sent outside any transaction has
// no commit time and no transaction id; it must not carry a made-up or zero one
// ("0001-01-01T00:00:00Z", txid 0).
func TestNonTransactionalMessageHasNoCommitTime(t *testing.T) {
	a := newTestAssembler()
	a.messages = func(string) bool { return true }
	txns := feedAll(t, a,
		msg{'M'}.u8(0).u64(5).str("app").u32(2).raw([]byte("hi")),
		begin(20, 7), msg{'M'}.u8(1).u64(12).str("app").u32(2).raw([]byte("in")), commit(20, 28),
	)
	if len(txns) != 2 {
		t.Fatalf("got %d transactions, want 2", len(txns))
	}
	if !txns[0].CommitTime.IsZero() || txns[0].Transactional {
		t.Errorf("non-transactional txn: commit time %v, transactional %v; want zero, false", txns[0].CommitTime, txns[0].Transactional)
	}
	got := string(txns[0].Events[0].AppendJSON(nil))
	if want := `{"op":"message","before":null,"after":null,"lsn":"0/5","prefix":"app","content":"hi"}`; got != want {
		t.Errorf("non-transactional message:\n got %s\nwant %s", got, want)
	}
	got = string(txns[1].Events[0].AppendJSON(nil))
	if !strings.Contains(got, `"txid":7,"commit_time":"2000-01-01T00:00:00Z"`) {
		t.Errorf("transactional message %s: want its txid and commit time", got)
	}
}

func TestTransactionSizesFollowEachOther(t *testing.T) {
	// A transaction grows straight to the size of the last one (BenchmarkAssembleInserts counts
	// the allocations); every event lands where it belongs, and one far smaller than the last
	// is handed on in a slice near its own size, since the sink may hold it.
	a := newTestAssembler()
	txn := func(lsn uint64, rows int) *change.Txn {
		msgs := []msg{begin(lsn, uint32(lsn))}
		for i := 0; i < rows; i++ {
			msgs = append(msgs, insert(false, 0, fmt.Sprint(i), "b", "o"))
		}
		txns := feedAll(t, a, append(msgs, commit(lsn, lsn+8))...)
		if len(txns) != 1 || len(txns[0].Events) != rows {
			t.Fatalf("transaction at %d: got %d transactions, want 1 of %d events", lsn, len(txns), rows)
		}
		for i, e := range txns[0].Events {
			if v, _ := e.After.Get("id"); string(v) != fmt.Sprint(i) || e.LSN != change.LSN(lsn) {
				t.Fatalf("transaction at %d, event %d: id %s at %s", lsn, i, v, e.LSN)
			}
		}
		return txns[0]
	}
	feedAll(t, a, relationMsg(false, 0, 'd'))
	txn(0x100, 1000)
	txn(0x200, 1500)
	if got := cap(txn(0x300, 40).Events); got > 4*40 {
		t.Errorf("a 40-event transaction after a 1,500-event one: capacity %d, want at most %d", got, 4*40)
	}
}
