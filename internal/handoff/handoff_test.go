package handoff

import (
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// step is one event of a scenario: an offer, a position, the snapshot becoming known, or the
// rows being sent.
type step struct {
	offer    *Txn[string]
	position change.LSN
	snapshot bool
	rows     bool
}

func offer(t *Txn[string]) step  { return step{offer: t} }
func position(p change.LSN) step { return step{position: p} }

var (
	snapshotKnown = step{snapshot: true}
	rowsSent      = step{rows: true}
)

// TestRecipes are the deterministic scenarios of the research note (§8.3), each in the orders
// its events can arrive in. want is what the sink receives.
func TestRecipes(t *testing.T) {
	// Appendix A.1 (Long Fork): T2 (xid 728) got its id first and is visible; T1 (xid 729)
	// wrote its commit record first but waits on a synchronous standby, invisible. The snapshot
	// is 729:729: and the insert position 0/1526F58, where T2's record ends.
	const bound = change.LSN(0x1526F58)
	longFork := mustSnapshot(t, "729:729:", bound)
	t1 := func() *Txn[string] {
		return &Txn[string]{XID8: 729, CommitLSN: 0x1526F00, EndLSN: 0x1526F28, Items: []string{"row 2"}}
	}
	t2 := func() *Txn[string] {
		return &Txn[string]{XID8: 728, CommitLSN: 0x1526F30, EndLSN: 0x1526F58, Items: []string{"row 1"}}
	}
	// Appendix A.3 (epoch): on a wrapped cluster the snapshot 8589934698:8589934700:8589934698
	// has 106 running; the stream says COMMIT 106 (and 105 committed before the snapshot).
	epoch := mustSnapshot(t, "8589934698:8589934700:8589934698", 0x3000000)
	widen := func(xid uint32) change.XID8 {
		x, ok := epoch.Widen(xid)
		if !ok {
			t.Fatalf("Widen(%d) failed", xid)
		}
		return x
	}
	t105 := func() *Txn[string] {
		return &Txn[string]{XID8: widen(105), CommitLSN: 0x2000000, EndLSN: 0x2000010, Items: []string{"105"}}
	}
	t106 := func() *Txn[string] {
		return &Txn[string]{XID8: widen(106), CommitLSN: 0x3000100, EndLSN: 0x3000110, Items: []string{"106"}}
	}

	tests := []struct {
		name  string
		snap  Snapshot
		head  change.LSN
		steps []step
		want  string
	}{
		{"long fork, both after the snapshot", longFork, 0x1526000,
			[]step{snapshotKnown, offer(t1()), offer(t2()), rowsSent}, "729 live@0/1526F30"},
		{"long fork, both before the snapshot", longFork, 0x1526000,
			[]step{offer(t1()), offer(t2()), snapshotKnown, rowsSent}, "729 live@0/1526F30"},
		{"long fork, snapshot between", longFork, 0x1526000,
			[]step{offer(t1()), snapshotKnown, offer(t2()), rowsSent}, "729 live@0/1526F30"},
		{"long fork, rows before the stream passes the bound", longFork, 0x1526000,
			[]step{snapshotKnown, rowsSent, offer(t1()), offer(t2())}, "729 live@0/1526F30"},
		{"long fork, the bound passed by a later fence", longFork, 0x1526000,
			[]step{snapshotKnown, offer(t1()), rowsSent, position(bound - 1), offer(t2()), position(bound + 100)}, "729 live@0/1526F30"},
		// T1 was streamed (and the router moved on) before the subscription registered; it
		// comes from the look-back, and the snapshot does not see it.
		{"decoded before visible", longFork, 0x1526F00,
			[]step{offer(t1()), position(0x1526F28), snapshotKnown, offer(t2()), rowsSent}, "729 live@0/1526F30"},
		{"epoch: the running transaction is delivered, the ended one skipped", epoch, 0x1000000,
			[]step{offer(t105()), snapshotKnown, rowsSent, offer(t106()), position(0x3000200)}, "8589934698 live@0/3000100"},
		{"fence on a quiet database", longFork, 0x1526000,
			[]step{snapshotKnown, rowsSent, position(bound + 40)}, "live@0/1526000"},
		{"fence before the rows are sent", longFork, 0x1526000,
			[]step{snapshotKnown, position(bound + 40), rowsSent}, "live@0/1526000"},
		{"live goes straight on", longFork, 0x1526000,
			[]step{snapshotKnown, rowsSent, position(bound), offer(tx(730, bound+10)), offer(tx(731, bound+30, true)), offer(tx(732, bound+50))},
			"live@0/1526000 730 732"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			h := New[string](Config{Head: tt.head}, &rec)
			for i, s := range tt.steps {
				var err error
				switch {
				case s.offer != nil:
					err = h.Offer(s.offer)
				case s.snapshot:
					err = h.SetSnapshot(tt.snap)
				case s.rows:
					err = h.RowsSent()
				default:
					err = h.OfferPosition(s.position)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if got := rec.String(); got != tt.want {
				t.Fatalf("sink got %q, want %q", got, tt.want)
			}
			select {
			case <-h.Done():
			default:
				t.Fatal("Done is not closed after Live")
			}
			if h.Phase() != Live || h.Err() != nil {
				t.Fatalf("phase %s, err %v", h.Phase(), h.Err())
			}
		})
	}
}

// TestStopAtXmaxDuplicates is the rule that stops judging at the first transaction at or past
// xmax (research note §2.5-2), applied to Long Fork: T2, visible, comes after T1 (729 >= xmax)
// and would be delivered on top of rows that hold it already.
func TestStopAtXmaxDuplicates(t *testing.T) {
	var rec recorder
	h := New[string](Config{}, &rec)
	h.visible = stopAtXmax()
	must(t, h.SetSnapshot(mustSnapshot(t, "729:729:", 0x1526F58)))
	must(t, h.Offer(&Txn[string]{XID8: 729, CommitLSN: 0x1526F00, EndLSN: 0x1526F28, Items: []string{"row 2"}}))
	must(t, h.Offer(&Txn[string]{XID8: 728, CommitLSN: 0x1526F30, EndLSN: 0x1526F58, Items: []string{"row 1"}}))
	must(t, h.RowsSent())
	if got := rec.String(); got != "729 728 live@0/1526F30" {
		t.Fatalf("the broken rule delivered %q; expected it to deliver the visible 728 too", got)
	}
}

func TestMismatch(t *testing.T) {
	snap := mustSnapshot(t, "729:729:", 0x1000)
	t.Run("early", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		must(t, h.Offer(tx(700, 0x2000)))
		err := h.SetSnapshot(snap)
		wantReason(t, err, ReasonMismatch)
		if e := err.(*Error); e.Phase != Filtering || !strings.Contains(e.Detail, "700") {
			t.Fatalf("error = %+v", e)
		}
		wantReason(t, h.Err(), ReasonMismatch)
		wantReason(t, h.Offer(tx(800, 0x3000)), ReasonMismatch)
		wantReason(t, h.RowsSent(), ReasonMismatch)
		if rec.String() != "" {
			t.Fatalf("a failed hand-off delivered %q", rec.String())
		}
	})
	t.Run("filtering, even an empty transaction", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		must(t, h.SetSnapshot(snap))
		must(t, h.Offer(tx(700, 0x800)))
		wantReason(t, h.Offer(tx(701, 0x2000, true)), ReasonMismatch)
		if h.Phase() != Failed {
			t.Fatalf("phase %s", h.Phase())
		}
	})
	t.Run("at the bound is no mismatch", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		must(t, h.SetSnapshot(snap))
		must(t, h.Offer(&Txn[string]{XID8: 700, CommitLSN: 0xFF0, EndLSN: 0x1000, Items: []string{"x"}}))
		must(t, h.RowsSent())
		if got := rec.String(); got != "live@0/FF0" {
			t.Fatalf("sink got %q", got)
		}
	})
}

