package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/stream"
)

// TestResumeDecision: among many nodes, a resume is replayed from the shared history exactly
// when the history holds every transaction of the table after from up to the mark, and the
// table can have none between the mark and the router's head that this node would not route.
func TestResumeDecision(t *testing.T) {
	h, err := memory.NewHistory(history.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, lsn := range []change.LSN{10, 20, 30} {
		txn := &change.Txn{CommitLSN: lsn, Events: []change.Event{
			{Table: "public.items", Op: change.Insert, LSN: lsn, After: change.Row{{Name: "id", Value: []byte("1")}}},
			{Table: "public.items", Op: change.Insert, LSN: lsn, After: change.Row{{Name: "id", Value: []byte("2")}}},
		}}
		data, err := history.Encode(txn, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, []history.Entry{{Table: "public.items", LSN: lsn, Prev: 5, Data: data}}); err != nil {
			t.Fatal(err)
		}
	}
	pos := stream.TablePosition
	boom := errors.New("boom")
	for _, tc := range []struct {
		name         string
		table        string
		from         stream.Position
		head, routed change.LSN
		mark         change.LSN
		confirmed    func(context.Context) (change.LSN, error)
		want         bool
		replayed     []string // the LSNs handed to Replay; nil: Replay not called
	}{
		{name: "inside the history", from: pos(10, 0), head: 30, routed: 30, mark: 30, want: true, replayed: []string{"0/14", "0/1E"}},
		{name: "from inside a transaction", from: pos(20, 1), head: 30, routed: 30, mark: 30, want: true, replayed: []string{"0/14", "0/1E"}},
		{name: "from at the floor", from: pos(5, 0), head: 30, routed: 30, mark: 30, want: true, replayed: []string{"0/A", "0/14", "0/1E"}},
		{name: "up to the mark only", from: pos(10, 0), head: 10, routed: 10, mark: 20, want: true, replayed: []string{"0/14"}},
		{name: "from before the floor", from: pos(4, 0), head: 30, routed: 30, mark: 30},
		{name: "another table, without history", table: "public.other", from: pos(10, 0), head: 30, routed: 30, mark: 30},
		{name: "a mark the history does not reach", from: pos(10, 0), head: 40, routed: 40, mark: 40},
		{name: "nothing of the table after from", from: pos(30, 0), head: 50, routed: 50, mark: 30, want: true},
		{name: "no mark, which says nothing", from: pos(30, 0), head: 50, routed: 50, mark: 0},
		{name: "from ahead of the start", from: pos(60, 0), head: 50, routed: 50, mark: 30},
		{name: "from at the start", from: pos(50, 0), head: 50, routed: 50, mark: 30},
		{name: "a head told of, not confirmed past", from: pos(10, 0), head: 40, routed: 30, mark: 30,
			confirmed: func(context.Context) (change.LSN, error) { return 40, nil }},
		{name: "a head told of, the slot unreadable", from: pos(10, 0), head: 40, routed: 30, mark: 30,
			confirmed: func(context.Context) (change.LSN, error) { return 0, boom }},
		{name: "a head told of, confirmed past it", from: pos(10, 0), head: 40, routed: 30, mark: 30,
			confirmed: func(context.Context) (change.LSN, error) { return 41, nil }, want: true, replayed: []string{"0/14", "0/1E"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := tc.table
			if table == "" {
				table = "public.items"
			}
			var replayed []string
			sub := router.Subscription{Head: pos(tc.head, 0), Routed: tc.routed,
				Replay: func(to stream.Receiver, from stream.Position, txns []history.Txn) {
					if from != tc.from {
						t.Errorf("replayed after %s, want %s", from, tc.from)
					}
					replayed = []string{}
					for _, txn := range txns {
						if len(txn.Events) != 2 || txn.Events[0].Event.LSN != txn.LSN {
							t.Errorf("transaction %s replayed with %d changes", txn.LSN, len(txn.Events))
						}
						replayed = append(replayed, fmt.Sprint(txn.LSN))
					}
				}}
			tb := &tables{history: h, confirmed: tc.confirmed, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			start := pos(max(tc.head, tc.mark), 0)
			if got := tb.resume(ctx, nil, table, tc.from, sub, tc.mark, start); got != tc.want {
				t.Errorf("resume = %v, want %v", got, tc.want)
			}
			if diff := cmp.Diff(tc.replayed, replayed); diff != "" {
				t.Errorf("replayed (-want +got):\n%s", diff)
			}
		})
	}
}
