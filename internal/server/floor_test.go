package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// recordingSubscriber keeps the positions of what reaches it.
type recordingSubscriber struct{ got []string }

func (r *recordingSubscriber) Push(_ string, it *stream.Item) {
	if g := it.Gap; g != nil {
		r.got = append(r.got, g.First.String()+".."+g.Last.String())
		return
	}
	r.got = append(r.got, it.PosText())
}

// TestFloorHoldsBackWhatTheClientHas: after a restart the router re-routes what the slot had
// not confirmed. A subscription resumed from a position gets nothing at or before it, and
// everything after it.
func TestFloorHoldsBackWhatTheClientHas(t *testing.T) {
	type item struct{ first, pos string } // first "" for a change, else a resync's range
	tests := []struct {
		name  string
		from  string
		items []item
		want  []string
	}{
		{"mid-transaction", "0/100.2",
			[]item{{"", "0/90.1"}, {"", "0/100.1"}, {"", "0/100.2"}, {"", "0/100.3"}, {"", "0/110.1"}},
			[]string{"0/100.3", "0/110.1"}},
		{"after a whole transaction", "0/100",
			[]item{{"", "0/100.1"}, {"", "0/100.9"}, {"", "0/101.1"}},
			[]string{"0/101.1"}},
		{"a resync wholly before from", "0/100.7",
			[]item{{"0/100.1", "0/100.7"}, {"", "0/120.1"}},
			[]string{"0/120.1"}},
		{"a resync reaching past from", "0/100.3",
			[]item{{"0/100.1", "0/100.7"}, {"", "0/120.1"}},
			[]string{"0/100.1..0/100.7", "0/120.1"}},
		{"nothing to hold back", "0/50",
			[]item{{"", "0/90.1"}, {"", "0/90.2"}},
			[]string{"0/90.1", "0/90.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, err := wire.ParsePosition(tt.from)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recordingSubscriber{}
			f := &floor{Receiver: rec, from: from}
			for _, it := range tt.items {
				pos, _ := stream.ParsePosition(it.pos)
				if it.first == "" {
					f.Push("s", stream.NewChange(&stream.Change{LSN: pos.LSN, Idx: pos.Idx}))
				} else {
					first, _ := stream.ParsePosition(it.first)
					f.Push("s", stream.NewGap(&stream.Gap{First: first, Last: pos}))
				}
			}
			if diff := cmp.Diff(tt.want, rec.got); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAfter(t *testing.T) {
	tests := []struct {
		p, q string
		want bool
	}{
		{"0/101.1", "0/100", true},
		{"0/99.9", "0/100", false},
		{"0/100.9", "0/100", false}, // 0/100 is after the whole transaction
		{"0/100", "0/100.9", true},
		{"0/100.3", "0/100.2", true},
		{"0/100.2", "0/100.2", false},
		{"0/100", "0/100", false},
	}
	for _, tt := range tests {
		p, _ := wire.ParsePosition(tt.p)
		q, _ := wire.ParsePosition(tt.q)
		if got := after(p, q); got != tt.want {
			t.Errorf("after(%s, %s) = %v, want %v", tt.p, tt.q, got, tt.want)
		}
	}
}
