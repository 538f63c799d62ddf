package changefeed

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// TestXID8AcrossTheWrap feeds transactions whose 32-bit xids wrap around, from a reference in
// epoch 3 just before the wrap, plain and streamed, and checks each one's XID8.
func TestXID8AcrossTheWrap(t *testing.T) {
	a := newTestAssembler()
	a.xidRef = change.MakeXID8(3, math.MaxUint32-3)
	tail := uint32(math.MaxUint32 - 1)
	txns := feedAll(t, a,
		begin(0x100, tail), relationMsg(false, 0, 'd'), insert(false, 0, "1", "a", "o"), commit(0x100, 0x140),
		begin(0x200, 3), insert(false, 0, "2", "a", "o"), commit(0x200, 0x240),
		// A transaction that got its xid before the wrap commits after one that got its own
		// after it: still the earlier epoch.
		begin(0x300, tail+1), insert(false, 0, "3", "a", "o"), commit(0x300, 0x340),
		streamStart(7), relationMsg(true, 7, 'd'), insert(true, 7, "4", "a", "o"), streamStop(),
		streamCommit(7, 0x400, 0x440),
	)
	want := []change.XID8{change.MakeXID8(3, tail), change.MakeXID8(4, 3), change.MakeXID8(3, tail+1), change.MakeXID8(4, 7)}
	if len(txns) != len(want) {
		t.Fatalf("got %d transactions, want %d", len(txns), len(want))
	}
	for i, tx := range txns {
		if tx.XID8 != want[i] || tx.XID8.XID() != tx.XID {
			t.Errorf("transaction %d: XID %d, XID8 %s, want XID8 %s", i, tx.XID, tx.XID8, want[i])
		}
	}
}

// TestXID8FollowsReplays: a replayed transaction is dropped, but the reference still moves to
// it, so the next one widens against where the stream is.
func TestXID8FollowsReplays(t *testing.T) {
	a := newTestAssembler()
	a.xidRef = change.MakeXID8(2, 1<<31)
	a.skipThrough = 0x200
	// Replays walk the reference forward past the point where 5 would first widen into
	// epoch 2 rather than 3.
	var got []*change.Txn
	for i, x := range []uint32{1<<31 + 1<<30, math.MaxUint32 - 10} {
		lsn := uint64(0x100 + i*0x10)
		got = append(got, feedAll(t, a, begin(lsn, x), commit(lsn, lsn+8))...)
	}
	if len(got) != 0 {
		t.Fatalf("replays handed on: %d", len(got))
	}
	txns := feedAll(t, a, begin(0x300, 5), relationMsg(false, 0, 'd'), insert(false, 0, "1", "a", "o"), commit(0x300, 0x340))
	if len(txns) != 1 || txns[0].XID8 != change.MakeXID8(3, 5) {
		t.Fatalf("got %+v, want one transaction with XID8 %s", txns, change.MakeXID8(3, 5))
	}
}

func TestXID8Unseeded(t *testing.T) {
	a := newTestAssembler()
	txns := feedAll(t, a, begin(0x100, 729), relationMsg(false, 0, 'd'), insert(false, 0, "1", "a", "o"), commit(0x100, 0x140))
	if len(txns) != 1 || txns[0].XID8 != 729 {
		t.Fatalf("got %+v, want XID8 729 (epoch 0)", txns)
	}
}

func TestXID8OutsideEveryEpoch(t *testing.T) {
	a := newTestAssembler()
	a.xidRef = 5 // epoch 0: a 32-bit xid just "before" it would be in epoch -1
	feedAll(t, a, begin(0x100, math.MaxUint32))
	_, err := a.handle(0, commit(0x100, 0x140))
	if err == nil || !strings.Contains(err.Error(), "outside every epoch") {
		t.Fatalf("commit = %v, want an error saying the xid lies outside every epoch", err)
	}
}

func TestMessageOutsideTransactionHasNoXID8(t *testing.T) {
	cfg := Config{WriteTagPrefix: "herald.write", MaxTxnBytes: 1 << 20, MessagePrefixes: []string{"herald.fence"}}
	a := newAssembler(newDecoder(func(string) bool { return true }, "org"), &cfg)
	a.xidRef = change.MakeXID8(1, 9)
	m := msg{'M'}.u8(0).u64(0x500).str("herald.fence").u32(1).raw([]byte("x"))
	res, err := a.handle(0x500, m)
	if err != nil || res.txn == nil {
		t.Fatalf("handle = %+v, %v", res, err)
	}
	if res.txn.XID8 != 0 || res.txn.Transactional || res.txn.EndLSN != 0x500 {
		t.Fatalf("message txn = %+v, want no XID8, non-transactional, at 0/500", res.txn)
	}
}

// TestXID8MatchesTheServer: each streamed transaction's XID8 is the one pg_current_xact_id()
// gave inside it.
func TestXID8MatchesTheServer(t *testing.T) {
	url := db(t, itemsTable)
	sink := newCollector()
	start(t, testConfig(url, "public.items"), sink)

	ctx := context.Background()
	c := connect(t, url)
	var want []change.XID8
	for i := range 3 {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var x string
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO items VALUES ($1, 'acme', 'x', 1, NULL)`, i+1); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, change.XID8(v))
	}
	txns, _ := sink.waitFor(t, "3 transactions", func(tx []*change.Txn, _ []change.Event) bool { return len(tx) >= 3 })
	for i, tx := range txns {
		if tx.XID8 != want[i] {
			t.Errorf("transaction %d: XID8 %s, pg_current_xact_id() said %s", i, tx.XID8, want[i])
		}
	}
}
