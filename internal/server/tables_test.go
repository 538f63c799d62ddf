package server

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/heraldrt/herald/internal/wire"
	"github.com/jackc/pgx/v5"
)

// itemsDDL makes the test table, REPLICA IDENTITY FULL so that filters may read any column.
const itemsDDL = `CREATE TABLE items (id int PRIMARY KEY, org_id text, title text, qty int, price numeric, done bool, note text, at timestamptz);
	ALTER TABLE items REPLICA IDENTITY FULL`

// startWithDB starts a server streaming tables of a fresh database, and waits until it is
// ready.
func startWithDB(t *testing.T, setup ...string) (*running, string) {
	t.Helper()
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, setup...)
	cfg := baseConfig()
	cfg.Session.MaxSubscriptions = 50
	cfg.Changefeed = feedConfig(t, url)
	r := start(t, cfg)
	waitReady(t, r)
	return r, url
}

// feedConfig streams public.items of the database at url, with short timings for tests.
func feedConfig(t *testing.T, url string) *changefeed.Config {
	return &changefeed.Config{
		DatabaseURL:    url,
		Slot:           testenv.SlotName(t, url),
		Tables:         []string{"public.items"},
		StatusInterval: 200 * time.Millisecond,
		SilenceTimeout: 5 * time.Second,
		BackoffMin:     50 * time.Millisecond,
		BackoffMax:     500 * time.Millisecond,
	}
}

