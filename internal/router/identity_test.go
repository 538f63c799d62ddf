package router

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/wire"
)

// routerFor returns a live router over public.items with the given replica identity.
func routerFor(t *testing.T, identity Identity) *Router {
	t.Helper()
	info := schema["public.items"]
	info.Identity = identity
	r, err := New(Config{Schema: fakeSchema{"public.items": info}, Bus: bus.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	r.Seed(1)
	return r
}

// TestFiltersOnUnloggedColumnsAreRefused: under REPLICA IDENTITY DEFAULT an update's old
// image holds the key at most, so a row leaving a filter on another column could not be
// reported. Such a subscription is refused with the fix; one on the key is exact and
// accepted; under FULL anything goes.
func TestFiltersOnUnloggedColumnsAreRefused(t *testing.T) {
	for _, tt := range []struct {
		identity Identity
		filter   string
		refused  bool
	}{
		{IdentityDefault, `{"eq":["org_id","acme"]}`, true},
		{IdentityDefault, `{"and":[{"eq":["id",1]},{"gt":["qty",1]}]}`, true},
		{IdentityDefault, `{"not_null":"qty"}`, true},
		{IdentityIndex, `{"eq":["org_id","acme"]}`, true},
		{IdentityNothing, `{"eq":["id",1]}`, true},
		{IdentityDefault, `{"in":["id",[1,2]]}`, false},
		{IdentityDefault, ``, false},
		{IdentityFull, `{"eq":["org_id","acme"]}`, false},
	} {
		t.Run(fmt.Sprintf("%s %s", tt.identity, tt.filter), func(t *testing.T) {
			r := routerFor(t, tt.identity)
			req := Request{Table: "public.items", Sub: "s", Target: newRecorder()}
			if tt.filter != "" {
				req.Filter = json.RawMessage(tt.filter)
			}
			_, _, err := r.Subscribe(context.Background(), req)
			if !tt.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if wire.CodeOf(err) != wire.CodeBadFilter {
				t.Fatalf("got %v, want bad_filter", err)
			}
			msg := err.Error()
			for _, want := range []string{"REPLICA IDENTITY " + tt.identity.String(), "ALTER TABLE public.items REPLICA IDENTITY FULL"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
		})
	}
}

// TestKeyFilterWithoutOldImage: under DEFAULT an update that keeps the key carries no old
// image; a filter on the key is still exact, reading the old key from the new row.
func TestKeyFilterWithoutOldImage(t *testing.T) {
	r := routerFor(t, IdentityDefault)
	rec := newRecorder()
	subscribe(t, r, rec, "mine", `{"in":["id",[1,2]]}`)
	key := []string{"id"}
	steps := []*change.Txn{
		txn(10, change.Event{Op: change.Insert, After: row(1, "acme", 1), Key: key}),
		txn(20, change.Event{Op: change.Update, After: row(1, "globex", 2), Key: key}),
		txn(30, change.Event{Op: change.Update, After: row(3, "globex", 2), Before: keyOnly(1), BeforeKeyOnly: true, Key: key}), // leaves
		txn(40, change.Event{Op: change.Update, After: row(3, "acme", 5), Key: key}),                                            // not in view
		txn(50, change.Event{Op: change.Update, After: row(2, "acme", 5), Before: keyOnly(3), BeforeKeyOnly: true, Key: key}),   // enters
		txn(60, change.Event{Op: change.Delete, Before: keyOnly(2), BeforeKeyOnly: true, Key: key}),
		txn(70, change.Event{Op: change.Delete, Before: keyOnly(9), BeforeKeyOnly: true, Key: key}),
	}
	for _, tx := range steps {
		if err := r.Accept(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{"mine": {"insert:1", "update:1", "leave:1", "enter:2", "delete:2"}}
	if diff := cmp.Diff(want, rec.ops()); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
}

// TestRowLeavingAFilterAfterTheIdentityChanged: a subscription made under FULL whose table
// was then altered to DEFAULT. An update that moves a row out of its filter reaches it as
// "remove if present" (leave with the key), even though the filter's index key is not in
// the new row: never silence.
func TestRowLeavingAFilterAfterTheIdentityChanged(t *testing.T) {
	r := routerFor(t, IdentityFull)
	rec := newRecorder()
	subscribe(t, r, rec, "acme", `{"eq":["org_id","acme"]}`)
	subscribe(t, r, rec, "big", `{"gt":["qty",5]}`)
	key := []string{"id"}
	steps := []*change.Txn{
		txn(10, change.Event{Op: change.Insert, After: row(1, "acme", 9), Key: key}),
		txn(20, change.Event{Op: change.Update, After: row(1, "globex", 1), Key: key}),
	}
	for _, tx := range steps {
		if err := r.Accept(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{"acme": {"insert:1", "leave:1"}, "big": {"insert:1", "leave:1"}}
	if diff := cmp.Diff(want, rec.ops()); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	if f := rec.frames["acme"][1]; f["old_key_only"] != true || fmt.Sprint(f["old"]) != "map[id:1]" {
		t.Errorf("leave %v: want the key alone, marked old_key_only", f)
	}
}

// TestUnknownMembershipIsAResync: a column the filter reads is absent from the new image and
// no old image can fill it (an unchanged out-of-line value under DEFAULT): whether the row is
// in view cannot be told, so the subscriber gets a resync for exactly that change, with no
// lost count, instead of a guess.
func TestUnknownMembershipIsAResync(t *testing.T) {
	r := routerFor(t, IdentityFull)
	rec := newRecorder()
	subscribe(t, r, rec, "big", `{"gt":["qty",5]}`)
	subscribe(t, r, rec, "all", ``)
	after := change.Row{{Name: "id", Value: json.RawMessage(`1`)}, {Name: "org_id", Value: json.RawMessage(`"acme"`)}}
	ev := change.Event{Op: change.Update, After: after, Omitted: []string{"qty"}, Key: []string{"id"}}
	if err := r.Accept(context.Background(), txn(0x20, change.Event{Op: change.Insert, After: row(7, "x", 1)}, ev)); err != nil {
		t.Fatal(err)
	}
	got := rec.frames["big"]
	want := []map[string]any{{"type": "resync", "sub": "big", "first": "0/20.2", "last": "0/20.2", "reason": "incomplete_image"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("big (-want +got):\n%s", diff)
	}
	if ops := rec.ops()["all"]; len(ops) != 2 || ops[1] != "update:1" {
		t.Errorf("all got %v; an unfiltered subscription needs no resync", ops)
	}
	if st := r.Stats(); st.Gaps != 1 {
		t.Errorf("gaps %d, want 1", st.Gaps)
	}
}

// TestColumnListsKeepTheKey: a change is applied by key, so the key columns go out whatever
// the column list says, and subscribed names them.
func TestColumnListsKeepTheKey(t *testing.T) {
	r := routerFor(t, IdentityFull)
	rec := newRecorder()
	sub, _, err := r.Subscribe(context.Background(), Request{Table: "public.items", Sub: "s", Target: rec, Columns: []string{"qty"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"id"}, sub.Key); diff != "" {
		t.Errorf("key (-want +got):\n%s", diff)
	}
	_ = r.Accept(context.Background(), txn(10, change.Event{Op: change.Insert, After: row(7, "acme", 3)}))
	if got := fmt.Sprint(rec.frames["s"][0]["row"]); got != "map[id:7 qty:3]" {
		t.Errorf("row %s, want the key and qty", got)
	}
}

// TestUnpublishedTablesAreUnknown: a table the publication does not cover is refused like one
// that does not exist, before its filter is read, so its columns are never named.
func TestUnpublishedTablesAreUnknown(t *testing.T) {
	r, err := New(Config{Schema: fakeSchema{}, Bus: bus.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	r.Seed(1)
	_, _, err = r.Subscribe(context.Background(), Request{Table: "public.secret", Sub: "s", Target: newRecorder(),
		Filter: json.RawMessage(`{"eq":["password_hash","x"]}`)})
	if wire.CodeOf(err) != wire.CodeUnknownTable || strings.Contains(err.Error(), "password_hash") {
		t.Fatalf("got %v, want unknown_table naming no column", err)
	}
}
