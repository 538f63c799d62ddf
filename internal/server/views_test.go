package server

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// TestRandomViewsMatchPostgres subscribes random filters to a table, runs a random workload
// of inserts, updates (of the key, of filtered columns, of a large out-of-line column, and
// around it) and deletes, and checks after every transaction that each subscriber's view,
// built by applying its frames as PROTOCOL.md says, equals what Postgres answers for the
// filter in SQL. A difference is allowed only where a resync marked it (the client then
// re-reads, as it must). Under REPLICA IDENTITY DEFAULT a filter reading a non-key column
// must be refused, naming the fix.
func TestRandomViewsMatchPostgres(t *testing.T) {
	for _, identity := range []string{"FULL", "DEFAULT"} {
		t.Run(identity, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			randomViews(t, identity, rand.New(rand.NewPCG(seed, seed>>7)))
		})
	}
}

const viewsDDL = `CREATE TABLE items (id int PRIMARY KEY, org text, n int, flag bool, big text);
	ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL`

// vfilter is a random filter in both languages.
type vfilter struct {
	json, sql string
	keyOnly   bool // reads only id
}

func randomFilter(rng *rand.Rand, depth int, keyOnly bool) vfilter {
	lit := func(col string) (string, string) {
		switch col {
		case "id":
			v := fmt.Sprint(rng.IntN(30))
			return v, v
		case "n":
			v := fmt.Sprint(rng.IntN(6))
			return v, v
		case "flag":
			v := fmt.Sprint(rng.IntN(2) == 0)
			return v, v
		}
		v := []string{"a", "b", "c"}[rng.IntN(3)]
		return `"` + v + `"`, "'" + v + "'"
	}
	if depth > 0 && rng.IntN(3) == 0 {
		a, b := randomFilter(rng, depth-1, keyOnly), randomFilter(rng, depth-1, keyOnly)
		switch rng.IntN(3) {
		case 0:
			return vfilter{`{"and":[` + a.json + `,` + b.json + `]}`, "(" + a.sql + " AND " + b.sql + ")", a.keyOnly && b.keyOnly}
		case 1:
			return vfilter{`{"or":[` + a.json + `,` + b.json + `]}`, "(" + a.sql + " OR " + b.sql + ")", a.keyOnly && b.keyOnly}
		}
		return vfilter{`{"not":` + a.json + `}`, "(NOT " + a.sql + ")", a.keyOnly}
	}
	cols := []string{"id", "org", "n", "flag", "big"}
	col := cols[rng.IntN(len(cols))]
	if keyOnly {
		col = "id"
	}
	f := func(j, s string) vfilter { return vfilter{j, s, col == "id"} }
	switch {
	case col == "big":
		if rng.IntN(2) == 0 {
			return f(`{"is_null":"big"}`, "(big IS NULL)")
		}
		return f(`{"like":["big","x%"]}`, "(big LIKE 'x%')")
	case rng.IntN(6) == 0:
		return f(`{"is_null":"`+col+`"}`, "("+col+" IS NULL)")
	case col == "flag" || col == "org":
		j, s := lit(col)
		if rng.IntN(2) == 0 {
			return f(`{"eq":["`+col+`",`+j+`]}`, "("+col+" = "+s+")")
		}
		return f(`{"neq":["`+col+`",`+j+`]}`, "("+col+" <> "+s+")")
	}
	j1, s1 := lit(col)
	j2, s2 := lit(col)
	switch rng.IntN(4) {
	case 0:
		return f(`{"eq":["`+col+`",`+j1+`]}`, "("+col+" = "+s1+")")
	case 1:
		return f(`{"lt":["`+col+`",`+j1+`]}`, "("+col+" < "+s1+")")
	case 2:
		return f(`{"gte":["`+col+`",`+j1+`]}`, "("+col+" >= "+s1+")")
	}
	return f(`{"in":["`+col+`",[`+j1+`,`+j2+`]]}`, "("+col+" IN ("+s1+", "+s2+"))")
}

// vrow is a row as a client holds it; big is the md5 of the value, "" when the client does
// not know it (an update that omitted it reached a client that did not have the row).
type vrow struct{ org, n, flag, big string }

func jsonText(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(v)
}

func bigOf(v any) string {
	if v == nil {
		return "null"
	}
	sum := md5.Sum([]byte(v.(string)))
	return hex.EncodeToString(sum[:])
}