// waitReady waits until the server's /readyz answers 200: its changefeed is streaming.
func waitReady(t *testing.T, r *running) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(r.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tableSub subscribes c to public.items as sub with a filter (JSON, or "" for none).
func tableSub(c *client, sub, filter, extra string) {
	c.t.Helper()
	f := ""
	if filter != "" {
		f = `,"filter":` + filter
	}
	c.send(`{"type":"subscribe","id":"` + sub + `","sub":"` + sub + `","table":"public.items"` + f + extra + `}`)
	m := c.expect("subscribed")
	if m["sub"] != sub {
		c.t.Fatalf("subscribed %v, want sub %s", m, sub)
	}
}

// collect reads change frames until the sentinel row (id 999999) arrives on sub "all", and
// returns each subscription's frames as "op:id" strings.
func collect(t *testing.T, c *client, url string) map[string][]string {
	t.Helper()
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (999999, 'sentinel')`)
	got := map[string][]string{}
	for {
		m, err := c.read(20 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the sentinel: %v; so far %v", err, got)
		}
		if m["type"] != "change" {
			t.Fatalf("unexpected frame %v", m)
		}
		sub := m["sub"].(string)
		row, _ := m["row"].(map[string]any)
		if row == nil {
			row, _ = m["old"].(map[string]any)
		}
		id := "-"
		if row != nil && row["id"] != nil {
			id = fmt.Sprint(row["id"])
		}
		if id == "999999" {
			if sub == "all" {
				return got
			}
			continue
		}
		got[sub] = append(got[sub], fmt.Sprintf("%s:%s", m["op"], id))
	}
}

func TestTableSubscriptionsFilterOperators(t *testing.T) {
	r, url := startWithDB(t, itemsDDL)
	c, _ := connect(t, r)
	subs := map[string]string{
		"eq":       `{"eq":["org_id","acme"]}`,
		"neq":      `{"neq":["org_id","acme"]}`,
		"lt":       `{"lt":["qty",5]}`,
		"lte":      `{"lte":["qty",5]}`,
		"gt":       `{"gt":["qty",5]}`,
		"gte":      `{"gte":["qty",5]}`,
		"in":       `{"in":["org_id",["acme","globex"]]}`,
		"is_null":  `{"is_null":"note"}`,
		"not_null": `{"not_null":"note"}`,
		"like":     `{"like":["title","Buy %"]}`,
		"and":      `{"and":[{"eq":["org_id","acme"]},{"gt":["qty",1]}]}`,
		"or":       `{"or":[{"eq":["org_id","initech"]},{"eq":["done",true]}]}`,
		"not":      `{"not":{"eq":["org_id","acme"]}}`,
		"numeric":  `{"gt":["price",9.99]}`,
		"time":     `{"lt":["at","2024-01-01T00:00:00Z"]}`,
	}
	names := []string{"all"}
	tableSub(c, "all", "", "")
	for name, f := range subs {
		tableSub(c, name, f, "")
		names = append(names, name)
	}
	testenv.Exec(t, url,
		`INSERT INTO items VALUES (1, 'acme', 'Buy milk', 1, 1.50, false, NULL, '2023-06-01T00:00:00+02')`,
		`INSERT INTO items VALUES (2, 'acme', 'Sell bread', 5, 10.00, true, 'n', '2024-06-01T00:00:00Z')`,
		`INSERT INTO items VALUES (3, 'globex', 'Buy eggs', 9, 9.99, false, 'n', NULL)`,
		`INSERT INTO items VALUES (4, 'initech', NULL, NULL, NULL, NULL, NULL, NULL)`,
	)
	got := collect(t, c, url)
	want := map[string][]string{
		"all":      {"insert:1", "insert:2", "insert:3", "insert:4"},
		"eq":       {"insert:1", "insert:2"},
		"neq":      {"insert:3", "insert:4"},
		"lt":       {"insert:1"},
		"lte":      {"insert:1", "insert:2"},
		"gt":       {"insert:3"},
		"gte":      {"insert:2", "insert:3"},
		"in":       {"insert:1", "insert:2", "insert:3"},
		"is_null":  {"insert:1", "insert:4"},
		"not_null": {"insert:2", "insert:3"},
		"like":     {"insert:1", "insert:3"},
		"and":      {"insert:2"},
		"or":       {"insert:2", "insert:4"},
		"not":      {"insert:3", "insert:4"},
		"numeric":  {"insert:2"},
		"time":     {"insert:1"},
	}
	sort.Strings(names)
	for _, name := range names {
		if diff := cmp.Diff(want[name], got[name]); diff != "" {
			t.Errorf("sub %s (%s) (-want +got):\n%s", name, subs[name], diff)
		}
	}
}

func TestUpdatesCrossingAFilterBoundary(t *testing.T) {
	r, url := startWithDB(t, itemsDDL, `ALTER TABLE items REPLICA IDENTITY FULL`,
		`INSERT INTO items (id, org_id, qty) VALUES (1, 'acme', 1), (2, 'globex', 1)`)
	c, _ := connect(t, r)
	tableSub(c, "all", "", "")
	tableSub(c, "acme", `{"eq":["org_id","acme"]}`, "")
	testenv.Exec(t, url,
		`UPDATE items SET qty = 2 WHERE id = 1`,           // stays in acme: update
		`UPDATE items SET org_id = 'globex' WHERE id = 1`, // leaves acme
		`UPDATE items SET org_id = 'acme' WHERE id = 2`,   // enters acme
		`UPDATE items SET qty = 3 WHERE id = 1`,           // outside acme: nothing
	)
	got := collect(t, c, url)
	if diff := cmp.Diff([]string{"update:1", "leave:1", "enter:2"}, got["acme"]); diff != "" {
		t.Errorf("acme (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"update:1", "update:1", "update:2", "update:1"}, got["all"]); diff != "" {
		t.Errorf("all (-want +got):\n%s", diff)
	}
}

func TestDeletesWithDefaultAndFullIdentity(t *testing.T) {
	for _, identity := range []string{"DEFAULT", "FULL"} {
		t.Run(identity, func(t *testing.T) {
			r, url := startWithDB(t, itemsDDL, `ALTER TABLE items REPLICA IDENTITY `+identity,
				`INSERT INTO items (id, org_id) VALUES (1, 'acme'), (2, 'globex')`)
			c, _ := connect(t, r)
			tableSub(c, "all", "", "")
			tableSub(c, "one", `{"eq":["id",1]}`, "")
			c.send(`{"type":"subscribe","id":"acme","sub":"acme","table":"public.items","filter":{"eq":["org_id","acme"]}}`)
			if identity == "DEFAULT" {
				// The old image would hold the key alone: a row leaving acme could not be told.
				m := c.expectError("bad_filter", "acme")
				if msg := fmt.Sprint(m["message"]); !strings.Contains(msg, "ALTER TABLE public.items REPLICA IDENTITY FULL") {
					t.Errorf("refusal %q does not name the fix", msg)
				}
			} else {
				c.expect("subscribed")
			}
			testenv.Exec(t, url, `DELETE FROM items WHERE id = 1`, `DELETE FROM items WHERE id = 2`)
			got := collect(t, c, url)
			if diff := cmp.Diff([]string{"delete:1", "delete:2"}, got["all"]); diff != "" {
				t.Errorf("all (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"delete:1"}, got["one"]); diff != "" {
				t.Errorf("one (-want +got):\n%s", diff)
			}
			if identity == "FULL" {
				if diff := cmp.Diff([]string{"delete:1"}, got["acme"]); diff != "" {
					t.Errorf("acme (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestTruncateReachesEverySubscriber(t *testing.T) {
	r, url := startWithDB(t, itemsDDL, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	c, _ := connect(t, r)
	tableSub(c, "all", "", "")
	tableSub(c, "acme", `{"eq":["org_id","acme"]}`, "")
	tableSub(c, "none", `{"eq":["org_id","nobody"]}`, "")
	testenv.Exec(t, url, `TRUNCATE items`)
	got := collect(t, c, url)
	for _, sub := range []string{"all", "acme", "none"} {
		if diff := cmp.Diff([]string{"truncate:-"}, got[sub]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", sub, diff)
		}
	}
}

func TestColumnListTrimsThePayload(t *testing.T) {
	r, url := startWithDB(t, itemsDDL)
	c, _ := connect(t, r)
	tableSub(c, "all", "", "")
	tableSub(c, "slim", `{"eq":["org_id","acme"]}`, `,"columns":["id","title"]`)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id, title, qty) VALUES (1, 'acme', 'x', 5)`)
	for {
		m, err := c.read(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m["sub"] != "slim" {
			continue
		}
		row := m["row"].(map[string]any)
		if fmt.Sprint(row) != "map[id:1 title:x]" {
			t.Errorf("slim row = %v, want only id and title", row)
		}
		return
	}
}

func TestSubscribedPositionAndLaterChanges(t *testing.T) {
	r, url := startWithDB(t, itemsDDL)
	// Row 1 is routed before the subscription below exists: a first subscriber sees it.
	first, _ := connect(t, r)
	tableSub(first, "first", "", "")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	first.expect("change")
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"s","sub":"all","table":"public.items"}`)
	m := c.expect("subscribed")
	pos, _ := m["pos"].(string)
	if pos == "" || pos == "0/0" {
		t.Errorf("subscribed %v: pos %q, want the commit LSN of the last routed transaction", m, pos)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (2, 'acme')`)
	ch := c.expect("change")
	if row := ch["row"].(map[string]any); row["id"] != float64(2) {
		t.Errorf("first change after subscribed = %v, want row 2 (row 1 committed before)", ch)
	}
	if p, _ := ch["pos"].(string); p <= pos && len(p) == len(pos) {
		t.Errorf("change pos %s not after subscribed pos %s", p, pos)
	}
}