func TestBuffersBounded(t *testing.T) {
	t.Run("early", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{EarlyBytes: 1000}, &rec)
		var err error
		n := 0
		for ; err == nil && n < 100; n++ {
			err = h.Offer(tx(change.XID8(800+n), change.LSN(0x100*(n+1))))
		}
		wantReason(t, err, ReasonBufferFull)
		if want := 1000/(10+txnOverhead) + 1; n != want {
			t.Fatalf("failed at offer %d, want %d", n, want)
		}
		if s := h.Stats(); s.EarlyBytes != 0 || s.PeakBytes <= 1000 {
			t.Fatalf("stats after failing: %+v", s)
		}
	})
	t.Run("empty transactions are not held", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{EarlyBytes: 100, PendingBytes: 100}, &rec)
		for n := range 1000 {
			must(t, h.Offer(tx(change.XID8(800+n), change.LSN(0x100*(n+1)), true)))
		}
		must(t, h.SetSnapshot(mustSnapshot(t, "729:729:", 0x100*2000)))
		for n := 1000; n < 2000; n++ {
			must(t, h.Offer(tx(change.XID8(800+n), change.LSN(0x100*(n+1)), true)))
		}
		if s := h.Stats(); s.PeakBytes != 0 {
			t.Fatalf("empty transactions were held: %+v", s)
		}
	})
	t.Run("pending", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{PendingBytes: 500}, &rec)
		must(t, h.SetSnapshot(mustSnapshot(t, "729:729:", 0x100000)))
		var err error
		for n := 0; err == nil && n < 100; n++ {
			err = h.Offer(tx(change.XID8(800+n), change.LSN(0x100*(n+1))))
		}
		wantReason(t, err, ReasonBufferFull)
		// Skipped ones are not held: a visible transaction costs nothing.
		var rec2 recorder
		h2 := New[string](Config{PendingBytes: 500}, &rec2)
		must(t, h2.SetSnapshot(mustSnapshot(t, "100000:100000:", 0x100000)))
		for n := range 100 {
			must(t, h2.Offer(tx(change.XID8(800+n), change.LSN(0x100*(n+1)))))
		}
		if s := h2.Stats(); s.Skipped != 100 || s.PendingBytes != 0 {
			t.Fatalf("stats: %+v", s)
		}
	})
}

