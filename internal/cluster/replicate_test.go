package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/interest"
)

// replication is a world whose node R replicates, its interest store spied on, and nodes that
// watch tables: B orders whose id is 1, C every order, D every item, E items whose id is 6.
type replication struct {
	*world
	r    *peer
	spy  *spyStore
	hist *spyHistory
}

func newReplication(t *testing.T) *replication {
	t.Helper()
	w := newWorld(t)
	spy := &spyStore{Store: w.store, calls: w.calls}
	hist := &spyHistory{Store: w.history, calls: w.calls}
	rp := &replication{world: w, spy: spy, hist: hist, r: w.node(t, "R", func(c *Config) { c.Interest, c.History = spy, hist })}
	for _, wt := range []struct{ node, table, token string }{
		{"B", "public.orders", "k:id=1"},
		{"C", "public.orders", "*"},
		{"D", "public.items", "*"},
		{"E", "public.items", "k:id=6"},
		{"R", "public.orders", "*"}, // the replicator's own: routed by its own router
	} {
		n := rp.r.Node
		if wt.node != "R" {
			n = w.node(t, wt.node, nil).Node
		}
		if _, err := n.Watch(context.Background(), TableOwner(wt.table), wt.token, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	return rp
}

// txnsTo decodes what was sent to node.
func (rp *replication) txnsTo(t *testing.T, node string) []*change.Txn {
	t.Helper()
	var out []*change.Txn
	for _, b := range rp.tr.to(node) {
		if len(b) == 0 || b[0] != kindTxn {
			t.Fatalf("payload %q to %s is not a transaction", b, node)
		}
		txn, err := decodeTxn(b[1:])
		if err != nil {
			t.Fatalf("payload %q to %s: %v", b, node, err)
		}
		out = append(out, txn)
	}
	return out
}

// only returns txn with the events outside idx replaced by the placeholders a receiver sees.
func only(txn *change.Txn, idx ...int) *change.Txn {
	c := *txn
	c.Events = slices.Clone(txn.Events)
	for i := range c.Events {
		if !slices.Contains(idx, i) {
			c.Events[i] = change.Event{Op: change.Message}
		}
	}
	return &c
}

// read decodes what table's history holds in (after, through].
func (rp *replication) read(t *testing.T, table string, after, through change.LSN) []history.Txn {
	t.Helper()
	r, err := rp.world.history.Read(context.Background(), table, after, through, history.Limit{Entries: 100, Bytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var out []history.Txn
	for _, e := range r.Entries {
		txn, err := history.Decode(e.LSN, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, txn)
	}
	return out
}

func (rp *replication) mark(t *testing.T, table string) change.LSN {
	t.Helper()
	m, err := rp.store.Mark(context.Background(), TableOwner(table))
	if err != nil {
		t.Fatal(err)
	}
	return change.LSN(m)
}

func TestReplicate(t *testing.T) {
	rp := newReplication(t)
	rp.calls.log = nil // from here on
	txn := testTxn()
	if err := rp.r.Replicate(context.Background(), txn); err != nil {
		t.Fatal(err)
	}

	// Each node gets the events its interest hits, at their indexes.
	want := map[string][]*change.Txn{
		"B": {only(txn, 0)},    // orders with id 1
		"C": {only(txn, 0, 3)}, // every order
		"D": {only(txn, 1)},    // every item
	}
	for _, node := range []string{"B", "C", "D", "E", "R"} {
		if diff := cmp.Diff(want[node], rp.txnsTo(t, node)); diff != "" {
			t.Errorf("sent to %s (-want +got):\n%s", node, diff)
		}
	}
	for _, table := range []string{"public.orders", "public.items"} {
		if got := rp.mark(t, table); got != txn.CommitLSN {
			t.Errorf("mark of %s: %s, want the commit LSN %s", table, got, txn.CommitLSN)
		}
	}
	if got := rp.r.tables.txns(); len(got) != 1 || got[0] != txn {
		t.Errorf("the local router accepted %v, want the whole transaction", got)
	}

	// Per table, the stamp comes before the rows are read; everything is sent before the
	// local router has it, and flushed once after.
	calls := rp.calls.all()
	at := func(prefix string) int {
		i := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
		if i < 0 {
			t.Fatalf("no call %q in %q", prefix, calls)
		}
		return i
	}
	lastAt := func(prefix string) int {
		i := -1
		for j, c := range calls {
			if strings.HasPrefix(c, prefix) {
				i = j
			}
		}
		return i
	}
	for _, owner := range []string{"t:public.orders", "t:public.items"} {
		if at("stamp "+owner) > at("rows "+owner) {
			t.Errorf("%s: rows read before the stamp: %q", owner, calls)
		}
	}
	if !(lastAt("send ") < at("accept ") && at("accept ") < at("flush")) || rp.tr.flushCount() != 1 {
		t.Errorf("calls %q: want the sends, then the local accept, then one flush", calls)
	}
	if s := rp.r.Stats(); s.Sent[KindTable] != 3 {
		t.Errorf("sent %d transactions, want 3", s.Sent[KindTable])
	}

	// A second transaction with no interest changed reads no rows: the generation it stamped
	// is the one cached.
	lookups := rp.r.Stats().Lookups
	txn2 := testTxn()
	txn2.CommitLSN += 0x100
	if err := rp.r.Replicate(context.Background(), txn2); err != nil {
		t.Fatal(err)
	}
	if got := rp.r.Stats().Lookups; got != lookups {
		t.Errorf("%d lookups after a second transaction, want still %d", got, lookups)
	}
	if got := rp.mark(t, "public.orders"); got != txn2.CommitLSN {
		t.Errorf("mark %s, want %s", got, txn2.CommitLSN)
	}
	if n := len(rp.tr.to("C")); n != 2 {
		t.Errorf("sent %d transactions to C, want 2", n)
	}
}

func TestReplicateSeesNewInterest(t *testing.T) {
	rp := newReplication(t)
	if err := rp.r.Replicate(context.Background(), testTxn()); err != nil {
		t.Fatal(err)
	}
	// E subscribes to the item changed: the generation moved, so the next transaction finds
	// its row.
	if _, err := rp.r.cfg.Interest.Add(context.Background(), TableOwner("public.items"),
		rowOf("E", "k:id=5")); err != nil {
		t.Fatal(err)
	}
	txn2 := testTxn()
	txn2.CommitLSN += 0x100
	if err := rp.r.Replicate(context.Background(), txn2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*change.Txn{only(txn2, 1)}, rp.txnsTo(t, "E")); diff != "" {
		t.Errorf("sent to E (-want +got):\n%s", diff)
	}
}

func TestReplicateOverflow(t *testing.T) {
	rp := newReplication(t)
	rp.calls.log = nil
	txn := &change.Txn{XID: 5, CommitLSN: 0x500, EndLSN: 0x540, Transactional: true,
		Overflow: &change.Overflow{Tables: map[string]int{"public.orders": 3, "public.nobody": 1}, Changes: 4}}
	if err := rp.r.Replicate(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	// Every node holding an overflowed table hears of it, whatever its tokens.
	want := &change.Txn{XID: 5, CommitLSN: 0x500, EndLSN: 0x540, Transactional: true, Overflow: txn.Overflow, Events: []change.Event{}}
	for _, node := range []string{"B", "C"} {
		if diff := cmp.Diff([]*change.Txn{want}, rp.txnsTo(t, node)); diff != "" {
			t.Errorf("sent to %s (-want +got):\n%s", node, diff)
		}
	}
	for _, node := range []string{"D", "E", "R"} {
		if n := len(rp.tr.to(node)); n != 0 {
			t.Errorf("sent %d payloads to %s, which holds no table the overflow names", n, node)
		}
	}
	calls := rp.calls.all()
	if i, j := slices.Index(calls, "stamp t:public.orders 1280"), slices.Index(calls, "sockets t:public.orders"); i < 0 || j < i {
		t.Errorf("calls %q: want the stamp, then the sockets", calls)
	}
	if got := rp.mark(t, "public.nobody"); got != txn.CommitLSN {
		t.Errorf("mark of a table nobody holds: %s, want %s", got, txn.CommitLSN)
	}
	if rp.tr.flushCount() != 1 || len(rp.r.tables.txns()) != 1 {
		t.Errorf("%d flushes, %d local accepts; want 1 and 1", rp.tr.flushCount(), len(rp.r.tables.txns()))
	}
}

// TestReplicateTruncate checks that a truncate reaches every node holding its table, those
// whose subscriptions pin one value (B: orders whose id is 1; E: items whose id is 6) too: it
// empties the table under all of them.
func TestReplicateTruncate(t *testing.T) {
	rp := newReplication(t)
	txn := testTxn()
	base := txn.Events[0]
	truncate := func(table string) change.Event {
		return change.Event{Table: table, Op: change.Truncate, LSN: base.LSN, TxID: base.TxID, CommitTime: base.CommitTime, WriteTag: base.WriteTag}
	}
	txn.Events = []change.Event{
		txn.Events[0],             // an insert of order 1: B and C
		truncate("public.orders"), // B and C
		truncate("public.items"),  // D and E
	}
	if err := rp.r.Replicate(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	want := map[string][]*change.Txn{
		"B": {only(txn, 0, 1)},
		"C": {only(txn, 0, 1)},
		"D": {only(txn, 2)},
		"E": {only(txn, 2)},
	}
	for _, node := range []string{"B", "C", "D", "E", "R"} {
		if diff := cmp.Diff(want[node], rp.txnsTo(t, node)); diff != "" {
			t.Errorf("sent to %s (-want +got):\n%s", node, diff)
		}
	}
}

// TestReplicateNothingToSend checks that a transaction no other node wants is routed here and
// not flushed: there is nothing to wait for.
func TestReplicateNothingToSend(t *testing.T) {
	rp := newReplication(t)
	rp.calls.log = nil
	txn := testTxn()
	for i := range txn.Events {
		if txn.Events[i].Table != "" {
			txn.Events[i].Table = "public.nobody"
		}
	}
	if err := rp.r.Replicate(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	if n, f := rp.tr.total(), rp.tr.flushCount(); n != 0 || f != 0 {
		t.Errorf("%d sends, %d flushes; want none", n, f)
	}
	if len(rp.r.tables.txns()) != 1 {
		t.Error("the local router was not handed the transaction")
	}
	if got := rp.mark(t, "public.nobody"); got != txn.CommitLSN {
		t.Errorf("mark %s, want %s", got, txn.CommitLSN)
	}
}

// TestReplicateUnknownTokens checks that a change whose tokens the router cannot name goes to
// every node that holds its table.
func TestReplicateUnknownTokens(t *testing.T) {
	rp := newReplication(t)
	rp.r.tables.tokens = func(e *change.Event) ([]string, error) {
		return []string{"*"}, errors.New("no schema")
	}
	txn := testTxn()
	if err := rp.r.Replicate(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	want := map[string][]*change.Txn{
		"B": {only(txn, 0, 3)},
		"C": {only(txn, 0, 3)},
		"D": {only(txn, 1)},
		"E": {only(txn, 1)},
	}
	for _, node := range []string{"B", "C", "D", "E", "R"} {
		if diff := cmp.Diff(want[node], rp.txnsTo(t, node)); diff != "" {
			t.Errorf("sent to %s (-want +got):\n%s", node, diff)
		}
	}
}

// TestReplicateFails checks that each failure fails Replicate, so the changefeed does not
// confirm the transaction.
func TestReplicateFails(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name       string
		edit       func(rp *replication)
		sends      bool // whether anything was sent before the failure
		accepted   bool
		wantFlushs int
	}{
		{"history", func(rp *replication) { rp.hist.appendErr = boom }, false, false, 0},
		{"stamp", func(rp *replication) { rp.spy.stampErr = boom }, false, false, 0},
		{"flush", func(rp *replication) { rp.tr.flushErr = boom }, true, true, 1},
		{"local router", func(rp *replication) { rp.r.tables.acceptErr = boom }, true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := newReplication(t)
			tc.edit(rp)
			err := rp.r.Replicate(context.Background(), testTxn())
			if !errors.Is(err, boom) {
				t.Fatalf("Replicate = %v, want it to wrap %v", err, boom)
			}
			if got := rp.tr.total() > 0; got != tc.sends {
				t.Errorf("sent: %v, want %v", got, tc.sends)
			}
			if got := len(rp.r.tables.txns()) > 0; got != tc.accepted {
				t.Errorf("accepted locally: %v, want %v", got, tc.accepted)
			}
			if got := rp.tr.flushCount(); got != tc.wantFlushs {
				t.Errorf("%d flushes, want %d", got, tc.wantFlushs)
			}
			if tc.name == "history" && rp.mark(t, "public.orders") != 0 {
				t.Error("a table was stamped though its history was not written")
			}
		})
	}
}

func TestReplicateWithoutTables(t *testing.T) {
	w := newWorld(t)
	r := w.node(t, "R", func(c *Config) { c.Tables = nil })
	if err := r.Replicate(context.Background(), testTxn()); err == nil {
		t.Fatal("Replicate without tables succeeded")
	}
}

// rowOf is a row a node files for token, as Watch would.
func rowOf(node, token string) interest.Row {
	return interest.Row{Token: token, Socket: node, Sub: "x" + token, Identity: "alice", Node: node}
}

// TestReplicateRecordsHistoryBeforeStamping: every table a transaction touched gets its entry,
// in one append, before any table is stamped; an overflow's tables get theirs too.
func TestReplicateRecordsHistoryBeforeStamping(t *testing.T) {
	rp := newReplication(t)
	rp.calls.log = nil
	txn := testTxn()
	if err := rp.r.Replicate(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	calls := rp.calls.all()
	appendAt := slices.Index(calls, "append public.items,public.orders")
	firstStamp := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "stamp ") })
	if appendAt < 0 || firstStamp < appendAt || rp.calls.count("append public.items,public.orders") != 1 {
		t.Fatalf("calls %q: want one append of both tables, before any stamp", calls)
	}
	for table, idx := range map[string][]int{"public.orders": {0, 3}, "public.items": {1}} {
		got := rp.read(t, table, txn.CommitLSN-1, txn.CommitLSN)
		if len(got) != 1 {
			t.Fatalf("%s: %d entries, want 1", table, len(got))
		}
		var want []history.Event
		for _, i := range idx {
			want = append(want, history.Event{Idx: uint32(i + 1), Event: txn.Events[i], Key: txn.Events[i].Key})
		}
		if diff := cmp.Diff(want, got[0].Events); diff != "" {
			t.Errorf("%s's entry (-want +got):\n%s", table, diff)
		}
	}

	// Again after a failover: nothing changes.
	if err := rp.r.Replicate(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	if got := rp.read(t, "public.orders", 0, txn.CommitLSN); len(got) != 1 {
		t.Errorf("after the transaction came again: %d entries, want 1", len(got))
	}

	of := &change.Txn{CommitLSN: txn.CommitLSN + 0x100, Overflow: &change.Overflow{Tables: map[string]int{"public.orders": 3}, Changes: 3}}
	if err := rp.r.Replicate(context.Background(), of); err != nil {
		t.Fatal(err)
	}
	got := rp.read(t, "public.orders", txn.CommitLSN, of.CommitLSN)
	if len(got) != 1 || got[0].Overflow == nil || got[0].Overflow.Tables["public.orders"] != 3 || len(got[0].Events) != 0 {
		t.Errorf("an overflow's entry: %+v, want its overflow and no changes", got)
	}
}

// TestReplicatePrev: an entry's Prev is the table's last transaction this node recorded, else
// where its stream started, else its own LSN less one; a stream that resumes past what the node
// recorded forgets what it knew.
func TestReplicatePrev(t *testing.T) {
	rp := newReplication(t)
	txnAt := func(lsn change.LSN, tables ...string) *change.Txn {
		txn := &change.Txn{CommitLSN: lsn}
		for _, table := range tables {
			txn.Events = append(txn.Events, change.Event{Table: table, Op: change.Insert, After: change.Row{{Name: "id", Value: []byte("1")}}, LSN: lsn})
		}
		return txn
	}
	step := func(what string, txn *change.Txn, want map[string]change.LSN) {
		t.Helper()
		if err := rp.r.Replicate(context.Background(), txn); err != nil {
			t.Fatal(err)
		}
		got := rp.hist.lastPrevs()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: Prev given (-want +got):\n%s", what, diff)
		}
	}
	step("before the stream said where it started", txnAt(0x100, "public.a"), map[string]change.LSN{"public.a": 0xff})
	rp.r.Streaming(0x180)
	step("a stream that resumed after what was recorded", txnAt(0x200, "public.a", "public.b"), map[string]change.LSN{"public.a": 0x17f, "public.b": 0x17f})
	step("the next", txnAt(0x300, "public.a"), map[string]change.LSN{"public.a": 0x200})
	rp.r.Streaming(0x250) // resumes before the last recorded: this node saw everything up to it
	step("a stream resumed inside what was recorded", txnAt(0x400, "public.a", "public.c"), map[string]change.LSN{"public.a": 0x300, "public.c": 0x17f})
	rp.r.Streaming(0x900) // resumes past it: another replicator may have recorded meanwhile
	step("a stream resumed past what was recorded", txnAt(0x1000, "public.a"), map[string]change.LSN{"public.a": 0x8ff})
}

// TestReplicateFence: a snapshot's fence, a logical message sent outside any transaction with
// the fence prefix, goes to the node its content names (after what was sent to it before, and
// flushed), as a position: no event of it. Its own node's, and any other message, go nowhere.
func TestReplicateFence(t *testing.T) {
	fence := func(content string) *change.Txn {
		return &change.Txn{CommitLSN: 0x900, EndLSN: 0x900,
			Events: []change.Event{{Op: change.Message, Prefix: "herald.fence", Content: content, LSN: 0x900}}}
	}
	for _, tc := range []struct {
		name   string
		prefix string
		txn    *change.Txn
		to     string
	}{
		{"another node's", "herald.fence", fence("B.7"), "B"},
		{"its own", "herald.fence", fence("R.7"), ""},
		{"no node named", "herald.fence", fence("7"), ""},
		{"no fence prefix set", "", fence("B.7"), ""},
		{"another prefix", "app.msg", fence("B.7"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := newReplication(t)
			rp.r.Node.cfg.FencePrefix = tc.prefix
			if err := rp.r.Replicate(context.Background(), tc.txn); err != nil {
				t.Fatal(err)
			}
			if tc.to == "" {
				if n := rp.tr.total(); n != 0 {
					t.Errorf("%d sends, want none", n)
				}
				return
			}
			got := rp.txnsTo(t, tc.to)
			if len(got) != 1 || got[0].CommitLSN != 0x900 || got[0].EndLSN != 0x900 || got[0].Transactional ||
				len(got[0].Events) != 1 || got[0].Events[0].Op != change.Message || got[0].Events[0].Content != "" {
				t.Errorf("sent %+v, want the fence's position alone", got)
			}
			if rp.tr.flushCount() == 0 {
				t.Error("the fence was not flushed")
			}
			if n := rp.tr.total(); n != 1 {
				t.Errorf("%d sends, want 1", n)
			}
		})
	}
}
