package router

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/change"
)

func histTxnOf(lsn change.LSN, tables ...string) *change.Txn {
	txn := &change.Txn{CommitLSN: lsn}
	for i, t := range tables {
		txn.Events = append(txn.Events, change.Event{Table: t, Op: change.Insert,
			After: change.Row{{Name: "id", Value: json.RawMessage(fmt.Sprint(i))}}})
	}
	return txn
}

func replayed(h *History, lsn change.LSN, idx uint32) []string {
	var out []string
	h.after(lsn, idx, func(l change.LSN, e *histEvent) { out = append(out, fmt.Sprintf("%d.%d", l, e.idx)) })
	return out
}

func TestHistoryKeepsAndReplaysAfterAPosition(t *testing.T) {
	h := NewHistory(1<<20, time.Hour)
	keep := func(t string) bool { return t != "public.skip" }
	now := time.Now()
	if h.covers(10) {
		t.Fatal("a history that never went live covers a from")
	}
	h.seed(9)
	h.append(histTxnOf(10, "public.a", "public.skip", "public.b"), now, keep)
	h.append(histTxnOf(20, "public.skip"), now, keep) // nothing kept of it
	h.append(histTxnOf(30, "public.a"), now, keep)
	for _, tt := range []struct {
		lsn  change.LSN
		idx  uint32
		want string
	}{
		{9, 0, "[10.1 10.3 30.1]"},
		{10, 1, "[10.3 30.1]"}, // mid-transaction: after its first change
		{10, 0, "[30.1]"},      // after the whole transaction
		{30, 0, "[]"},
	} {
		if got := fmt.Sprint(replayed(h, tt.lsn, tt.idx)); got != tt.want {
			t.Errorf("after %d.%d = %s, want %s", tt.lsn, tt.idx, got, tt.want)
		}
	}
	if !h.covers(9) || h.covers(8) {
		t.Errorf("covers: 9 %v (want true), 8 %v (want false): the stream went live after 9", h.covers(9), h.covers(8))
	}
}

func TestHistoryBounds(t *testing.T) {
	keep := func(string) bool { return true }
	now := time.Now()

	byBytes := NewHistory(3*eventBytes(&histTxnOf(1, "public.a").Events[0]), time.Hour)
	byBytes.seed(0)
	for lsn := change.LSN(1); lsn <= 5; lsn++ {
		byBytes.append(histTxnOf(lsn, "public.a"), now, keep)
	}
	if st := byBytes.stats(); st.Transactions != 3 || st.Floor != 2 {
		t.Errorf("by bytes: %+v, want 3 transactions kept and floor 2", st)
	}
	if byBytes.covers(1) || !byBytes.covers(2) {
		t.Error("by bytes: a from before the floor must not be covered, one at it must")
	}

	byAge := NewHistory(1<<20, time.Minute)
	byAge.seed(0)
	byAge.append(histTxnOf(1, "public.a"), now.Add(-2*time.Minute), keep)
	byAge.append(histTxnOf(2, "public.a"), now, keep)
	if st := byAge.stats(); st.Transactions != 1 || st.Floor != 1 {
		t.Errorf("by age: %+v, want the old one let go", st)
	}

	overflow := NewHistory(1<<20, time.Hour)
	overflow.seed(0)
	overflow.append(histTxnOf(1, "public.a"), now, keep)
	big := &change.Txn{CommitLSN: 7, Overflow: &change.Overflow{Tables: map[string]int{"public.a": 9}, Changes: 9}}
	overflow.append(big, now, keep)
	if overflow.covers(6) || !overflow.covers(7) {
		t.Error("an overflow's rows were never kept: a from before it must not be covered")
	}
}

// BenchmarkHistoryMemory keeps 100,000 changes (one-row inserts of a table of five columns,
// in transactions of ten) and reports what the history holds: the heap it takes (measured
// with runtime.MemStats after a GC, against an empty history) and what it counts against
// changefeed.history_bytes, per 100k changes.
func BenchmarkHistoryMemory(b *testing.B) {
	const changes = 100_000
	keep := func(string) bool { return true }
	row := func(i int) change.Row {
		return change.Row{
			{Name: "id", Value: json.RawMessage(fmt.Sprint(i))},
			{Name: "org_id", Value: json.RawMessage(`"acme"`)},
			{Name: "title", Value: json.RawMessage(`"a title of some length"`)},
			{Name: "qty", Value: json.RawMessage(`12`)},
			{Name: "done", Value: json.RawMessage(`false`)},
		}
	}
	var heap, counted float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		h := NewHistory(1<<40, time.Hour)
		h.seed(0)
		now := time.Now()
		for t := 0; t < changes/10; t++ {
			txn := &change.Txn{CommitLSN: change.LSN(t + 1)}
			for k := 0; k < 10; k++ {
				txn.Events = append(txn.Events, change.Event{Table: "public.items", Op: change.Insert, After: row(t*10 + k)})
			}
			h.append(txn, now, keep)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		counted = float64(h.stats().Bytes)
		runtime.KeepAlive(h)
	}
	b.ReportMetric(heap/(1<<20), "heap_MiB/100k_changes")
	b.ReportMetric(counted/(1<<20), "counted_MiB/100k_changes")
}
