package server

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/policy"
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

// TestSnapshotMetrics: a snapshot that goes live, and one too large, are counted; the rows
// sent too.
func TestSnapshotMetrics(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL, `INSERT INTO items (id, org_id) SELECT g, 'acme' FROM generate_series(1, 5) g`)
	cfg := baseConfig()
	cfg.Changefeed = feedConfig(t, url)
	cfg.Snapshots.MaxRows = 3
	r := start(t, cfg)
	waitReady(t, r)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"a","sub":"a","table":"public.items","filter":{"lt":["id",3]},"snapshot":true}`)
	c.expect("subscribed")
	if ids, _ := readSnapshot(t, c, "a"); len(ids) != 2 {
		t.Fatalf("rows %v, want 2", ids)
	}
	c.send(`{"type":"subscribe","id":"b","sub":"b","table":"public.items","snapshot":true}`)
	c.expect("subscribed")
	m := c.expect("unsubscribed")
	if m["sub"] != "b" || m["code"] != "snapshot_too_large" || !strings.Contains(fmt.Sprint(m["message"]), "handoff.max_rows") {
		t.Fatalf("got %v, want b ended with snapshot_too_large naming handoff.max_rows", m)
	}
	got := scrape(t, r)
	for series, want := range map[string]float64{
		"herald_snapshots_started_total":                             2,
		"herald_snapshots_live_total":                                1,
		`herald_snapshots_failed_total{reason="snapshot_too_large"}`: 1,
		`herald_snapshots_failed_total{reason="snapshot_busy"}`:      0,
		"herald_snapshot_rows_total":                                 2,
		"herald_handoffs":                                            0,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
}

// TestSnapshotFailsWhileAPageWaits: a client stops reading in the middle of a snapshot, so a
// page waits for room on its queue, and meanwhile the changes held for the hand-off outgrow
// their bound: the subscription ends with handoff_buffer_full at once, not after the read's
// timeout (minutes here), which the waiting page would otherwise sit out.
func TestSnapshotFailsWhileAPageWaits(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL,
		`INSERT INTO items (id, org_id, title) SELECT g, 'acme', repeat('x', 100) FROM generate_series(1, 200000) g`)
	cfg := baseConfig()
	cfg.Changefeed = feedConfig(t, url)
	cfg.Snapshots.MaxRows = 1_000_000
	cfg.Snapshots.Timeout = 10 * time.Minute
	cfg.Handoff.PendingBytes, cfg.Handoff.EarlyBytes = 4096, 4096
	// The client reads nothing for a while on purpose: no ping or slow-client check may end
	// it meanwhile.
	cfg.Session.SlowTimeout, cfg.PingInterval = 10*time.Minute, 10*time.Minute
	r := start(t, cfg)
	waitReady(t, r)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"s","sub":"s","table":"public.items","snapshot":true}`)
	// Unread, about 25 MB of rows fill the connection's queue and its socket buffers, and the
	// read waits on a page.
	waitFor := func(what, series string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for scrape(t, r)[series] != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s is not 1 after a minute", what, series)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("the hand-off in progress", "herald_handoffs")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id, title) SELECT g, 'acme', repeat('y', 100) FROM generate_series(300001, 300100) g`)
	// Before the client reads anything: the snapshot ends while its page still waits.
	waitFor("the snapshot ended", `herald_snapshots_failed_total{reason="handoff_buffer_full"}`)
	for {
		m, err := c.read(60 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the subscription to end: %v", err)
		}
		if m["type"] == "unsubscribed" {
			if m["sub"] != "s" || m["code"] != "handoff_buffer_full" {
				t.Fatalf("got %v, want s ended with handoff_buffer_full", m)
			}
			return
		}
		if m["type"] == "live" {
			t.Fatalf("the snapshot went live: %v", m)
		}
	}
}

