package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/history"
)

// NewHistory returns a fresh store bounded by cfg, sharing nothing with other subtests' stores.
type NewHistory func(t *testing.T, cfg history.Config) history.Store

// suiteAge is the history's age in the subtests about age: short enough to wait out, long
// enough that appends every suiteAge/8 on a loaded machine keep a table's history alive.
const suiteAge = 1500 * time.Millisecond

// noLimit reads a whole range.
var noLimit = history.Limit{Entries: 1 << 20, Bytes: 1 << 30}

type historyKit struct {
	t   *testing.T
	s   history.Store
	ctx context.Context
}

// entry is an entry of table at lsn with prev, whose data names them.
func entry(table string, lsn, prev change.LSN) history.Entry {
	return history.Entry{Table: table, LSN: lsn, Prev: prev, Data: []byte(fmt.Sprintf(`{"lsn":%d}`, lsn))}
}

func (k historyKit) append(es ...history.Entry) {
	k.t.Helper()
	if err := k.s.Append(k.ctx, es); err != nil {
		k.t.Fatalf("Append(%v): %v", es, err)
	}
}

func (k historyKit) read(table string, after, through change.LSN, lim history.Limit) history.Range {
	k.t.Helper()
	r, err := k.s.Read(k.ctx, table, after, through, lim)
	if err != nil {
		k.t.Fatalf("Read(%s, (%d, %d]): %v", table, after, through, err)
	}
	return r
}

// lsns returns "lsn<-prev" for each entry of r, and checks each entry's table and data.
func (k historyKit) lsns(table string, r history.Range) []string {
	k.t.Helper()
	out := []string{}
	for _, e := range r.Entries {
		if e.Table != table || string(e.Data) != fmt.Sprintf(`{"lsn":%d}`, e.LSN) {
			k.t.Fatalf("entry %+v read from %s: want its table and its own data", e, table)
		}
		out = append(out, fmt.Sprintf("%d<-%d", e.LSN, e.Prev))
	}
	return out
}

