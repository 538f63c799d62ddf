package handoff

import (
	"fmt"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

type discard struct{}

func (discard) Deliver(*Txn[string]) {}
func (discard) Live(change.LSN)      {}

// BenchmarkOffer measures judging one offered transaction while the rows are read, against
// snapshots listing more and more running transactions (a binary search), and passing one on
// once live.
func BenchmarkOffer(b *testing.B) {
	for _, xip := range []int{0, 10, 1000} {
		b.Run(fmt.Sprintf("filtering/xip=%d", xip), func(b *testing.B) {
			snap := Snapshot{Xmin: 1 << 32, Xmax: 1<<32 + 2*change.XID8(xip) + 2, Bound: ^change.LSN(0) - 1}
			for i := range xip {
				snap.XIP = append(snap.XIP, snap.Xmin+change.XID8(2*i))
			}
			h := New[string](Config{}, discard{})
			if err := h.SetSnapshot(snap); err != nil {
				b.Fatal(err)
			}
			t := &Txn[string]{Items: []string{"x"}, Bytes: 10}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				// Ended transactions between the running ones: skipped after the search.
				t.XID8 = snap.Xmin + 1 + change.XID8(2*(i%max(xip, 1)))
				t.EndLSN = change.LSN(i + 1)
				if err := h.Offer(t); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("live", func(b *testing.B) {
		h := New[string](Config{}, discard{})
		if err := h.SetSnapshot(Snapshot{Xmin: 10, Xmax: 10, Bound: 1}); err != nil {
			b.Fatal(err)
		}
		if err := h.RowsSent(); err != nil {
			b.Fatal(err)
		}
		if err := h.OfferPosition(1); err != nil {
			b.Fatal(err)
		}
		t := &Txn[string]{XID8: 20, Items: []string{"x"}, Bytes: 10}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			t.EndLSN = change.LSN(i + 2)
			if err := h.Offer(t); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkParseSnapshot measures reading a snapshot's text with many running transactions.
func BenchmarkParseSnapshot(b *testing.B) {
	for _, xip := range []int{0, 1000} {
		b.Run(fmt.Sprintf("xip=%d", xip), func(b *testing.B) {
			s := Snapshot{Xmin: 8589934698, Xmax: 8589934698 + change.XID8(xip) + 1}
			for i := range xip {
				s.XIP = append(s.XIP, s.Xmin+change.XID8(i))
			}
			text := s.String()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseSnapshot(text, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