func randomViews(t *testing.T, identity string, rng *rand.Rand) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, viewsDDL, `ALTER TABLE items REPLICA IDENTITY `+identity)
	cfg := baseConfig()
	cfg.Session.MaxSubscriptions = 64
	// The test checks views, not a slow reader on a loaded machine: room for the whole run.
	cfg.Session.Lanes.MaxDataFrames = 1 << 17
	cfg.Session.Lanes.MaxDataBytes = 1 << 30
	cfg.PingInterval = time.Minute
	cfg.Changefeed = feedConfig(t, url)
	r := start(t, cfg)
	waitReady(t, r)
	c, _ := connect(t, r)

	type sub struct {
		name string
		f    vfilter
		view map[int]vrow
	}
	subs := []*sub{{name: "all", f: vfilter{json: "", sql: "true", keyOnly: true}, view: map[int]vrow{}}}
	refused := 0
	for i := 0; len(subs) < 40 && i < 200; i++ {
		f := randomFilter(rng, 2, identity == "DEFAULT" && i%2 == 0)
		name := fmt.Sprintf("s%d", i)
		c.send(`{"type":"subscribe","id":"` + name + `","sub":"` + name + `","table":"public.items","filter":` + f.json + `}`)
		m, err := c.read(5 * time.Second)
		if err != nil {
			t.Fatalf("subscribe %s: %v", f.json, err)
		}
		switch {
		case m["type"] == "subscribed":
			if identity == "DEFAULT" && !f.keyOnly {
				t.Fatalf("filter %s on a DEFAULT table was accepted; it reads a column the old image lacks", f.json)
			}
			subs = append(subs, &sub{name: name, f: f, view: map[int]vrow{}})
		case m["type"] == "error" && m["code"] == "bad_filter" && identity == "DEFAULT" && !f.keyOnly:
			if msg := fmt.Sprint(m["message"]); !strings.Contains(msg, "REPLICA IDENTITY FULL") {
				t.Fatalf("refusal of %s does not name the fix: %s", f.json, msg)
			}
			refused++
		default:
			t.Fatalf("subscribe %s: %v", f.json, m)
		}
	}
	c.send(`{"type":"subscribe","id":"all","sub":"all","table":"public.items"}`)
	c.expect("subscribed")
	if identity == "DEFAULT" && refused == 0 {
		t.Fatal("no filter was refused under DEFAULT: the generator is broken")
	}

	// Read every frame while the workload runs, so the connection's queue never fills.
	frames := make(chan map[string]any, 1<<16)
	readErr := make(chan error, 1)
	go func() {
		for {
			m, err := c.read(30 * time.Second)
			if err != nil {
				readErr <- err
				return
			}
			frames <- m
			if row, _ := m["row"].(map[string]any); m["sub"] == "all" && row != nil && row["id"] == float64(1000000) {
				readErr <- nil
				return
			}
		}
	}()

	// The workload, one transaction at a time, recording its txid and Postgres's answer for
	// every filter after it.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	sqls := make([]string, len(subs))
	for i, s := range subs {
		sqls[i] = "(" + s.f.sql + ") IS TRUE"
	}
	answerQuery := "SELECT id, coalesce(org, 'null'), coalesce(n::text, 'null'), coalesce(flag::text, 'null'), coalesce(md5(big), 'null'), ARRAY[" + strings.Join(sqls, ", ") + "] FROM items"
	type step struct {
		txid   uint32
		answer []map[int]vrow // per sub
	}
	var steps []step
	randomValue := func(col string) string {
		switch col {
		case "org":
			return []string{"'a'", "'b'", "'c'", "NULL"}[rng.IntN(4)]
		case "n":
			return []string{"0", "1", "2", "3", "4", "5", "NULL"}[rng.IntN(7)]
		case "flag":
			return []string{"true", "false", "NULL"}[rng.IntN(3)]
		}
		// big: out of line (over 2 kB, stored EXTERNAL), sometimes starting with x.
		return fmt.Sprintf("repeat('%c', %d)", "xy"[rng.IntN(2)], 2500+rng.IntN(100))
	}
	for k := 0; k < 150; k++ {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j <= rng.IntN(3); j++ {
			id := rng.IntN(30)
			var q string
			switch op := rng.IntN(10); {
			case op < 3:
				q = fmt.Sprintf("INSERT INTO items VALUES (%d, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET org = excluded.org",
					id, randomValue("org"), randomValue("n"), randomValue("flag"), randomValue("big"))
			case op < 6:
				// Around the big value: it stays out of line and unchanged.
				col := []string{"org", "n", "flag"}[rng.IntN(3)]
				q = fmt.Sprintf("UPDATE items SET %s = %s WHERE id = %d", col, randomValue(col), id)
			case op < 7:
				q = fmt.Sprintf("UPDATE items SET big = %s WHERE id = %d", randomValue("big"), id)
			case op < 8:
				q = fmt.Sprintf("UPDATE items SET id = %[1]d WHERE id = %[2]d AND NOT EXISTS (SELECT FROM items WHERE id = %[1]d)", rng.IntN(30), id)
			case op < 9:
				q = fmt.Sprintf("DELETE FROM items WHERE id = %d", id)
			default:
				q = fmt.Sprintf("UPDATE items SET n = coalesce(n, 0) + 1, org = %s WHERE id %% 3 = %d", randomValue("org"), id%3)
			}
			if _, err := tx.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		// Every transaction changes at least one row, so "all" sees each one.
		if _, err := tx.Exec(ctx, "INSERT INTO items (id, org) VALUES (100000 + $1, 'tick')", k); err != nil {
			t.Fatal(err)
		}
		var txid int64
		if err := tx.QueryRow(ctx, "SELECT txid_current() % 4294967296").Scan(&txid); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		st := step{txid: uint32(txid), answer: make([]map[int]vrow, len(subs))}
		for i := range st.answer {
			st.answer[i] = map[int]vrow{}
		}
		rows, err := conn.Query(ctx, answerQuery)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var (
				id              int
				org, n, fl, big string
				in              []bool
			)
			if err := rows.Scan(&id, &org, &n, &fl, &big, &in); err != nil {
				t.Fatal(err)
			}
			for i, ok := range in {
				if ok {
					st.answer[i][id] = vrow{org, n, fl, big}
				}
			}
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		steps = append(steps, st)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org) VALUES (1000000, 'sentinel')`)
	select {
	case err := <-readErr:
		if err != nil {
			t.Fatalf("reading frames: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the sentinel did not arrive within 60s")
	}
	close(frames)

	// Group each sub's frames by transaction, in arrival order.
	bySub := map[string]map[uint32][]map[string]any{}
	lsnTxid := map[string]uint32{}
	var resyncs []map[string]any
	for m := range frames {
		switch m["type"] {
		case "change":
			txid := uint32(m["txid"].(float64))
			lsnTxid[m["pos"].(string)] = txid
			s := m["sub"].(string)
			if bySub[s] == nil {
				bySub[s] = map[uint32][]map[string]any{}
			}
			bySub[s][txid] = append(bySub[s][txid], m)
		case "resync":
			if m["reason"] != "incomplete_image" {
				t.Fatalf("resync %v: the test reads fast enough that no queue should fill", m)
			}
			resyncs = append(resyncs, m)
		default:
			t.Fatalf("unexpected frame %v", m)
		}
	}
	// A resync for one change marks its subscription at that transaction: the client
	// re-reads there.
	marked := map[string]map[uint32]bool{}
	for _, m := range resyncs {
		lsn, _, _ := strings.Cut(m["last"].(string), ".")
		txid, ok := lsnTxid[lsn]
		if !ok {
			t.Fatalf("resync %v names a transaction no change came from", m)
		}
		s := m["sub"].(string)
		if marked[s] == nil {
			marked[s] = map[uint32]bool{}
		}
		marked[s][txid] = true
	}

	checked, diffs := 0, 0
	for i, s := range subs {
		for _, st := range steps {
			for _, m := range bySub[s.name][st.txid] {
				applyFrame(s.view, m)
			}
			if marked[s.name][st.txid] {
				s.view = clone(st.answer[i])
				continue
			}
			checked++
			if d := viewDiff(st.answer[i], s.view); d != "" {
				diffs++
				if diffs <= 5 {
					t.Errorf("sub %s %s after txid %d: %s", s.name, s.f.json, st.txid, d)
				}
			}
		}
	}
	t.Logf("%s: %d subscriptions (%d refused), %d transactions, %d views checked, %d resyncs (incomplete_image), %d unmarked differences",
		identity, len(subs), refused, len(steps), checked, len(resyncs), diffs)
	if identity == "FULL" && len(resyncs) > 0 {
		t.Errorf("%d resyncs under FULL, where every image is complete: %v", len(resyncs), resyncs[0])
	}
}

func clone(m map[int]vrow) map[int]vrow {
	out := make(map[int]vrow, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// applyFrame applies one change frame to a view, as PROTOCOL.md tells a client to.
func applyFrame(view map[int]vrow, m map[string]any) {
	key := func(r map[string]any) int { return int(r["id"].(float64)) }
	row, _ := m["row"].(map[string]any)
	old, _ := m["old"].(map[string]any)
	omitted := map[string]bool{}
	if list, ok := m["omitted"].([]any); ok {
		for _, c := range list {
			omitted[c.(string)] = true
		}
	}
	switch m["op"] {
	case "insert", "enter", "update":
		prev, had := view[key(row)]
		if old != nil {
			if p, ok := view[key(old)]; ok {
				prev, had = p, true
			}
			delete(view, key(old))
		}
		v := vrow{org: jsonText(row["org"]), n: jsonText(row["n"]), flag: jsonText(row["flag"]), big: bigOf(row["big"])}
		if omitted["big"] {
			v.big = ""
			if had {
				v.big = prev.big
			}
		}
		view[key(row)] = v
	case "delete", "leave":
		delete(view, key(old))
	case "truncate":
		clear(view)
	}
}

func viewDiff(want, got map[int]vrow) string {
	var out []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("missing row %d %v", id, w))
		case g.org != w.org || g.n != w.n || g.flag != w.flag || (g.big != "" && g.big != w.big):
			out = append(out, fmt.Sprintf("row %d is %v, want %v", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			out = append(out, fmt.Sprintf("extra row %d %v", id, g))
		}
	}
	return strings.Join(out, "; ")
}