// RunHistory runs the history.Store suite.
func RunHistory(t *testing.T, newStore NewHistory) {
	ctx := context.Background()
	mk := func(t *testing.T, cfg history.Config) historyKit {
		return historyKit{t: t, s: newStore(t, cfg), ctx: ctx}
	}

	t.Run("entries are read back in order, with their prev raised to the entry before", func(t *testing.T) {
		k := mk(t, history.Config{})
		k.append(entry("public.a", 10, 9), entry("public.b", 10, 5))
		k.append(entry("public.a", 20, 0))  // knows nothing better than 0
		k.append(entry("public.a", 30, 25)) // knows more than the stream: kept
		r := k.read("public.a", 0, 30, noLimit)
		if got, want := k.lsns("public.a", r), []string{"10<-9", "20<-10", "30<-25"}; !r.Found || r.Floor != 9 || !cmp.Equal(got, want) {
			t.Fatalf("Read = found %v, floor %d, %v; want found, floor 9, %v", r.Found, r.Floor, got, want)
		}
		if r := k.read("public.b", 0, 30, noLimit); !r.Found || r.Floor != 5 || !cmp.Equal(k.lsns("public.b", r), []string{"10<-5"}) {
			t.Fatalf("the other table: %+v", r)
		}
		if r := k.read("public.nobody", 0, 30, noLimit); r.Found || len(r.Entries) != 0 {
			t.Fatalf("a table never appended to: %+v, want not found", r)
		}
	})

	t.Run("a range is after its start and through its end", func(t *testing.T) {
		k := mk(t, history.Config{})
		k.append(entry("public.a", 10, 9))
		for lsn := change.LSN(20); lsn <= 50; lsn += 10 {
			k.append(entry("public.a", lsn, 0))
		}
		for _, tc := range []struct {
			after, through change.LSN
			want           []string
		}{
			{10, 30, []string{"20<-10", "30<-20"}},
			{9, 10, []string{"10<-9"}},
			{15, 25, []string{"20<-10"}},
			{50, 60, []string{}},
			{1, 5, []string{}},
		} {
			r := k.read("public.a", tc.after, tc.through, noLimit)
			if got := k.lsns("public.a", r); !r.Found || r.Floor != 9 || r.More || !cmp.Equal(got, tc.want) {
				t.Errorf("Read((%d, %d]) = %v, more %v, floor %d; want %v, floor 9", tc.after, tc.through, got, r.More, r.Floor, tc.want)
			}
		}
	})

	t.Run("a read stops at its limit and says so", func(t *testing.T) {
		k := mk(t, history.Config{})
		for lsn := change.LSN(1); lsn <= 100; lsn++ {
			k.append(entry("public.a", lsn, lsn-1))
		}
		size := len(entry("public.a", 50, 0).Data)
		for _, tc := range []struct {
			name string
			lim  history.Limit
			n    int
			more bool
		}{
			{"entries", history.Limit{Entries: 70, Bytes: 1 << 20}, 70, true},
			{"bytes", history.Limit{Entries: 1000, Bytes: 3*size + 1}, 3, true},
			{"exactly the range", history.Limit{Entries: 99, Bytes: 99 * (size + 1)}, 99, false},
			{"nothing", history.Limit{}, 0, true},
		} {
			r := k.read("public.a", 1, 100, tc.lim)
			if len(r.Entries) != tc.n || r.More != tc.more {
				t.Errorf("%s: %d entries, more %v; want %d, %v", tc.name, len(r.Entries), r.More, tc.n, tc.more)
			}
			if tc.n > 0 && (r.Entries[0].LSN != 2 || r.Entries[tc.n-1].LSN != change.LSN(tc.n+1)) {
				t.Errorf("%s: entries %d..%d, want from the start of the range", tc.name, r.Entries[0].LSN, r.Entries[tc.n-1].LSN)
			}
		}
	})

	t.Run("an entry at or before the last is dropped: the transaction is there already", func(t *testing.T) {
		k := mk(t, history.Config{})
		k.append(entry("public.a", 10, 9), entry("public.a", 20, 10))
		again := entry("public.a", 20, 10)
		again.Data = []byte(`{"lsn":"changed"}`)
		older := entry("public.a", 15, 10)
		k.append(again, older, entry("public.b", 20, 19))
		r := k.read("public.a", 0, 100, noLimit)
		if got := k.lsns("public.a", r); !cmp.Equal(got, []string{"10<-9", "20<-10"}) {
			t.Fatalf("after appending 20 and 15 again: %v, want 10 and 20 as first appended", got)
		}
		if r := k.read("public.b", 0, 100, noLimit); !cmp.Equal(k.lsns("public.b", r), []string{"20<-19"}) {
			t.Fatalf("another table's entry in the same call: %+v", r)
		}
	})

	t.Run("racing appends of one transaction keep it once", func(t *testing.T) {
		k := mk(t, history.Config{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for lsn := change.LSN(1); lsn <= 20; lsn++ {
					if err := k.s.Append(ctx, []history.Entry{entry("public.a", lsn, lsn-1)}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		r := k.read("public.a", 0, 20, noLimit)
		if len(r.Entries) != 20 || !r.Covers(0, 20) {
			t.Fatalf("%v: want each of the 20 once, in order", k.lsns("public.a", r))
		}
	})

	t.Run("the oldest go past the byte bound, the newest stays, and the floor follows", func(t *testing.T) {
		first := entry("public.a", 10, 9)
		one := first.Size()
		k := mk(t, history.Config{MaxBytes: 3 * one})
		for lsn := change.LSN(10); lsn <= 60; lsn += 10 {
			k.append(entry("public.a", lsn, 0))
		}
		r := k.read("public.a", 0, 60, noLimit)
		if got := k.lsns("public.a", r); r.Floor != 30 || !cmp.Equal(got, []string{"40<-30", "50<-40", "60<-50"}) {
			t.Fatalf("kept %v with floor %d; want the last 3, floor 30", got, r.Floor)
		}
		if r.Covers(29, 60) || !r.Covers(30, 60) || !k.read("public.a", 45, 60, noLimit).Covers(45, 60) {
			t.Error("a from before the floor must not be covered; one at or after it must")
		}

		tiny := mk(t, history.Config{MaxBytes: 1})
		big := entry("public.a", 10, 9)
		big.Data = []byte(strings.Repeat("x", 10000))
		tiny.append(big)
		if r := tiny.read("public.a", 0, 10, noLimit); len(r.Entries) != 1 || len(r.Entries[0].Data) != 10000 {
			t.Fatalf("the newest entry, over the bound alone, was not kept: %d entries", len(r.Entries))
		}
		tiny.append(entry("public.a", 20, 0))
		if r := tiny.read("public.a", 0, 20, noLimit); r.Floor != 10 || !cmp.Equal(tiny.lsns("public.a", r), []string{"20<-10"}) {
			t.Fatalf("after a second: %+v, want only it, floor 10", r)
		}
	})

	t.Run("an entry older than the age goes at a later append", func(t *testing.T) {
		k := mk(t, history.Config{MaxAge: suiteAge})
		k.append(entry("public.a", 1, 0))
		// Keep appending, so the table's history lives, until the first entry is let go.
		lsn := change.LSN(1)
		eventually(t, 5*suiteAge, "the first entry was never let go", func() bool {
			lsn++
			k.append(entry("public.a", lsn, lsn-1))
			time.Sleep(suiteAge / 8)
			return k.read("public.a", 0, lsn, noLimit).Floor > 0
		})
		r := k.read("public.a", 0, lsn, noLimit)
		if !r.Found || len(r.Entries) == 0 || r.Entries[0].LSN == 1 || r.Entries[len(r.Entries)-1].LSN != lsn {
			t.Fatalf("after the age: %v, want the first gone and the newest kept", k.lsns("public.a", r))
		}
	})

	t.Run("a table not appended to for the age has no history", func(t *testing.T) {
		k := mk(t, history.Config{MaxAge: suiteAge})
		k.append(entry("public.a", 10, 9))
		if r := k.read("public.a", 9, 10, noLimit); !r.Covers(9, 10) {
			t.Fatalf("a fresh history does not cover its only entry: %+v", r)
		}
		eventually(t, 5*suiteAge, "the history of an idle table is still there", func() bool {
			return !k.read("public.a", 9, 10, noLimit).Found
		})
		// Appending again starts a new history, whose floor is the prev given.
		k.append(entry("public.a", 20, 15))
		if r := k.read("public.a", 0, 20, noLimit); r.Floor != 15 || !cmp.Equal(k.lsns("public.a", r), []string{"20<-15"}) {
			t.Fatalf("a new history: %+v, want 20 alone with floor 15", r)
		}
	})

	t.Run("odd table names and binary payloads survive", func(t *testing.T) {
		k := mk(t, history.Config{})
		for _, table := range []string{"public.a}b", "s.{x}", "é.ü", `"Q"."t"`} {
			e := history.Entry{Table: table, LSN: 7, Prev: 6, Data: []byte("bin\x00ary\xff")}
			k.append(e)
			r := k.read(table, 6, 7, noLimit)
			if len(r.Entries) != 1 || string(r.Entries[0].Data) != "bin\x00ary\xff" || r.Entries[0].Table != table {
				t.Fatalf("table %q: %+v", table, r)
			}
		}
	})
}
