package history

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/change"
)

func entries(lsnPrev ...change.LSN) []Entry {
	var out []Entry
	for i := 0; i+1 < len(lsnPrev); i += 2 {
		out = append(out, Entry{Table: "public.items", LSN: lsnPrev[i], Prev: lsnPrev[i+1]})
	}
	return out
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		r              Range
		after, through change.LSN
		want           bool
	}{
		{"every entry after from", Range{Found: true, Floor: 5, Entries: entries(10, 5, 20, 10, 30, 20)}, 5, 30, true},
		{"from after the floor", Range{Found: true, Floor: 5, Entries: entries(20, 10, 30, 20)}, 10, 30, true},
		{"from between two entries", Range{Found: true, Floor: 5, Entries: entries(20, 10, 30, 20)}, 15, 30, true},
		{"from before the floor", Range{Found: true, Floor: 10, Entries: entries(20, 10, 30, 20)}, 9, 30, false},
		{"no history", Range{}, 5, 30, false},
		{"nothing to hold", Range{}, 30, 30, true},
		{"cut short", Range{Found: true, Floor: 5, Entries: entries(10, 5), More: true}, 5, 30, false},
		{"does not reach the mark", Range{Found: true, Floor: 5, Entries: entries(10, 5, 20, 10)}, 5, 30, false},
		{"an entry lost between two", Range{Found: true, Floor: 5, Entries: entries(10, 5, 30, 20)}, 5, 30, false},
		{"the entry after from says one before it was lost", Range{Found: true, Floor: 5, Entries: entries(20, 15, 30, 20)}, 10, 30, false},
		{"a prev at its own LSN", Range{Found: true, Floor: 5, Entries: entries(10, 10)}, 5, 10, false},
		{"out of order", Range{Found: true, Floor: 0, Entries: entries(20, 0, 10, 0)}, 0, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Covers(tc.after, tc.through); got != tc.want {
				t.Errorf("Covers(%d, %d) of %+v = %v, want %v", tc.after, tc.through, tc.r, got, tc.want)
			}
		})
	}
}

func TestEncodeDecode(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	key := []string{"id"}
	txn := &change.Txn{CommitLSN: 0x500, EndLSN: 0x530, XID8: 1<<32 | 77, Events: []change.Event{
		{Table: "public.items", Op: change.Insert, After: change.Row{{Name: "id", Value: json.RawMessage(`1`)}}, Key: key, LSN: 0x500, TxID: 7, CommitTime: at},
		{Table: "public.orders", Op: change.Insert, After: change.Row{{Name: "id", Value: json.RawMessage(`2`)}}, LSN: 0x500},
		{Table: "public.items", Op: change.Update, Before: change.Row{{Name: "id", Value: json.RawMessage(`1`)}}, BeforeKeyOnly: true,
			After: change.Row{{Name: "id", Value: json.RawMessage(`3`)}, {Name: "note", Value: json.RawMessage(`"x"`)}}, Omitted: []string{"big"}, Key: key, LSN: 0x500, WriteTag: "w"},
	}}
	b, err := Encode(txn, []int{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(0x500, b)
	if err != nil {
		t.Fatal(err)
	}
	want := Txn{LSN: 0x500, XID8: 1<<32 | 77, End: 0x530, Events: []Event{{Idx: 1, Event: txn.Events[0], Key: key}, {Idx: 3, Event: txn.Events[2], Key: key}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}

	// An entry written before the transaction's id and end were kept reads with neither.
	if got, err := Decode(0x400, []byte(`{"e":[{"i":1,"table":"public.items","op":"insert","after":{"id":1}}]}`)); err != nil || got.XID8 != 0 || got.End != 0 || len(got.Events) != 1 {
		t.Errorf("an older entry decoded as %+v, %v", got, err)
	}
	// With nothing but its id and end.
	if b, err := Encode(&change.Txn{CommitLSN: 0x450, EndLSN: 0x460, XID8: 9}, nil); err != nil || string(b) != `{"x":9,"n":"0/460"}` {
		t.Errorf("Encode of a transaction without changes = %s, %v", b, err)
	}
	of := &change.Txn{CommitLSN: 0x600, Overflow: &change.Overflow{Tables: map[string]int{"public.items": 3}, Changes: 3}}
	if b, err = Encode(of, nil); err != nil {
		t.Fatal(err)
	}
	if got, err = Decode(0x600, b); err != nil || got.Overflow == nil || got.Overflow.Tables["public.items"] != 3 || len(got.Events) != 0 {
		t.Errorf("an overflow decoded as %+v, %v", got, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, b := range []string{``, `{`, `{"e":[{"i":0,"op":"insert"}]}`, `{"e":[{"i":2,"op":"insert"},{"i":1,"op":"insert"}]}`, `[]`} {
		if _, err := Decode(1, []byte(b)); err == nil {
			t.Errorf("Decode(%q) succeeded", b)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"e":[{"i":1,"table":"public.items","op":"insert","after":[{"name":"id","value":1}],"k":["id"]}]}`))
	f.Add([]byte(`{"o":{"Tables":{"public.items":3},"Changes":3}}`))
	f.Add([]byte(`{"x":4294967373,"n":"0/530","e":[{"i":1,"table":"public.items","op":"insert","after":{"id":1}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		txn, err := Decode(7, b)
		if err != nil {
			return
		}
		last := uint32(0)
		for _, e := range txn.Events {
			if e.Idx <= last || e.Event.LSN != 7 {
				t.Fatalf("decoded %+v: indexes must rise from 1 and the LSN be the entry's", txn.Events)
			}
			last = e.Idx
		}
	})
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{MaxBytes: 1, MaxAge: time.Second}, true},
		{Config{MaxBytes: -1}, false},
		{Config{MaxAge: time.Millisecond}, false},
		{Config{MaxAge: -time.Second}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
	if d := (Config{}).WithDefaults(); d.MaxBytes != DefaultMaxBytes || d.MaxAge != DefaultMaxAge {
		t.Errorf("WithDefaults = %+v", d)
	}
}

// BenchmarkEncode measures what the replicator spends per table per transaction to record it.
func BenchmarkEncode(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			txn := &change.Txn{CommitLSN: 0x500}
			idx := make([]int, n)
			for i := range n {
				txn.Events = append(txn.Events, change.Event{Table: "public.items", Op: change.Insert, LSN: 0x500, Key: []string{"id"},
					After: change.Row{{Name: "id", Value: json.RawMessage(fmt.Sprint(i))}, {Name: "title", Value: json.RawMessage(`"a title of some length"`)}}})
				idx[i] = i
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Encode(txn, idx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
