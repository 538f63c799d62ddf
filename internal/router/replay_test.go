package router

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/stream"
)

// missed is what a shared history holds of public.items in four transactions, as a resume
// reads it back: what was at 0x100, two rows at 0x200, row 1 leaving acme at 0x300, an
// overflow at 0x400.
func missed() []history.Txn {
	ev := func(lsn change.LSN, idx uint32, e change.Event) history.Event {
		e.Table, e.LSN = "public.items", lsn
		return history.Event{Idx: idx, Event: e}
	}
	return []history.Txn{
		{LSN: 0x100, Events: []history.Event{ev(0x100, 1, change.Event{Op: change.Insert, After: row(1, "acme", 1)})}},
		{LSN: 0x200, Events: []history.Event{
			ev(0x200, 1, change.Event{Op: change.Insert, After: row(2, "acme", 1)}),
			ev(0x200, 3, change.Event{Op: change.Insert, After: row(3, "other", 1)}),
			ev(0x200, 4, change.Event{Op: change.Insert, After: row(4, "acme", 1)}),
		}},
		{LSN: 0x300, Events: []history.Event{ev(0x300, 2, change.Event{Op: change.Update, Before: row(1, "acme", 1), After: row(1, "other", 1)})}},
		{LSN: 0x400, Overflow: &change.Overflow{Tables: map[string]int{"public.items": 5, "public.other": 2}, Changes: 7}},
	}
}

// TestReplayThroughTheSubscriptionsFilter: a subscription replayed what a shared history kept
// gets, on the receiver it names, what it missed after its from, through its own filter (a
// row that left it comes as leave), and an overflow as its resync; its live target gets
// nothing of it, nor does any other subscription.
func TestReplayThroughTheSubscriptionsFilter(t *testing.T) {
	for _, tc := range []struct {
		name string
		from stream.Position
		want []string
	}{
		{"after a transaction", stream.TablePosition(0x100, 0), []string{"insert:2", "insert:4", "leave:1", "resync:-"}},
		{"inside a transaction", stream.TablePosition(0x200, 1), []string{"insert:4", "leave:1", "resync:-"}},
		{"after the overflow's start", stream.TablePosition(0x400, 3), []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRouter(t)
			live, replay := newRecorder(), newRecorder()
			other := newRecorder()
			subscribe(t, r, other, "all", "")
			sub, un, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "acme", Target: live,
				Filter: json.RawMessage(`{"eq":["org_id","acme"]}`)})
			if err != nil {
				t.Fatal(err)
			}
			defer un()
			sub.Replay(replay, tc.from, missed())
			got := replay.ops()["acme"]
			if got == nil {
				got = []string{}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replayed (-want +got):\n%s", diff)
			}
			if live.n != 0 || other.n != 0 {
				t.Errorf("the live target got %d frames and another subscription %d: want none", live.n, other.n)
			}
		})
	}
}

func TestReplayAfterUnsubscribeIsNothing(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	sub, un, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "all", Target: rec})
	if err != nil {
		t.Fatal(err)
	}
	un()
	sub.Replay(rec, stream.TablePosition(0x100, 0), missed())
	if rec.n != 0 {
		t.Errorf("replayed %d frames to a detached subscription", rec.n)
	}
}

// TestRoutedIsTheLastTransactionAccepted: a subscription learns whether the router's head is a
// transaction it routed, or a position it was told of (Seed, GapAll) with transactions before it
// it never saw.
func TestRoutedIsTheLastTransactionAccepted(t *testing.T) {
	r := newRouter(t)
	rec := newRecorder()
	head := func() (stream.Position, change.LSN) {
		t.Helper()
		sub, un, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: rec})
		if err != nil {
			t.Fatal(err)
		}
		un()
		return sub.Head, sub.Routed
	}
	if h, routed := head(); h.LSN != 0 || routed != 0 {
		t.Errorf("after Seed: head %s, routed %s; want 0 and 0", h, routed)
	}
	if err := r.Accept(context.Background(), txn(0x100, change.Event{Op: change.Insert, After: row(1, "acme", 1)})); err != nil {
		t.Fatal(err)
	}
	if h, routed := head(); h.LSN != 0x100 || routed != 0x100 {
		t.Errorf("after a transaction: head %s, routed %s; want both 0/100", h, routed)
	}
	r.GapAll(stream.TablePosition(0x100, 0), stream.TablePosition(0x900, 0), stream.ReasonUpstreamGap)
	if h, routed := head(); h.LSN != 0x900 || routed != 0x100 {
		t.Errorf("after a gap: head %s, routed %s; want 0/900 and 0/100", h, routed)
	}
}