func TestTableSubscribeRefusals(t *testing.T) {
	r, _ := startWithDB(t, itemsDDL, `CREATE TABLE other (id int PRIMARY KEY)`)
	c, _ := connect(t, r)
	tests := []struct{ frame, code string }{
		{`{"type":"subscribe","id":"a","sub":"a","table":"public.other"}`, "unknown_table"},
		{`{"type":"subscribe","id":"b","sub":"b","table":"public.items","filter":{"eq":["nope",1]}}`, "unknown_column"},
		{`{"type":"subscribe","id":"c","sub":"c","table":"public.items","filter":{"gt":["qty","five"]}}`, "bad_filter"},
		{`{"type":"subscribe","id":"d","sub":"d","table":"public.items","filter":{"teleport":[]}}`, "bad_filter"},
		{`{"type":"subscribe","id":"e","sub":"e","table":"public.items","columns":["id","nope"]}`, "unknown_column"},
	}
	for _, tt := range tests {
		c.send(tt.frame)
		m := c.expect("error")
		if m["code"] != tt.code || !strings.Contains(fmt.Sprint(m["message"]), "") {
			t.Errorf("%s: got %v, want %s", tt.frame, m, tt.code)
		}
	}
}

// TestSubscribedOnAFreshNodeCarriesAPosition: before any transaction is routed, a table
// subscription still starts after a known position: the one the stream resumed after.
func TestSubscribedOnAFreshNodeCarriesAPosition(t *testing.T) {
	r, url := startWithDB(t, itemsDDL)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"s","sub":"all","table":"public.items"}`)
	m := c.expect("subscribed")
	pos, _ := m["pos"].(string)
	if pos == "" {
		t.Fatalf("subscribed %v has no pos", m)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	if ch := c.expect("change"); ch["op"] != "insert" {
		t.Errorf("change %v", ch)
	}
}

// TestTablesOutsideThePublicationAreUnknown: with no table list, the publication decides what
// streams. A table it does not cover has no policy rules (they would not compile), so it is
// refused as closed (forbidden) whether or not it exists, and nothing about its columns leaks;
// a column the publication does not publish (Postgres 15 column lists) cannot be filtered on
// or asked for.
func TestTablesOutsideThePublicationAreUnknown(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL, `CREATE TABLE secret (id int PRIMARY KEY, password_hash text)`)
	columnLists := false
	testenv.Exec(t, url, `CREATE PUBLICATION herald FOR TABLE items`)
	if v := serverMajor(t, url); v >= 15 {
		columnLists = true
		testenv.Exec(t, url, `ALTER PUBLICATION herald SET TABLE items (id, org_id, title, qty, price, done, at)`)
	}
	cfg := baseConfig()
	cfg.Session.MaxSubscriptions = 50
	cfg.Changefeed = feedConfig(t, url)
	cfg.Changefeed.Tables = nil
	r := start(t, cfg)
	waitReady(t, r)
	c, _ := connect(t, r)
	for _, tt := range []struct{ frame, code, leak string }{
		{`{"type":"subscribe","id":"a","sub":"a","table":"public.secret","filter":{"eq":["password_hash","x"]}}`, "forbidden", "password_hash"},
		{`{"type":"subscribe","id":"b","sub":"b","table":"public.nothere","filter":{"eq":["x",1]}}`, "forbidden", `"x"`},
	} {
		c.send(tt.frame)
		m := c.expect("error")
		if m["code"] != tt.code || strings.Contains(fmt.Sprint(m["message"]), tt.leak) {
			t.Errorf("%s: got %v, want %s naming no column", tt.frame, m, tt.code)
		}
	}
	// Both unknown tables get the same answer: whether secret exists is not told.
	c.send(`{"type":"subscribe","id":"a","sub":"a","table":"public.secret"}`)
	a := c.expect("error")["message"]
	c.send(`{"type":"subscribe","id":"b","sub":"b","table":"public.nothere"}`)
	b := c.expect("error")["message"]
	if strings.ReplaceAll(fmt.Sprint(a), "secret", "X") != strings.ReplaceAll(fmt.Sprint(b), "nothere", "X") {
		t.Errorf("messages differ between a table that exists and one that does not: %q, %q", a, b)
	}
	if columnLists {
		c.send(`{"type":"subscribe","id":"n","sub":"n","table":"public.items","columns":["id","note"]}`)
		c.expectError("unknown_column", "n")
	}
	c.send(`{"type":"subscribe","id":"i","sub":"i","table":"public.items"}`)
	if m := c.expect("subscribed"); fmt.Sprint(m["key"]) != "[id]" {
		t.Errorf("subscribed %v: want key [id]", m)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id, note) VALUES (1, 'acme', 'private')`)
	ch := c.expect("change")
	if row := ch["row"].(map[string]any); row["note"] != nil {
		t.Errorf("row %v carries a column the publication does not publish", row)
	}
}