// TestSnapshotOverSSE: a URL subscription with snapshot=1 gets subscribed with an event id
// that names it with no position, its rows without ids, and live with its position, from which
// a reconnect resumes rather than reads the rows again; one before live reads them again.
func TestSnapshotOverSSE(t *testing.T) {
	r, url := startWithDB(t, itemsDDL, `INSERT INTO items (id, org_id) VALUES (1, 'acme'), (2, 'acme')`)
	c, resp := openSSE(t, r.url+"/v1/sse?sub=feed&table=public.items&snapshot=1", bearerHeader(t, "user-1"))
	if c == nil {
		t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
	}
	c.next("welcome")
	if ev := c.next("subscribed"); ev.id != "feed -" || ev.frame["snapshot"] != true {
		t.Errorf("subscribed %v with id %q, want snapshot and the id \"feed -\"", ev.frame, ev.id)
	}
	if ev := c.next("rows"); ev.id != "" || len(ev.frame["rows"].([]any)) != 2 {
		t.Errorf("rows %v with id %q, want both rows and no id", ev.frame, ev.id)
	}
	live := c.next("live")
	if live.id != "feed "+fmt.Sprint(live.frame["pos"]) {
		t.Errorf("live's id %q, want \"feed <its pos>\"", live.id)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (3, 'acme')`)
	c.next("change")
	c.cancel()

	// Reconnecting with the last id resumes: no rows again.
	h := bearerHeader(t, "user-1")
	h.Set("Last-Event-ID", live.id)
	c2, resp := openSSE(t, r.url+"/v1/sse?sub=feed&table=public.items&snapshot=1", h)
	if c2 == nil {
		t.Fatalf("GET /v1/sse again: %d", resp.StatusCode)
	}
	c2.next("welcome")
	if ev := c2.next("subscribed"); ev.frame["snapshot"] == true || ev.frame["pos"] != live.frame["pos"] {
		t.Errorf("resumed subscribed %v, want no snapshot and pos %v", ev.frame, live.frame["pos"])
	}
	if ev := c2.next("change"); fmt.Sprint(ev.frame["row"].(map[string]any)["id"]) != "3" {
		t.Errorf("resumed with %v, want the insert of 3", ev.frame)
	}
	c2.cancel()

	// Reconnecting with the id of the subscribed alone (the stream dropped before live): the
	// rows again.
	h.Set("Last-Event-ID", "feed -")
	c3, resp := openSSE(t, r.url+"/v1/sse?sub=feed&table=public.items&snapshot=1", h)
	if c3 == nil {
		t.Fatalf("GET /v1/sse a third time: %d", resp.StatusCode)
	}
	c3.next("welcome")
	if ev := c3.next("subscribed"); ev.frame["snapshot"] != true {
		t.Errorf("taken up before live: subscribed %v, want snapshot", ev.frame)
	}
	if ev := c3.next("rows"); len(ev.frame["rows"].([]any)) != 3 {
		t.Errorf("taken up before live: rows %v, want all three", ev.frame["rows"])
	}
	c3.next("live")
}

// TestSnapshotAcrossNodes: among many nodes a snapshot subscription on the node that does not
// replicate reads its look-back from the history the nodes share, and goes live with the fence
// the replicator sends it, on a quiet database as while writers change the table; its rows and
// the changes after them are the table's rows at the end, as on the replicator's node.
func TestSnapshotAcrossNodes(t *testing.T) {
	url, leader, follower := tableNodes(t, nil)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id, qty) SELECT g, CASE WHEN g % 3 = 0 THEN 'acme' ELSE 'globex' END, g FROM generate_series(1, 30) g`)
	// A plain subscriber on each node: the follower then routes the table's transactions, and
	// a sentinel tells when everything before it arrived.
	watch := map[*running]*client{}
	for _, r := range []*running{leader, follower} {
		watch[r], _ = connect(t, r)
		tableSub(watch[r], "z", `{"eq":["org_id","zz"]}`, "")
	}
	sentinel := func(id int) {
		testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO items (id, org_id) VALUES (%d, 'zz')`, id))
		for _, c := range watch {
			for m := c.expect("change"); fmt.Sprint(m["row"].(map[string]any)["id"]) != fmt.Sprint(id); m = c.expect("change") {
			}
		}
	}
	sentinel(1000)

	type sub struct {
		name, filter string
		c            *client
		have         map[string]bool
		keep         func(org string) bool
	}
	var subs []*sub
	subscribe := func(r *running, name, filter string, keep func(string) bool) *sub {
		c, _ := connect(t, r)
		f := ""
		if filter != "" {
			f = `,"filter":` + filter
		}
		c.send(`{"type":"subscribe","id":"` + name + `","sub":"` + name + `","table":"public.items"` + f + `,"snapshot":true}`)
		c.expect("subscribed")
		s := &sub{name: name, filter: filter, c: c, keep: keep}
		subs = append(subs, s)
		return s
	}
	all := func(string) bool { return true }
	acme := func(org string) bool { return org == "acme" }

	// A quiet database, but for a write the stream does not carry (a table outside the
	// publication): only the fence moves each node's stream past the snapshot, which that
	// write's WAL puts after everything streamed.
	testenv.Exec(t, url, `CREATE TABLE notes (id int)`)
	for i, r := range []*running{follower, leader} {
		testenv.Exec(t, url, `INSERT INTO notes VALUES (1)`)
		s := subscribe(r, fmt.Sprintf("quiet%d", i), "", all)
		ids, _ := readSnapshot(t, s.c, s.name)
		s.have = map[string]bool{}
		for _, id := range ids {
			s.have[id] = true
		}
	}

	// Writers, and snapshots taken meanwhile on both nodes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := 1 + i*7%40
			org := []string{"acme", "globex"}[i%2]
			if _, err := conn.Exec(context.Background(), `INSERT INTO items (id, org_id, qty) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET org_id = excluded.org_id, qty = excluded.qty`, id, org, i); err != nil {
				t.Error(err)
				return
			}
			if i%5 == 0 {
				if _, err := conn.Exec(context.Background(), `DELETE FROM items WHERE id = $1`, 1+i*3%40); err != nil {
					t.Error(err)
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for i, r := range []*running{follower, leader, follower, leader} {
		keep, filter := all, ""
		if i%2 == 1 {
			keep, filter = acme, `{"eq":["org_id","acme"]}`
		}
		s := subscribe(r, fmt.Sprintf("busy%d", i), filter, keep)
		ids, _ := readSnapshot(t, s.c, s.name)
		s.have = map[string]bool{}
		for _, id := range ids {
			s.have[id] = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	sentinel(1001)

	// The table now.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT id, org_id FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	truth := map[string]string{}
	for rows.Next() {
		var id int
		var org string
		if err := rows.Scan(&id, &org); err != nil {
			t.Fatal(err)
		}
		truth[fmt.Sprint(id)] = org
	}
	for _, s := range subs {
		// Everything committed before the sentinel reached the watcher on the same node: read
		// this subscriber's changes until a quiet moment after it.
		for {
			m, err := s.c.read(300 * time.Millisecond)
			if err != nil {
				break
			}
			if m["type"] != "change" {
				t.Fatalf("%s: unexpected %v", s.name, m)
			}
			applyChange(s.have, m)
		}
		want := map[string]bool{}
		for id, org := range truth {
			if s.keep(org) {
				want[id] = true
			}
		}
		if diff := cmp.Diff(want, s.have); diff != "" {
			t.Errorf("%s: rows and changes (-want +got):\n%s", s.name, diff)
		}
	}
}

// TestSnapshotReasonsAreCodes: every reason a hand-off fails with is a client code of the same
// name (its subscription ends with it), with a text for the client, and the outcomes counted
// by reason cover them all.
func TestSnapshotReasonsAreCodes(t *testing.T) {
	for _, r := range handoff.Reasons {
		if !fault.Code(r).Known() {
			t.Errorf("reason %s is not a client code", r)
		}
		if r != handoff.ReasonPolicyError && reasonText[r] == "" {
			t.Errorf("reason %s has no text for the client", r)
		}
		if !slices.Contains(snapshotOutcomes, string(r)) {
			t.Errorf("reason %s is not counted", r)
		}
		fe, ok := fault.As(clientError(&handoff.Error{Reason: r, Detail: "row 7 of tenant secret", Fix: r.Fix()}))
		if !ok || fe.Code != fault.Code(r) || !strings.Contains(fe.Message, r.Fix()) {
			t.Errorf("reason %s is told as %v", r, fe)
		}
		// Only too_large's counts reach the client; a detail may say more than it may know.
		if r != handoff.ReasonTooLarge && strings.Contains(fe.Message, "secret") {
			t.Errorf("reason %s told the client its detail: %q", r, fe.Message)
		}
	}
	fe, _ := fault.As(clientError(&handoff.Error{Reason: handoff.ReasonPolicyError, Detail: "no such key: secret_col",
		Err: &policy.EvalError{Rule: "policy.tables.\"public.items\".row", Detail: "no such key: secret_col"}}))
	if !strings.Contains(fe.Message, `policy.tables."public.items".row`) || strings.Contains(fe.Message, "secret_col") {
		t.Errorf("a policy_error is told as %q: want the rule's name, never why", fe.Message)
	}
}

// TestSnapshotBySSECommand: a snapshot subscription posted as an SSE command comes on the
// stream as on a WebSocket: subscribed, rows, live, then changes; with a resume window, its
// subscribed's event id names it with no position, its rows carry none, its live's names its
// position.
func TestSnapshotBySSECommand(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL, `INSERT INTO items (id, org_id) VALUES (1, 'acme'), (2, 'globex')`)
	cfg := baseConfig()
	cfg.Changefeed = feedConfig(t, url)
	cfg.SSEResumeWindow = time.Minute
	r := start(t, cfg)
	waitReady(t, r)
	c, resp := openSSE(t, r.url+"/v1/sse", bearerHeader(t, "user-1"))
	if c == nil {
		t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
	}
	session := fmt.Sprint(c.next("welcome").frame["session"])
	tok := token(t, "user-1", time.Now().Add(time.Hour))
	if code, m := postJSON(t, r.url+"/v1/sse/"+session, tok,
		`{"type":"subscribe","id":"s","sub":"s","table":"public.items","filter":{"eq":["org_id","acme"]},"snapshot":true}`); code != 202 {
		t.Fatalf("command: %d %v", code, m)
	}
	for _, typ := range []string{"subscribed", "rows", "live"} {
		ev := c.next(typ)
		want := map[string]string{"subscribed": "@" + session + " s -", "rows": "", "live": "@" + session + " s " + fmt.Sprint(ev.frame["pos"])}[typ]
		if ev.id != want {
			t.Errorf("%s has event id %q, want %q", typ, ev.id, want)
		}
		if typ == "rows" {
			if rows := ev.frame["rows"].([]any); len(rows) != 1 || fmt.Sprint(rows[0].(map[string]any)["id"]) != "1" {
				t.Errorf("rows %v, want row 1 alone", ev.frame["rows"])
			}
		}
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (3, 'acme')`)
	last := c.next("change")
	if fmt.Sprint(last.frame["row"].(map[string]any)["id"]) != "3" {
		t.Errorf("after live: %v", last.frame)
	}
	c.cancel()

	// A reconnect takes it up after its live: resumed, no rows again.
	h := bearerHeader(t, "user-1")
	h.Set("Last-Event-ID", last.id)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (4, 'acme')`)
	c2, resp := openSSE(t, r.url+"/v1/sse", h)
	if c2 == nil {
		t.Fatalf("GET /v1/sse again: %d", resp.StatusCode)
	}
	c2.next("welcome")
	at := last.id[strings.LastIndexByte(last.id, ' ')+1:] // the change's position, with its index
	if ev := c2.next("subscribed"); ev.frame["sub"] != "s" || ev.frame["snapshot"] == true || ev.frame["pos"] != at {
		t.Errorf("taken up: %v, want s resumed at %s", ev.frame, at)
	}
	if ev := c2.next("change"); fmt.Sprint(ev.frame["row"].(map[string]any)["id"]) != "4" {
		t.Errorf("taken up with %v, want the insert of 4", ev.frame)
	}
}
