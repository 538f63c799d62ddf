package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/heraldrt/herald/internal/wire"
)

// startTableNode runs a node streaming public.items of a fresh database, and returns once a
// subscription to it can start: once the node has routed a transaction.
func startTableNode(t *testing.T) (*node, string) {
	t.Helper()
	db := testenv.NewDatabase(t)
	testenv.Exec(t, db,
		`CREATE TABLE items (id int PRIMARY KEY, org_id text, title text, done bool)`,
		`ALTER TABLE items REPLICA IDENTITY FULL`)
	cfg := baseConfig()
	cfg.Changefeed = &changefeed.Config{
		DatabaseURL:    db,
		Tables:         []string{"public.items"},
		Slot:           slotFor(t, db),
		StatusInterval: 200 * time.Millisecond,
		SilenceTimeout: 5 * time.Second,
	}
	n := startNode(t, cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(n.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the node was not ready within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A node that has routed no transaction answers subscribed without a pos, which this
	// client refuses as a malformed frame: route one first.
	testenv.Exec(t, db, `INSERT INTO items (id, org_id) VALUES (0, 'warm-up')`)
	for {
		c := dial(t, n)
		_, err := c.Subscribe(ctxFor(t, 5*time.Second), Subscription{Sub: "probe", Table: "public.items"})
		c.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no subscription to public.items within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return n, db
}

func TestTableChanges(t *testing.T) {
	n, db := startTableNode(t)
	c := dial(t, n)
	ctx := ctxFor(t, 20*time.Second)
	pos, err := c.Subscribe(ctx, Subscription{Sub: "mine", Table: "public.items",
		Filter: json.RawMessage(`{"eq":["org_id","acme"]}`), Columns: []string{"id", "title", "done"}})
	if err != nil {
		t.Fatal(err)
	}
	if !pos.IsTable() {
		t.Fatalf("subscribed at %v, want a table position", pos)
	}
	testenv.Exec(t, db,
		`INSERT INTO items VALUES (1, 'acme', 'milk', false), (2, 'other', 'eggs', false)`,
		`UPDATE items SET done = true WHERE id = 1`,
		`UPDATE items SET org_id = 'other' WHERE id = 1`,
		`DELETE FROM items WHERE id = 2`)

	type seen struct {
		Op  wire.Op
		Row string
		Old string
	}
	row := func(r []byte, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		return string(r)
	}
	var got []seen
	var first, last Position
	for len(got) < 3 {
		f, raw, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v; so far %v", err, got)
		}
		ch, ok := f.(*Change)
		if !ok {
			t.Fatalf("got %s, want a change", raw)
		}
		if ch.Sub != "mine" || ch.Table != "public.items" || !ch.Position().IsTable() || ch.CommitTime.IsZero() {
			t.Errorf("change %s", raw)
		}
		if !last.IsZero() && ch.LSN < last.LSN {
			t.Errorf("change at %v after %v: out of order", ch.Position(), last)
		}
		last = ch.Position()
		if first.IsZero() {
			first = last
		}
		s := seen{Op: ch.Op}
		if ch.Row != nil {
			s.Row = row(json.Marshal(ch.Row))
		}
		if ch.Old != nil {
			s.Old = row(json.Marshal(ch.Old))
		}
		got = append(got, s)
	}
	want := []seen{
		{Op: wire.OpInsert, Row: `{"id":1,"title":"milk","done":false}`},
		{Op: wire.OpUpdate, Row: `{"id":1,"title":"milk","done":true}`, Old: `{"id":1,"title":"milk","done":false}`},
		{Op: wire.OpLeave, Old: `{"id":1,"title":"milk","done":true}`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if p, _ := c.Position("mine"); p != last {
		t.Errorf("Position = %v, want the last change's %v", p, last)
	}

	// Resuming from the first change: the node's history holds what came after it, so it is
	// replayed (this subscription has no filter: every change of the table after first), in
	// order and without a resync, then the live stream goes on.
	c2 := dial(t, n)
	if _, err := c2.Subscribe(ctx, Subscription{Sub: "again", Table: "public.items", From: first}); err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, db, `INSERT INTO items VALUES (3, 'acme', 'tea', false)`)
	prev := first
	var ops []string
	for {
		f, raw := next(t, c2)
		ch, ok := f.(*Change)
		if !ok {
			t.Fatalf("after a resume from %v inside the history: %s, want changes", first, raw)
		}
		p := ch.Position()
		if p.LSN < prev.LSN || p.LSN == prev.LSN && p.Idx <= prev.Idx {
			t.Fatalf("change at %v after %v: not after it", p, prev)
		}
		prev = p
		ops = append(ops, string(ch.Op))
		if ch.Op == wire.OpInsert && strings.Contains(string(raw), `"id":3`) {
			break
		}
	}
	if want := "[insert update update delete insert]"; fmt.Sprint(ops) != want {
		t.Errorf("replayed then live: %v, want %s (row 2's insert, the two updates of row 1, the delete, then row 3)", ops, want)
	}
	if p, _ := c2.Position("again"); p != prev {
		t.Errorf("Position after the replay = %v, want the last change's %v", p, prev)
	}
}

func TestTableErrors(t *testing.T) {
	n, _ := startTableNode(t)
	c := dial(t, n)
	ctx := ctxFor(t, 10*time.Second)
	tests := []struct {
		name string
		sub  Subscription
		code Code
	}{
		{"unknown table", Subscription{Sub: "a", Table: "public.nope"}, wire.CodeUnknownTable},
		{"unknown column", Subscription{Sub: "b", Table: "public.items", Columns: []string{"id", "nope"}}, wire.CodeUnknownColumn},
		{"bad filter", Subscription{Sub: "c", Table: "public.items", Filter: json.RawMessage(`{"frob":["id",1]}`)}, wire.CodeBadFilter},
		{"a channel position", Subscription{Sub: "d", Table: "public.items", From: wire.ChannelPosition("e", 1)}, wire.CodeBadPosition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Subscribe(ctx, tt.sub)
			var e *Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Errorf("Subscribe = %v, want %s", err, tt.code)
			}
		})
	}
}

// slotFor is a replication slot name of the test's own: slots (and the leader lock named after
// one) are global to the PostgreSQL cluster that concurrent tests share. The fresh database's
// name is unique.
func slotFor(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// TestTableSnapshot: a Snapshot subscription gets the matching rows in Rows pages, then Live
// with its position, which Position then gives; the changes after it follow. Before Live the
// subscription has no position to resume from.
func TestTableSnapshot(t *testing.T) {
	n, db := startTableNode(t)
	testenv.Exec(t, db, `INSERT INTO items VALUES (1, 'acme', 'milk', false), (2, 'other', 'eggs', false), (3, 'acme', 'tea', true)`)
	c := dial(t, n)
	ctx := ctxFor(t, 20*time.Second)
	pos, err := c.Subscribe(ctx, Subscription{Sub: "mine", Table: "public.items", Snapshot: true,
		Filter: json.RawMessage(`{"eq":["org_id","acme"]}`), Columns: []string{"id", "title"}})
	if err != nil {
		t.Fatal(err)
	}
	if !pos.IsZero() {
		t.Errorf("a snapshot subscribed at %v, want no position before its live", pos)
	}
	var rows []string
	var live *Live
	for live == nil {
		f, raw, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v; rows so far %v", err, rows)
		}
		switch f := f.(type) {
		case *Rows:
			for _, r := range f.Rows {
				b, _ := json.Marshal(r)
				rows = append(rows, string(b))
			}
		case *Live:
			live = f
		default:
			t.Fatalf("got %s before live", raw)
		}
		if p, _ := c.Position("mine"); live == nil && !p.IsZero() {
			t.Fatalf("a position (%v) before live", p)
		}
	}
	if want := []string{`{"id":1,"title":"milk"}`, `{"id":3,"title":"tea"}`}; fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows %v, want %v", rows, want)
	}
	if p, _ := c.Position("mine"); p != live.Pos || !p.IsTable() {
		t.Errorf("Position after live = %v, want live's %v", p, live.Pos)
	}
	testenv.Exec(t, db, `UPDATE items SET title = 'oat milk' WHERE id = 1`)
	f, raw := next(t, c)
	if ch, ok := f.(*Change); !ok || ch.LSN <= live.Pos.LSN {
		t.Errorf("after live: %s, want a change after %v", raw, live.Pos)
	}
}
