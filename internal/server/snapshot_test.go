package server

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/testenv"
)

// readSnapshot reads sub's frames after its subscribed until live, and returns the ids of the
// rows (rows frames, then the changes before live applied to them) and live's position.
func readSnapshot(t *testing.T, c *client, sub string) (ids []string, live string) {
	t.Helper()
	have := map[string]bool{}
	for {
		m, err := c.read(30 * time.Second)
		if err != nil {
			t.Fatalf("waiting for %s's live: %v", sub, err)
		}
		if m["sub"] != sub {
			continue
		}
		switch m["type"] {
		case "rows":
			for _, r := range m["rows"].([]any) {
				have[fmt.Sprint(r.(map[string]any)["id"])] = true
			}
		case "change":
			applyChange(have, m)
		case "live":
			for id := range have {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			return ids, m["pos"].(string)
		default:
			t.Fatalf("%s: unexpected frame %v", sub, m)
		}
	}
}

// applyChange applies a change frame to a set of row ids.
func applyChange(have map[string]bool, m map[string]any) {
	id := func(k string) string {
		if r, ok := m[k].(map[string]any); ok {
			return fmt.Sprint(r["id"])
		}
		return ""
	}
	switch m["op"] {
	case "insert", "enter":
		have[id("row")] = true
	case "update":
		if o := id("old"); o != "" {
			delete(have, o)
		}
		have[id("row")] = true
	case "delete", "leave":
		delete(have, id("old"))
	case "truncate":
		clear(have)
	}
}

// TestSnapshotSubscription: a subscribe with snapshot is answered subscribed (snapshot, no
// position), then the rows that match the filter now, then live with a position; changes after
// it follow as for any subscription.
func TestSnapshotSubscription(t *testing.T) {
	r, url := startWithDB(t, itemsDDL,
		`INSERT INTO items (id, org_id, qty) SELECT g, CASE WHEN g % 2 = 0 THEN 'acme' ELSE 'globex' END, g FROM generate_series(1, 9) g`)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"s","sub":"s","table":"public.items","filter":{"eq":["org_id","acme"]},"snapshot":true}`)
	m := c.expect("subscribed")
	if m["snapshot"] != true || m["pos"] != nil || fmt.Sprint(m["key"]) != "[id]" {
		t.Fatalf("subscribed %v, want snapshot true, no pos, key [id]", m)
	}
	ids, live := readSnapshot(t, c, "s")
	if diff := cmp.Diff([]string{"2", "4", "6", "8"}, ids); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if live == "" {
		t.Error("live without a position")
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (10, 'acme'), (11, 'globex')`)
	m = c.expect("change")
	if m["op"] != "insert" || fmt.Sprint(m["row"].(map[string]any)["id"]) != "10" {
		t.Errorf("after live: %v, want the insert of 10", m)
	}
}
