package handoff

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// TestSidesRace runs the two sides of a hand-off on their own goroutines, as the router and
// the snapshot reader do, racing to make it live, and checks what the sink receives: exactly
// the transactions the snapshot does not see, each once, in commit order, with Live once,
// after every transaction at or before its head and before every one after. Run with -race.
func TestSidesRace(t *testing.T) {
	iterations := 400
	if testing.Short() {
		iterations = 50
	}
	for it := range iterations {
		rng := rand.New(rand.NewPCG(uint64(it), 7))
		const n = 200
		// The snapshot: transactions 1000..1099 ended (visible) but for the running ones in
		// XIP; 1100 and up had not ended. Visible ones end before the bound.
		snap := Snapshot{Xmin: 1000, Xmax: 1100, Bound: 0x10000}
		for x := change.XID8(1000); x < 1100; x++ {
			if rng.IntN(4) == 0 {
				snap.XIP = append(snap.XIP, x)
			}
		}
		if len(snap.XIP) > 0 {
			snap.Xmin = snap.XIP[0]
		}
		var txns []*Txn[string]
		var want []change.XID8
		lsn := change.LSN(0x100)
		for i := range n {
			var xid change.XID8
			if lsn < snap.Bound-0x100 && rng.IntN(2) == 0 {
				xid = change.XID8(900 + rng.IntN(200)) // may be visible
			} else {
				xid = change.XID8(1100 + i) // not visible
			}
			tx := &Txn[string]{XID8: xid, CommitLSN: lsn, EndLSN: lsn + 0x10}
			if rng.IntN(5) > 0 {
				tx.Items = []string{"x"}
			}
			if !snap.Visible(xid) && len(tx.Items) > 0 {
				want = append(want, xid)
			}
			txns = append(txns, tx)
			lsn += 0x100 + change.LSN(rng.IntN(0x100))
		}

		// The stream passes the bound at the first transaction that ends at or past it, or
		// whose position after it does: live cannot come before.
		passIdx := -1
		for i, tx := range txns {
			if tx.EndLSN >= snap.Bound || (i%10 == 0 && tx.EndLSN+4 >= snap.Bound) {
				passIdx = i
				break
			}
		}
		end := lsn
		readerRng := rand.New(rand.NewPCG(uint64(it), 8))

		var rec recorder
		h := New[string](Config{Head: 0x80}, &rec)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // the router
			defer wg.Done()
			for i, tx := range txns {
				if err := h.Offer(tx); err != nil {
					t.Errorf("iteration %d: offer %d: %v", it, i, err)
					return
				}
				if i%10 == 0 {
					_ = h.OfferPosition(tx.EndLSN + 4)
				}
				if i%16 == 0 {
					runtime.Gosched()
				}
			}
			_ = h.OfferPosition(end)
		}()
		go func() { // the reader
			defer wg.Done()
			for range readerRng.IntN(50) {
				runtime.Gosched()
			}
			if err := h.SetSnapshot(snap); err != nil {
				t.Errorf("iteration %d: SetSnapshot: %v", it, err)
				return
			}
			for range readerRng.IntN(50) {
				runtime.Gosched()
			}
			if err := h.RowsSent(); err != nil {
				t.Errorf("iteration %d: RowsSent: %v", it, err)
			}
		}()
		wg.Wait()
		if t.Failed() {
			return
		}
		<-h.Done()

		// What the sink got: the transactions, with Live once among them.
		var got []change.XID8
		liveAt := -1
		for i, s := range rec.got {
			if len(s) > 5 && s[:5] == "live@" {
				if liveAt >= 0 {
					t.Fatalf("iteration %d: Live twice: %v", it, rec.got)
				}
				liveAt = i
				continue
			}
		}
		for _, tx := range rec.txns {
			got = append(got, tx.XID8)
		}
		if liveAt < 0 {
			t.Fatalf("iteration %d: never live: %v", it, rec.got)
		}
		if len(got) != len(want) {
			t.Fatalf("iteration %d: delivered %v, want %v", it, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("iteration %d: delivered %v, want %v", it, got, want)
			}
		}
		head, err := change.ParseLSN(rec.got[liveAt][5:])
		if err != nil {
			t.Fatal(err)
		}
		if passIdx >= 0 && head < txns[passIdx].CommitLSN {
			t.Fatalf("iteration %d: live at %s, before the stream passed the bound %s (at %s)", it, head, snap.Bound, txns[passIdx].CommitLSN)
		}
		for i, tx := range rec.txns {
			before := i < liveAt
			if before != (tx.CommitLSN <= head) {
				t.Fatalf("iteration %d: %s at %s is on the wrong side of live@%s", it, tx.XID8, tx.CommitLSN, head)
			}
		}
	}
}