func serverMajor(t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	return major(conn.PgConn().ParameterStatus("server_version"))
}

// TestTableFromPastTheStream: a from no commit of this database can have reached is refused
// with bad_position; one ahead of what the node has routed but inside the WAL (a client that
// resumes after the node restarted) is taken, starts after it, and gets what follows.
func TestTableFromPastTheStream(t *testing.T) {
	r, url := startWithDB(t, itemsDDL)
	first, _ := connect(t, r)
	tableSub(first, "first", "", "")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	ch := first.expect("change")
	c, _ := connect(t, r)

	c.send(`{"type":"subscribe","id":"far","sub":"far","table":"public.items","from":"FFFFFFFF/FFFFFFFF.1"}`)
	if m := c.expectError("bad_position", "far"); m["field"] != "from" {
		t.Errorf("error %v, want field from", m)
	}

	// The commit of row 1 ends after its commit LSN, so one byte past it is inside the WAL,
	// and ahead of the router's head.
	commit, err := wire.ParsePosition(ch["pos"].(string))
	if err != nil {
		t.Fatal(err)
	}
	ahead := wire.TablePosition(commit.LSN+1, 0).String()
	c.send(`{"type":"subscribe","id":"near","sub":"near","table":"public.items","from":"` + ahead + `"}`)
	if m := c.expect("subscribed"); m["pos"] != ahead {
		t.Errorf("subscribed %v, want pos %s: the from it resumes after", m, ahead)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (2, 'acme')`)
	if m := c.expect("change"); m["sub"] != "near" || m["row"].(map[string]any)["id"] != float64(2) {
		t.Errorf("change %v, want row 2 on near", m)
	}
}

// TestTableResumeFromHistory: a subscription that comes back with the position of the last
// change it had gets the changes it missed, through its filter, then live ones: no gap, no
// duplicate. A from older than the history is a history_expired resync.
func TestTableResumeFromHistory(t *testing.T) {
	r, url := startWithDB(t, itemsDDL)
	c, _ := connect(t, r)
	tableSub(c, "acme", `{"eq":["org_id","acme"]}`, "")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	last := c.expect("change")["pos"].(string)
	_ = c.c.CloseNow()

	// While it is away: two acme rows (one in a transaction with another org's), an update
	// that moves row 1 out of its view, and another org's row.
	testenv.Exec(t, url, `BEGIN; INSERT INTO items (id, org_id) VALUES (2, 'other'); INSERT INTO items (id, org_id) VALUES (3, 'acme'); COMMIT`)
	testenv.Exec(t, url, `UPDATE items SET org_id = 'other' WHERE id = 1`)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (4, 'other')`)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (5, 'acme')`)

	back, _ := connect(t, r)
	back.send(`{"type":"subscribe","id":"acme","sub":"acme","table":"public.items","filter":{"eq":["org_id","acme"]},"from":"` + last + `"}`)
	if m := back.expect("subscribed"); m["pos"] != last {
		t.Fatalf("subscribed %v, want pos %s", m, last)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (6, 'acme')`)
	want := []string{"insert:3", "leave:1", "insert:5", "insert:6"}
	var got []string
	prev := last
	for len(got) < len(want) {
		m := back.expect("change")
		id := ""
		for _, img := range []string{"row", "old"} {
			if row, ok := m[img].(map[string]any); ok && id == "" {
				id = fmt.Sprint(row["id"])
			}
		}
		got = append(got, fmt.Sprintf("%s:%s", m["op"], id))
		pos := m["pos"].(string)
		if p, q := mustPos(t, pos), mustPos(t, prev); !after(p, q) {
			t.Fatalf("change at %s after %s: not in order", pos, prev)
		}
		prev = pos
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("resumed changes %v, want %v", got, want)
	}
}

func mustPos(t *testing.T, s string) wire.Position {
	t.Helper()
	p, err := wire.ParsePosition(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTableResumeBeyondHistory: a history too small to reach back to from answers with a
// history_expired resync, and then live changes.
func TestTableResumeBeyondHistory(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL)
	cfg := baseConfig()
	cfg.Session.MaxSubscriptions = 50
	cfg.Changefeed = feedConfig(t, url)
	cfg.HistoryBytes = 1 // every transaction is let go as soon as it is kept
	r := start(t, cfg)
	waitReady(t, r)
	c, _ := connect(t, r)
	tableSub(c, "all", "", "")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	last := c.expect("change")["pos"].(string)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (2, 'acme')`)
	c.expect("change")

	back, _ := connect(t, r)
	back.send(`{"type":"subscribe","id":"all","sub":"all","table":"public.items","from":"` + last + `"}`)
	back.expect("subscribed")
	if m := back.expect("resync"); m["reason"] != "history_expired" {
		t.Fatalf("resync %v, want history_expired", m)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (3, 'acme')`)
	if m := back.expect("change"); m["row"].(map[string]any)["id"] != float64(3) {
		t.Fatalf("change %v, want row 3", m)
	}
}