func TestStreamWentBack(t *testing.T) {
	for _, tt := range []struct {
		name  string
		steps func(h *Handoff[string]) error
	}{
		{"an end repeated", func(h *Handoff[string]) error {
			must(t, h.Offer(tx(800, 0x100)))
			return h.Offer(tx(801, 0x100))
		}},
		{"an end before the last", func(h *Handoff[string]) error {
			must(t, h.Offer(tx(800, 0x200)))
			return h.Offer(tx(801, 0x100))
		}},
		{"an end at or before a position passed", func(h *Handoff[string]) error {
			must(t, h.OfferPosition(0x300))
			return h.Offer(tx(801, 0x2F8))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			h := New[string](Config{}, &rec)
			wantReason(t, tt.steps(h), ReasonReplicationRestarted)
		})
	}
	t.Run("live: dropped, still live", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		must(t, h.SetSnapshot(mustSnapshot(t, "729:729:", 0x10)))
		must(t, h.RowsSent())
		must(t, h.Offer(tx(800, 0x300)))
		if err := h.Offer(tx(801, 0x100)); err == nil {
			t.Fatal("a repeat after live was accepted")
		} else if _, ok := ReasonOf(err); ok {
			t.Fatalf("a repeat after live failed the hand-off: %v", err)
		}
		if h.Phase() != Live || rec.String() != "800 live@0/300" {
			t.Fatalf("phase %s, sink %q", h.Phase(), rec.String())
		}
	})
	t.Run("a position going back is ignored", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		must(t, h.OfferPosition(0x300))
		must(t, h.OfferPosition(0x200))
		must(t, h.Offer(tx(801, 0x300)))
	})
}

func TestFail(t *testing.T) {
	t.Run("schema changed mid-hand-off", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		must(t, h.SetSnapshot(mustSnapshot(t, "729:729:", 0x1000)))
		must(t, h.Offer(tx(800, 0x100)))
		if !h.Fail(ReasonSchemaChanged, "a Relation message changed public.items", nil) {
			t.Fatal("Fail reported the hand-off live")
		}
		<-h.Done()
		wantReason(t, h.Err(), ReasonSchemaChanged)
		wantReason(t, h.RowsSent(), ReasonSchemaChanged)
		wantReason(t, h.OfferPosition(0x2000), ReasonSchemaChanged)
		if h.Fail(ReasonTimeout, "later", nil); h.Err().(*Error).Reason != ReasonSchemaChanged {
			t.Fatal("a second failure replaced the first")
		}
		if rec.String() != "" {
			t.Fatalf("a failed hand-off delivered %q", rec.String())
		}
		if s := h.Stats(); s.PendingBytes != 0 {
			t.Fatalf("a failed hand-off holds %d bytes", s.PendingBytes)
		}
	})
	t.Run("after live", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		must(t, h.SetSnapshot(mustSnapshot(t, "729:729:", 0x10)))
		must(t, h.RowsSent())
		must(t, h.OfferPosition(0x10))
		if h.Fail(ReasonTimeout, "too late", nil) {
			t.Fatal("Fail failed a live hand-off")
		}
		if h.Err() != nil || h.Phase() != Live {
			t.Fatalf("phase %s, err %v", h.Phase(), h.Err())
		}
	})
	t.Run("unknown reason", func(t *testing.T) {
		var rec recorder
		h := New[string](Config{}, &rec)
		h.Fail("made_up", "x", nil)
		wantReason(t, h.Err(), ReasonReplicationRestarted)
		if !strings.Contains(h.Err().Error(), "made_up") {
			t.Fatalf("the unknown reason is not named: %v", h.Err())
		}
	})
}

func TestMisuse(t *testing.T) {
	snap := mustSnapshot(t, "729:729:", 0x10)
	var rec recorder
	h := New[string](Config{}, &rec)
	if err := h.RowsSent(); err == nil {
		t.Fatal("RowsSent before SetSnapshot succeeded")
	}
	if err := h.SetSnapshot(Snapshot{Xmin: 5, Xmax: 4, Bound: 1}); err == nil {
		t.Fatal("SetSnapshot of an impossible snapshot succeeded")
	}
	if err := h.SetSnapshot(Snapshot{Xmin: 5, Xmax: 5}); err == nil {
		t.Fatal("SetSnapshot without a bound succeeded")
	}
	must(t, h.SetSnapshot(snap))
	if err := h.SetSnapshot(snap); err == nil {
		t.Fatal("a second SetSnapshot succeeded")
	}
	must(t, h.RowsSent())
	if err := h.RowsSent(); err == nil {
		t.Fatal("a second RowsSent succeeded")
	}
	if h.Phase() != Filtering {
		t.Fatalf("misuse changed the phase to %s", h.Phase())
	}
}

func TestErrorText(t *testing.T) {
	e := newError(ReasonBufferFull, Filtering, "12 transactions", nil)
	got := e.Error()
	for _, want := range []string{"handoff_buffer_full", "reading and sending the rows", "12 transactions", "handoff.pending_bytes"} {
		if !strings.Contains(got, want) {
			t.Errorf("Error() = %q, lacks %q", got, want)
		}
	}
}
