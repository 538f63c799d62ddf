package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/heraldrt/herald/internal/interest"
)

// BenchInterest measures the dispatch hot path on s: Watched over the ancestor tokens of a
// name, at several depths, with 1000 rows filed under an owner; and Add, the write a subscribe
// costs.
func BenchInterest(b *testing.B, s interest.Store) {
	ctx := context.Background()
	for i := range 1000 {
		r := interest.Row{Token: fmt.Sprintf("a/%d", i%100), Socket: fmt.Sprintf("s%d", i%50), Sub: fmt.Sprint(i), Identity: fmt.Sprintf("id%d", i%10), Node: "n"}
		if _, err := s.Add(ctx, "bench", r); err != nil {
			b.Fatal(err)
		}
	}
	for _, depth := range []int{1, 4, 8} {
		tokens := []string{""}
		name := "a"
		for d := 1; d < depth; d++ {
			tokens = append(tokens, name)
			name += fmt.Sprintf("/%d", d)
		}
		b.Run(fmt.Sprintf("Watched/depth=%d", depth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Watched(ctx, "bench", tokens); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Add+Remove", func(b *testing.B) {
		b.ReportAllocs()
		r := interest.Row{Token: "a/b", Socket: "bench-socket", Sub: "x", Identity: "bench-id", Node: "n"}
		for b.Loop() {
			if _, err := s.Add(ctx, "bench", r); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Remove(ctx, "bench", r.Socket, r.Sub); err != nil {
				b.Fatal(err)
			}
		}
	})
}
