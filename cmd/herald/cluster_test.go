package main

// Many nodes, end to end: `herald serve` processes on loopback sharing a Redis (and, in the
// "cluster" variants, a Redis Cluster) and one database, as docs/ARCHITECTURE.md, "Many
// nodes", designs them. Each test names what crosses nodes and what a client must see:
// every item once at one position, or a resync where it is missing; never silence.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/heraldrt/herald/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// bigLanes gives every connection room for all a test sends, so a lane_full resync (a gap of
// the receiving node's own) cannot stand in for the cross-node gap a test looks for.
var bigLanes = []string{"HERALD_LIMITS_DATA_LANE_FRAMES=100000", "HERALD_LIMITS_DATA_LANE_BYTES=256MiB"}

// TestClusterHarness checks the harness: three nodes configured for a shared Redis start and
// answer /readyz, and /metrics; one killed with SIGKILL is gone while the others stay ready;
// a test's keys are deleted from Redis and from every master of the Cluster; the test's own
// redis-server comes back empty from a restart, which TestClusterRedisRestart counts on.
func TestClusterHarness(t *testing.T) {
	redisVariants(t, func(t *testing.T, url string) {
		rt, err := parseRedisURL(url)
		if err != nil {
			t.Fatal(err)
		}
		prefix := "herald-mn-" + randHex(6)
		// Hash tags spread the keys over a Cluster's slots, so every master holds some.
		for i := range 32 {
			if _, err := redisDo(rt, "SET", fmt.Sprintf("%s:{%d}:k", prefix, i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := countRedisPrefix(rt, prefix); err != nil || n != 32 {
			t.Fatalf("keys under the prefix: %d %v, want 32", n, err)
		}
		cleanRedisPrefix(t, url, prefix)
		if n, err := countRedisPrefix(rt, prefix); err != nil || n != 0 {
			t.Fatalf("keys under the prefix after the cleanup: %d %v, want 0", n, err)
		}
	})

	c := startCluster(t, clusterConfig{RedisURL: testenv.RedisURL(t)})
	for _, n := range c.nodes {
		if _, ok := n.mustMetrics(t).sum("herald_sessions", nil); !ok {
			t.Errorf("%s: /metrics has no herald_sessions", n.name)
		}
	}
	n2 := c.nodes[1]
	n2.kill(t)
	if code, body, err := n2.readyz(); err == nil {
		t.Errorf("%s was killed, and /readyz still answers %d %s", n2.name, code, body)
	}
	if live := c.live(); len(live) != 2 || slices.Contains(live, n2) {
		t.Errorf("live nodes after the kill: %d, want the two others", len(live))
	}
	for _, n := range c.others(n2) {
		n.waitReady(t, nodeReadyWithin)
	}

	r := startRedisServer(t)
	rt, err := parseRedisURL(r.url())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redisDo(rt, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if n := r.dbsize(t); n != 1 {
		t.Fatalf("own redis-server holds %d keys, want 1", n)
	}
	r.stop()
	r.start(t)
	if n := r.dbsize(t); n != 0 {
		t.Fatalf("own redis-server holds %d keys after a restart, want 0: it must come back empty", n)
	}
}

// TestClusterChannelBroadcast: subscribers of one channel on every node (and a pattern
// subscriber), three publishers at once on two nodes (the API and clients). Every publication
// has one offset whichever node took it: the offsets are contiguous, each publisher's in its
// order; every subscriber gets every publication once, at that position, in offset order, or a
// resync in its place. "one node" runs the same on a single node as the baseline.
func TestClusterChannelBroadcast(t *testing.T) {
	withOneNode(t, testChannelBroadcast)
}

func testChannelBroadcast(t *testing.T, redisURL string, nodes int) {
	c := startCluster(t, clusterConfig{Nodes: nodes, RedisURL: redisURL, Env: bigLanes})
	ns := "bc-" + randHex(4)
	channel := ns + "/room"

	type subscriber struct {
		who, sub string
		rec      *recorder
	}
	var subs []subscriber
	var starts []client.Position
	for i := 1; i <= 3; i++ {
		who := fmt.Sprintf("subscriber on node%d", i)
		conn := c.dial(t, c.at(i), fmt.Sprintf("sub%d", i))
		rec := record(who, conn)
		starts = append(starts, subscribe(t, who, conn, client.Subscription{Sub: "c", Channel: channel}))
		subs = append(subs, subscriber{who, "c", rec})
		if i == 3 {
			subscribe(t, who, conn, client.Subscription{Sub: "p", Channel: ns + "/*"})
			subs = append(subs, subscriber{"pattern subscriber on node3", "p", rec})
		}
	}
	base := starts[0]
	for i, p := range starts {
		if p != base || !p.IsChannel() {
			t.Fatalf("the subscription on node%d started at %v, node1's at %v: the channel has one stream, whichever node holds it", i+1, p, base)
		}
	}

	l := newLedger()
	pub2, pub3 := c.dial(t, c.at(2), "pub2"), c.dial(t, c.at(3), "pub3")
	publishers := []struct {
		name string
		do   func(ctx context.Context, data []byte) (client.Position, error)
	}{
		{"api@node2", func(ctx context.Context, d []byte) (client.Position, error) {
			return c.publishAPI(ctx, c.at(2), channel, d)
		}},
		{"client@node2", func(ctx context.Context, d []byte) (client.Position, error) {
			return pub2.Publish(ctx, client.Publication{Channel: channel, Data: d})
		}},
		{"client@node3", func(ctx context.Context, d []byte) (client.Position, error) {
			return pub3.Publish(ctx, client.Publication{Channel: channel, Data: d})
		}},
	}
	const each = 60
	var wg sync.WaitGroup
	for _, p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := fmt.Sprintf("%s/%d", p.name, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				pos, err := p.do(ctx, keyData(key))
				cancel()
				l.note(p.name, key, pos, err)
			}
		}()
	}
	wg.Wait()
	acked, failed, order := l.snapshot()
	if len(failed) > 0 {
		t.Fatalf("%d publishes failed, e.g. %v", len(failed), anyOf(failed))
	}

	// One offset per publication: base+1 .. base+N in the subscriptions' epoch, each once.
	offsets := map[uint64]string{}
	for k, p := range acked {
		if p.Epoch != base.Epoch {
			t.Errorf("%s was published at %v, in another epoch than the subscriptions' %v", k, p, base)
		}
		if other, ok := offsets[p.Offset]; ok {
			t.Errorf("%s and %s were both answered offset %d: two nodes gave out one offset", k, other, p.Offset)
		}
		offsets[p.Offset] = k
	}
	for o := base.Offset + 1; o <= base.Offset+3*each; o++ {
		if _, ok := offsets[o]; !ok {
			t.Errorf("no publication has offset %d: offsets %d..%d must all be given out once", o, base.Offset+1, base.Offset+3*each)
		}
	}
	for name, keys := range order {
		for i := 1; i < len(keys); i++ {
			if acked[keys[i]].Offset <= acked[keys[i-1]].Offset {
				t.Errorf("%s published %s after %s, and got offset %d after %d", name, keys[i], keys[i-1], acked[keys[i]].Offset, acked[keys[i-1]].Offset)
			}
		}
	}

	lasts := l.lasts()
	waitFor(t, deliveredWithin, func() (bool, string) {
		for _, s := range subs {
			if f := s.rec.of(s.sub); !reachedAll(f, lasts) {
				return false, fmt.Sprintf("the %s to receive up to %v; it has %s (reading ended: %v)", s.who, lasts, describeFrames(f), s.rec.ended())
			}
		}
		return true, ""
	})
	for _, s := range subs {
		rep := checkChannel(t, s.who, s.rec.of(s.sub), l)
		t.Logf("%s: %d publications delivered, %d covered by a resync", s.who, rep.delivered, rep.covered)
	}
}

// itemRow is the non-key part of a row of the table test's items.
type itemRow struct {
	owner string
	qty   int
}

// tableStmt is one statement of the table test's workload, touching one row, and what it does
// to that row: old and new are nil where the row is absent.
type tableStmt struct {
	sql      string
	args     []any
	id       int
	old, new *itemRow
}

// wantChange is a change a subscription must receive: the idx-th change of the txn-th
// transaction.
type wantChange struct {
	txn int
	idx uint32
	on  string // the op: insert, update, delete, enter, leave
	id  int
	row *itemRow // the new image, for insert, update and enter
}

// tableWorkload is rounds of transactions, one row per statement so a transaction's changes
// come in statement order, that move rows into and out of the filter owner = 'a' in every way.
func tableWorkload(rounds int) [][]tableStmt {
	state := map[int]*itemRow{}
	ins := func(id int, owner string, qty int) tableStmt {
		n := &itemRow{owner, qty}
		state[id] = n
		return tableStmt{`INSERT INTO items VALUES ($1, $2, $3)`, []any{id, owner, qty}, id, nil, n}
	}
	upd := func(id int, owner string, qty int) tableStmt {
		o, n := state[id], &itemRow{owner, qty}
		state[id] = n
		return tableStmt{`UPDATE items SET owner = $2, qty = $3 WHERE id = $1`, []any{id, owner, qty}, id, o, n}
	}
	del := func(id int) tableStmt {
		o := state[id]
		delete(state, id)
		return tableStmt{`DELETE FROM items WHERE id = $1`, []any{id}, id, o, nil}
	}
	var txns [][]tableStmt
	for r := range rounds {
		b := r * 10
		txns = append(txns,
			[]tableStmt{ins(b+1, "a", 1), ins(b+2, "b", 1), ins(b+3, "a", 1)},
			[]tableStmt{upd(b+1, "a", 2)},                               // a -> a: update
			[]tableStmt{upd(b+3, "b", 1)},                               // a -> b: leave
			[]tableStmt{upd(b+2, "a", 1)},                               // b -> a: enter
			[]tableStmt{del(b + 1)},                                     // a: delete
			[]tableStmt{ins(b+4, "b", 1), upd(b+4, "b", 5), del(b + 3)}, // b only: nothing for a
			[]tableStmt{upd(b+2, "a", 7), upd(b+4, "a", 5), upd(b+2, "b", 7)},
		)
	}
	return txns
}

// wantChanges is what a subscription sees of the workload: every change (filtered false), or
// the view of owner = 'a'.
func wantChanges(txns [][]tableStmt, filtered bool) []wantChange {
	in := func(r *itemRow) bool { return r != nil && (!filtered || r.owner == "a") }
	var out []wantChange
	for ti, txn := range txns {
		for si, s := range txn {
			w := wantChange{txn: ti, idx: uint32(si + 1), id: s.id}
			switch {
			case s.old == nil && in(s.new):
				w.on, w.row = "insert", s.new
			case s.old != nil && s.new != nil && in(s.old) && in(s.new):
				w.on, w.row = "update", s.new
			case s.old != nil && s.new != nil && !in(s.old) && in(s.new):
				w.on, w.row = "enter", s.new
			case s.old != nil && s.new != nil && in(s.old) && !in(s.new):
				w.on = "leave"
			case s.new == nil && in(s.old):
				w.on = "delete"
			default:
				continue
			}
			out = append(out, w)
		}
	}
	return out
}

// TestClusterTableChanges: subscribers of one table on every node, with and without a filter;
// inserts, updates and deletes that move rows into and out of the filter. Each subscription
// gets exactly its changes, in commit order, at the same positions on every node.
func TestClusterTableChanges(t *testing.T) {
	withOneNode(t, testTableChanges)
}

func testTableChanges(t *testing.T, redisURL string, nodes int) {
	db := testenv.NewDatabase(t)
	testenv.Exec(t, db,
		`CREATE TABLE items (id int PRIMARY KEY, owner text NOT NULL, qty int NOT NULL)`,
		`ALTER TABLE items REPLICA IDENTITY FULL`)
	c := startCluster(t, clusterConfig{Nodes: nodes, RedisURL: redisURL, Database: db,
		Tables: []string{"public.items"}, FullIdentity: []string{"public.items"}, Env: bigLanes})

	type subscriber struct {
		who, sub string
		rec      *recorder
		want     []wantChange
	}
	txns := tableWorkload(8)
	wantAll, wantA := wantChanges(txns, false), wantChanges(txns, true)
	var subs []subscriber
	for i := 1; i <= 3; i++ {
		who := fmt.Sprintf("node%d", i)
		conn := c.dial(t, c.at(i), who)
		rec := record(who, conn)
		subscribe(t, who, conn, client.Subscription{Sub: "all", Table: "public.items"})
		subscribe(t, who, conn, client.Subscription{Sub: "a", Table: "public.items", Filter: json.RawMessage(`{"eq":["owner","a"]}`)})
		subs = append(subs, subscriber{who + " all rows", "all", rec, wantAll}, subscriber{who + " owner = 'a'", "a", rec, wantA})
	}

	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for ti, txn := range txns {
		err := pgx.BeginFunc(context.Background(), conn, func(tx pgx.Tx) error {
			for _, s := range txn {
				if _, err := tx.Exec(context.Background(), s.sql, s.args...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("transaction %d: %v", ti, err)
		}
	}

	waitFor(t, deliveredWithin, func() (bool, string) {
		for _, s := range subs {
			f := s.rec.of(s.sub)
			if len(f) < len(s.want) && s.rec.ended() == nil {
				return false, fmt.Sprintf("%s to receive %d changes; it has %s", s.who, len(s.want), describeFrames(f))
			}
		}
		return true, ""
	})
	// The positions of the workload's transactions, as the first subscription saw them: every
	// other must see the same.
	lsns := map[int]client.Position{}
	for _, s := range subs {
		checkTableChanges(t, s.who, s.rec.of(s.sub), s.want, lsns)
		if err := s.rec.ended(); err != nil {
			t.Errorf("%s: the connection ended: %v", s.who, err)
		}
	}
}

// checkTableChanges checks that frames are exactly want, with one commit position per
// transaction, growing from one transaction to the next, and the same as in lsns (filled by
// the first caller) on every subscription.
func checkTableChanges(t *testing.T, who string, frames []client.Frame, want []wantChange, lsns map[int]client.Position) {
	t.Helper()
	if len(frames) != len(want) {
		t.Errorf("%s: %d frames, want %d changes; got %s", who, len(frames), len(want), describeFrames(frames))
	}
	var prev client.Position
	for i, f := range frames[:min(len(frames), len(want))] {
		w := want[i]
		ch, ok := f.(*client.Change)
		if !ok {
			t.Errorf("%s: frame %d is %T %+v, want the %s of row %d", who, i, f, f, w.on, w.id)
			return
		}
		img := ch.Row
		if w.row == nil {
			img = ch.Old
		}
		id, _ := img.Get("id")
		if string(ch.Op) != w.on || string(id) != strconv.Itoa(w.id) || ch.Idx != w.idx {
			t.Errorf("%s: frame %d is %s of row %s (change %d of its transaction), want %s of row %d (change %d of transaction %d)", who, i, ch.Op, id, ch.Idx, w.on, w.id, w.idx, w.txn)
			return
		}
		if w.row != nil {
			owner, _ := ch.Row.Get("owner")
			qty, _ := ch.Row.Get("qty")
			if string(owner) != strconv.Quote(w.row.owner) || string(qty) != strconv.Itoa(w.row.qty) {
				t.Errorf("%s: frame %d: row %d is owner %s qty %s, want %q %d", who, i, w.id, owner, qty, w.row.owner, w.row.qty)
			}
		}
		txnPos := client.Position{LSN: ch.LSN}
		if p, ok := lsns[w.txn]; !ok {
			lsns[w.txn] = txnPos
		} else if p != txnPos {
			t.Errorf("%s: frame %d: transaction %d committed at %v here, at %v for another subscription", who, i, w.txn, txnPos, p)
		}
		if !later(ch.Position(), prev) {
			t.Errorf("%s: frame %d at %v after %v: positions must grow", who, i, ch.Position(), prev)
		}
		prev = ch.Position()
	}
	for _, f := range frames[min(len(frames), len(want)):] {
		t.Errorf("%s: a frame past the changes it should get: %T %+v", who, f, f)
	}
}

// TestClusterInterest: subscribers on one node only. The other nodes receive nothing from the
// bus, of any kind, and the interested node receives each publication once, not once per
// subscription; what nobody watches (a channel, a table) is sent to no node.
func TestClusterInterest(t *testing.T) {
	redisVariants(t, testInterest)
}

func testInterest(t *testing.T, redisURL string) {
	db := testenv.NewDatabase(t)
	testenv.Exec(t, db, `CREATE TABLE items (id int PRIMARY KEY, v text)`, `CREATE TABLE filler (id int PRIMARY KEY, v text)`)
	c := startCluster(t, clusterConfig{RedisURL: redisURL, Database: db, Tables: []string{"public.items", "public.filler"}, Env: bigLanes})
	rep := c.replicator(t, nodeReadyWithin)
	others := c.others(rep)
	in, quiet := others[0], others[1]
	t.Logf("replicator %s; subscribers on %s; %s has none", rep.name, in.name, quiet.name)
	channel := "int-" + randHex(4) + "/room"
	unwatched := "quiet-" + randHex(4) + "/room"

	var recs []*recorder
	for i := range 2 {
		who := fmt.Sprintf("subscriber %d on %s", i+1, in.name)
		conn := c.dial(t, in, fmt.Sprintf("s%d", i))
		rec := record(who, conn)
		subscribe(t, who, conn, client.Subscription{Sub: "ch", Channel: channel})
		subscribe(t, who, conn, client.Subscription{Sub: "items", Table: "public.items"})
		recs = append(recs, rec)
	}
	pg, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	insert := func(table string, from, n int) {
		t.Helper()
		if _, err := pg.Exec(context.Background(), `INSERT INTO `+table+` SELECT g, 'v' FROM generate_series($1::int, $2::int) g`, from, from+n-1); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(n *node, ch, key string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.publishAPI(ctx, n, ch, keyData(key)); err != nil {
			t.Fatalf("publish %s on %s: %v", key, n.name, err)
		}
	}
	count := func(rec *recorder) (msgs, rows int) {
		for _, f := range rec.of("ch") {
			if _, ok := f.(*client.Message); ok {
				msgs++
			}
		}
		for _, f := range rec.of("items") {
			if _, ok := f.(*client.Change); ok {
				rows++
			}
		}
		return msgs, rows
	}
	waitAll := func(msgs, rows int) {
		t.Helper()
		waitFor(t, deliveredWithin, func() (bool, string) {
			for _, rec := range recs {
				if m, r := count(rec); m < msgs || r < rows {
					return false, fmt.Sprintf("%s to receive %d messages and %d rows; it has %d and %d (reading ended: %v)", rec.who, msgs, rows, m, r, rec.ended())
				}
			}
			return true, ""
		})
	}
	const pubs, txns, rowsPer = 200, 20, 10
	for i := range pubs {
		n := rep
		if i%2 == 1 {
			n = quiet
		}
		publish(n, channel, fmt.Sprintf("w%d", i))
	}
	for i := range txns {
		insert("items", 1+i*rowsPer, rowsPer)
	}
	waitAll(pubs, txns*rowsPer)
	first := scrapeCluster(t, c.nodes)

	// What nobody watches, then one item of each kind that is watched, to know the first has
	// had its chance to travel.
	for i := range 50 {
		publish(rep, unwatched, fmt.Sprintf("u%d", i))
		publish(quiet, unwatched, fmt.Sprintf("v%d", i))
	}
	for i := range txns {
		insert("filler", 1+i*rowsPer, rowsPer)
	}
	publish(quiet, channel, "sentinel")
	insert("items", 1+txns*rowsPer, 1)
	waitAll(pubs+1, txns*rowsPer+1)
	second := scrapeCluster(t, c.nodes)

	for _, m := range []map[*node]metricSet{first, second} {
		for _, n := range []*node{rep, quiet} {
			for _, kind := range []string{"table", "channel", "presence"} {
				if v := recvd(m[n], kind); v != 0 {
					t.Errorf("%s, with no subscriber, received %v %s items from other nodes; want 0", n.name, v, kind)
				}
			}
		}
	}
	if _, ok := first[in].sum("herald_cluster_items_received_total", nil); !ok {
		t.Fatalf("%s has no herald_cluster_items_received_total: it received nothing from the bus, or does not count it", in.name)
	}
	if v := recvd(first[in], "channel"); v != pubs {
		t.Errorf("%s received %v channel items for %d publications made on other nodes to a channel it has 2 subscribers of; want %d: each item once per node", in.name, v, pubs, pubs)
	}
	if v := recvd(first[in], "table"); v < 1 || v > txns*rowsPer {
		t.Errorf("%s received %v table items for %d changes in %d transactions; want 1 to %d", in.name, v, txns*rowsPer, txns, txns*rowsPer)
	}
	if v := recvd(second[in], "channel") - recvd(first[in], "channel"); v != 1 {
		t.Errorf("%s received %v channel items for 100 publications to a channel nobody watches and 1 to its own; want 1", in.name, v)
	}
	if v := recvd(second[in], "table") - recvd(first[in], "table"); v != 1 {
		t.Errorf("%s received %v table items for %d rows of a table nobody watches and 1 row of its own; want 1", in.name, v, txns*rowsPer)
	}
	if v := recvd(second[in], "presence"); v != 0 {
		t.Errorf("%s received %v presence items; want 0: nobody tracks or watches presence", in.name, v)
	}
	for _, m := range []map[*node]metricSet{first, second} {
		// What the nodes sent is what in received: sent only to it, and only once.
		if s, r := sent(m[rep], "channel")+sent(m[quiet], "channel"), recvd(m[in], "channel"); s != r || sent(m[in], "channel") != 0 {
			t.Errorf("channel items sent: %s %v, %s %v, %s %v; want %v (what %s received) from the publishers, 0 from %s",
				rep.name, sent(m[rep], "channel"), quiet.name, sent(m[quiet], "channel"), in.name, sent(m[in], "channel"), r, in.name, in.name)
		}
		if s, r := sent(m[rep], "table"), recvd(m[in], "table"); s != r || sent(m[quiet], "table") != 0 || sent(m[in], "table") != 0 {
			t.Errorf("table items sent: replicator %s %v, %s %v, %s %v; want %v (what %s received) from the replicator alone",
				rep.name, s, quiet.name, sent(m[quiet], "table"), in.name, sent(m[in], "table"), r, in.name)
		}
		for n, ms := range m {
			if v, _ := ms.sum("herald_cluster_gaps_total", nil); v != 0 {
				t.Errorf("%s counted %v gaps; want 0: nothing was lost", n.name, v)
			}
		}
	}
	for _, rec := range recs {
		for _, f := range append(rec.of("ch"), rec.of("items")...) {
			if r, ok := f.(*client.Resync); ok {
				t.Errorf("%s: resync %+v: nothing was lost", rec.who, r)
			}
		}
	}
}

func scrapeCluster(t *testing.T, nodes []*node) map[*node]metricSet {
	t.Helper()
	out := map[*node]metricSet{}
	for _, n := range nodes {
		out[n] = n.mustMetrics(t)
	}
	return out
}

func recvd(m metricSet, kind string) float64 {
	v, _ := m.sum("herald_cluster_items_received_total", map[string]string{"kind": kind})
	return v
}

func sent(m metricSet, kind string) float64 {
	v, _ := m.sum("herald_cluster_items_sent_total", map[string]string{"kind": kind})
	return v
}

// TestClusterReplicatorFailover: three nodes on one slot, subscribers on the two that do not
// replicate, rows inserted all along; the replicator is killed with SIGKILL. Another node takes
// the slot over, and each subscriber gets every row exactly once, or again at the position it
// first came with (a client drops what is at or before its position), or a resync where rows
// are missing; never silence: rows committed after the kill arrive.
func TestClusterReplicatorFailover(t *testing.T) {
	redisVariants(t, testReplicatorFailover)
}

func testReplicatorFailover(t *testing.T, redisURL string) {
	db := testenv.NewDatabase(t)
	testenv.Exec(t, db, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	c := startCluster(t, clusterConfig{RedisURL: redisURL, Database: db, Tables: []string{"public.items"}, Env: bigLanes})
	rep := c.replicator(t, nodeReadyWithin)
	type sub struct {
		who string
		f   *follower
	}
	var subs []sub
	for _, n := range c.others(rep) {
		who := "subscriber on " + n.name
		conn := c.dial(t, n, n.name)
		subscribe(t, who, conn, client.Subscription{Sub: "items", Table: "public.items"})
		subs = append(subs, sub{who, follow(conn, nil)})
	}
	w := startWriter(t, db)
	stopped := false
	defer func() {
		if !stopped {
			close(w.stop)
			<-w.done
		}
	}()
	waitFor(t, deliveredWithin, func() (bool, string) {
		for _, s := range subs {
			if s.f.lastID() < 300 {
				return false, fmt.Sprintf("the %s to receive 300 rows before the kill; it has row %d (reading: %v)", s.who, s.f.lastID(), s.f.reading())
			}
		}
		return true, ""
	})
	t.Logf("killing the replicator, %s", rep.name)
	rep.kill(t)
	atKill := int(w.committed.Load())
	next := c.replicator(t, nodeReadyWithin)
	t.Logf("%s replicates now; %d rows were committed at the kill", next.name, atKill)
	waitFor(t, deliveredWithin, func() (bool, string) {
		return int(w.committed.Load()) >= atKill+300, fmt.Sprintf("300 rows to be committed after the kill (at %d, now %d)", atKill, w.committed.Load())
	})
	final := w.end(t)
	stopped = true
	waitFor(t, deliveredWithin, func() (bool, string) {
		for _, s := range subs {
			if err := s.f.reading(); err != nil {
				t.Fatalf("the %s stopped reading: %v", s.who, err)
			}
			if s.f.lastID() < final {
				return false, fmt.Sprintf("the %s to receive row %d, committed after the kill; it has row %d", s.who, final, s.f.lastID())
			}
		}
		return true, ""
	})
	for _, s := range subs {
		checkRows(t, s.who, s.f.list(), final)
	}
}

// TestClusterTableResume: rows are inserted all along; a subscriber on a node that does not
// replicate has its node killed with SIGKILL, and resumes on the other such node from the
// position of the last change it had. From the tables' history in Redis it gets every row it
// missed, then the live ones: each row once (or again at the position it first came with),
// in order, and no resync.
func TestClusterTableResume(t *testing.T) {
	redisVariants(t, testTableResume)
}

func testTableResume(t *testing.T, redisURL string) {
	db := testenv.NewDatabase(t)
	testenv.Exec(t, db, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	c := startCluster(t, clusterConfig{RedisURL: redisURL, Database: db, Tables: []string{"public.items"}, Env: bigLanes})
	rep := c.replicator(t, nodeReadyWithin)
	others := c.others(rep)
	gone, next := others[0], others[1]
	who := "the subscriber on " + gone.name
	conn := c.dial(t, gone, "alice")
	subscribe(t, who, conn, client.Subscription{Sub: "items", Table: "public.items"})
	before := follow(conn, nil)
	w := startWriter(t, db)
	stopped := false
	defer func() {
		if !stopped {
			close(w.stop)
			<-w.done
		}
	}()
	waitFor(t, deliveredWithin, func() (bool, string) {
		return before.lastID() >= 200, fmt.Sprintf("%s to receive 200 rows before the kill; it has row %d (reading: %v)", who, before.lastID(), before.reading())
	})
	t.Logf("killing %s", gone.name)
	gone.kill(t)
	_ = before.wait(t, who)
	had := before.list()
	var last client.Position
	switch g := had[len(had)-1]; {
	case g.resync != nil:
		last = g.resync.Last
	default:
		last = g.pos
	}
	resumed := "the subscriber resumed on " + next.name
	conn2 := c.dial(t, next, "alice")
	subscribe(t, resumed, conn2, client.Subscription{Sub: "items", Table: "public.items", From: last})
	after := follow(conn2, nil)
	atResume := int(w.committed.Load())
	t.Logf("%s resumed after row %d at %v; %d rows were committed then", resumed, before.lastID(), last, atResume)
	waitFor(t, deliveredWithin, func() (bool, string) {
		return int(w.committed.Load()) >= atResume+200, fmt.Sprintf("200 rows to be committed after the resume (at %d, now %d)", atResume, w.committed.Load())
	})
	final := w.end(t)
	stopped = true
	waitFor(t, deliveredWithin, func() (bool, string) {
		if err := after.reading(); err != nil {
			t.Fatalf("%s stopped reading: %v", resumed, err)
		}
		return after.lastID() >= final, fmt.Sprintf("%s to receive row %d; it has row %d", resumed, final, after.lastID())
	})
	if resyncs := checkRows(t, "the subscriber across the kill", append(had, after.list()...), final); len(resyncs) > 0 {
		t.Errorf("a resume from inside the table's history had resyncs: %s", describeResyncs(resyncs))
	}
}

// checkRows checks one subscription's frames of the writer's rows (ids 1, 2, 3, ... in commit
// order, the subscription made before the first): every row arrives once, or again at exactly
// the position it first came with (a replay, which a client drops by position); leaving
// replays out, positions grow and rows come in order up to final; rows are missing only right
// after a resync; no change comes from inside a range a resync reported lost. It returns the
// resyncs.
func checkRows(t reporter, who string, frames []got, final int) []*client.Resync {
	t.Helper()
	want := 1
	var last client.Position        // the client's position: the last change or resync
	var gap *client.Resync          // a resync no change has passed yet
	at := map[client.Position]int{} // the row each position carried
	var resyncs []*client.Resync
	replays, lost := 0, 0
	for i, g := range frames {
		if g.resync != nil {
			resyncs = append(resyncs, g.resync)
			gap = g.resync
			if later(g.resync.Last, last) {
				last = g.resync.Last
			}
			continue
		}
		if !later(g.pos, last) {
			if id, ok := at[g.pos]; !ok || id != g.id {
				t.Errorf("%s: frame %d: row %d at %v, at or before the client's position %v, where it had no such row (had row %d): not a replay, and inside what the client has or was told it lost", who, i, g.id, g.pos, last, id)
				return resyncs
			}
			replays++
			continue
		}
		switch {
		case g.id < want:
			t.Errorf("%s: frame %d: row %d again, at a new position %v (first at another): a duplicate no position can drop", who, i, g.id, g.pos)
			return resyncs
		case g.id > want && gap == nil:
			t.Errorf("%s: frame %d: row %d at %v: rows %d..%d are missing, with no resync", who, i, g.id, g.pos, want, g.id-1)
			return resyncs
		case g.id > want:
			lost += g.id - want
		}
		at[g.pos] = g.id
		gap, last, want = nil, g.pos, g.id+1
	}
	if want != final+1 {
		t.Errorf("%s: the last row received is %d, want %d", who, want-1, final)
	}
	t.Logf("%s: %d frames, %d replays dropped by position, %d rows reported lost by %d resyncs: %s", who, len(frames), replays, lost, len(resyncs), describeResyncs(resyncs))
	return resyncs
}

// TestClusterPresence: a member tracked on one node is in the roster of a presence subscriber
// on another; joins (a new member on a third node, a member replacing its meta) and leaves (an
// untrack, a closed connection) reach it, in order, once each. A subscriber on the member's
// own node sees the same.
func TestClusterPresence(t *testing.T) {
	withOneNode(t, testPresence)
}

func testPresence(t *testing.T, redisURL string, nodes int) {
	c := startCluster(t, clusterConfig{Nodes: nodes, RedisURL: redisURL})
	n1, n2, n3 := c.at(1), c.at(2), c.at(3)
	channel := "room-" + randHex(4) + "/lobby"

	alice := c.dialRaw(t, n1, "alice on node1", "alice")
	aliceID := trackedID(t, alice.request(t, map[string]any{"type": "track", "channel": channel, "meta": map[string]any{"name": "Alice"}}, "tracked"))
	watchers := []*rawConn{c.dialRaw(t, n2, "watcher on node2", "w2"), c.dialRaw(t, n1, "watcher on node1", "w1")}
	for _, w := range watchers {
		w.request(t, map[string]any{"type": "subscribe", "sub": "p", "channel": channel, "presence": true}, "subscribed")
	}
	// Each step's event must reach every watcher before the next step.
	var want []string
	step := func(event string) {
		t.Helper()
		want = append(want, event)
		for _, w := range watchers {
			waitPresence(t, w, want)
		}
	}
	step("roster " + aliceID + ` alice {"name":"Alice"}`)
	bob := c.dialRaw(t, n3, "bob on node3", "bob")
	bobID := trackedID(t, bob.request(t, map[string]any{"type": "track", "channel": channel, "meta": map[string]any{"name": "Bob"}}, "tracked"))
	step("join " + bobID + ` bob {"name":"Bob"}`)
	alice.request(t, map[string]any{"type": "track", "channel": channel, "meta": map[string]any{"name": "Alice 2"}}, "tracked")
	step("join " + aliceID + ` alice {"name":"Alice 2"}`)
	bob.request(t, map[string]any{"type": "untrack", "channel": channel}, "untracked")
	step("leave " + bobID + " bob")
	alice.close()
	step("leave " + aliceID + " alice")
	// Nothing more: a late duplicate would show by now, after the last step's round trips.
	for _, w := range watchers {
		w.request(t, map[string]any{"type": "ping"}, "pong")
		if got := presenceEvents(w.list()); !slices.Equal(got, want) {
			t.Errorf("%s: presence %q, want %q", w.who, got, want)
		}
	}
}

// trackedID is a tracked frame's member id.
func trackedID(t *testing.T, f rawFrame) string {
	t.Helper()
	var id string
	if err := json.Unmarshal(f.Member, &id); err != nil || id == "" {
		t.Fatalf("tracked without a member id: %s", f.raw)
	}
	return id
}

// presenceEvents renders a watcher's roster, join and leave frames of sub "p" as
// "roster id subject meta; ...", "join id subject meta", "leave id subject", with "-" for a
// member without meta.
func presenceEvents(frames []rawFrame) []string {
	meta := func(m member) string {
		if len(m.Meta) == 0 {
			return "-"
		}
		return string(m.Meta)
	}
	var out []string
	for _, f := range frames {
		if f.Sub != "p" {
			continue
		}
		switch f.Type {
		case "roster":
			var ms []string
			for _, m := range f.Members {
				ms = append(ms, fmt.Sprintf("%s %s %s", m.ID, m.Subject, meta(m)))
			}
			out = append(out, "roster "+strings.Join(ms, "; "))
		case "join":
			m := f.memberOf()
			out = append(out, fmt.Sprintf("join %s %s %s", m.ID, m.Subject, meta(m)))
		case "leave":
			m := f.memberOf()
			out = append(out, fmt.Sprintf("leave %s %s", m.ID, m.Subject))
		}
	}
	return out
}

// waitPresence waits until w's presence events begin with want's, failing at once on one that
// differs.
func waitPresence(t *testing.T, w *rawConn, want []string) {
	t.Helper()
	waitFor(t, deliveredWithin, func() (bool, string) {
		got := presenceEvents(w.list())
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("%s: presence event %d is %q, want %q (all: %q)", w.who, i, got[i], want[i], got)
			}
		}
		return len(got) >= len(want), fmt.Sprintf("%s to see presence %q; it has %q", w.who, want, got)
	})
}

// TestClusterPresenceTakeover: members tracked on nodes 1 and 2, a presence subscriber on
// node 3. Node 1, started first and so the first to take any lease a first comer takes, is
// killed with SIGKILL: its member expires and its leave reaches the subscriber, announced by
// a survivor. Then node 2: whoever took over is gone too, and node 3 alone must announce it.
func TestClusterPresenceTakeover(t *testing.T) {
	redisVariants(t, testPresenceTakeover)
}

func testPresenceTakeover(t *testing.T, redisURL string) {
	// A short TTL so a dead node's members expire within the test; long enough that a loaded
	// machine's live nodes keep theirs (they renew every ttl/3).
	c := startCluster(t, clusterConfig{RedisURL: redisURL, Staggered: true, Env: []string{"HERALD_PRESENCE_TTL=3s"}})
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	channel := "room-" + randHex(4) + "/lobby"
	alice := c.dialRaw(t, n1, "alice on node1", "alice")
	aliceID := trackedID(t, alice.request(t, map[string]any{"type": "track", "channel": channel}, "tracked"))
	bob := c.dialRaw(t, n2, "bob on node2", "bob")
	bobID := trackedID(t, bob.request(t, map[string]any{"type": "track", "channel": channel}, "tracked"))
	w := c.dialRaw(t, n3, "watcher on node3", "w")
	w.request(t, map[string]any{"type": "subscribe", "sub": "p", "channel": channel, "presence": true}, "subscribed")
	members := []string{aliceID + " alice -", bobID + " bob -"}
	slices.Sort(members)
	want := []string{"roster " + strings.Join(members, "; ")}
	waitPresence(t, w, want)

	n1.kill(t)
	want = append(want, "leave "+aliceID+" alice")
	waitPresence(t, w, want)
	n2.kill(t)
	want = append(want, "leave "+bobID+" bob")
	waitPresence(t, w, want)
	w.request(t, map[string]any{"type": "ping"}, "pong")
	if got := presenceEvents(w.list()); !slices.Equal(got, want) {
		t.Errorf("%s: presence %q, want %q", w.who, got, want)
	}
}

// TestClusterRedisRestart: Redis (the test's own, kept in memory only) is killed and restarted
// empty while publications and rows stream to subscribers on a node that neither publishes nor
// replicates. Every node's /readyz turns 503 during the outage and 200 after; each subscription
// gets an upstream_gap resync before anything produced after the restart, and then that, never
// silence; nothing is delivered twice or out of order.
func TestClusterRedisRestart(t *testing.T) {
	db := testenv.NewDatabase(t)
	testenv.Exec(t, db, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	rs := startRedisServer(t)
	c := startCluster(t, clusterConfig{RedisURL: rs.url(), Database: db, Tables: []string{"public.items"}, Env: bigLanes})
	rep := c.replicator(t, nodeReadyWithin)
	others := c.others(rep)
	sn, pn := others[0], others[1]
	t.Logf("replicator %s, subscribers on %s, publisher on %s", rep.name, sn.name, pn.name)
	channel := "rr-" + randHex(4) + "/room"

	chConn := c.dial(t, sn, "watcher")
	rec := record("channel subscriber on "+sn.name, chConn)
	subscribe(t, rec.who, chConn, client.Subscription{Sub: "ch", Channel: channel})
	rowConn := c.dial(t, sn, "rows")
	subscribe(t, "table subscriber on "+sn.name, rowConn, client.Subscription{Sub: "items", Table: "public.items"})
	rows := follow(rowConn, nil)

	l := newLedger()
	var seq struct {
		sync.Mutex
		n int // guarded by the mutex: the publications attempted
	}
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; ; i++ {
			select {
			case <-stopPub:
				return
			default:
			}
			seq.Lock()
			seq.n = i + 1
			seq.Unlock()
			key := fmt.Sprintf("m%06d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			pos, err := c.publishAPI(ctx, pn, channel, keyData(key))
			cancel()
			l.note("api@"+pn.name, key, pos, err)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	stopped := false
	defer func() {
		if !stopped {
			close(stopPub)
			<-pubDone
		}
	}()
	w := startWriter(t, db)
	wStopped := false
	defer func() {
		if !wStopped {
			close(w.stop)
			<-w.done
		}
	}()
	messages := func() int {
		n := 0
		for _, f := range rec.of("ch") {
			if _, ok := f.(*client.Message); ok {
				n++
			}
		}
		return n
	}
	waitFor(t, deliveredWithin, func() (bool, string) {
		return messages() >= 100 && rows.lastID() >= 300, fmt.Sprintf("100 messages and 300 rows before the outage; the subscribers have %d and row %d", messages(), rows.lastID())
	})

	rs.stop()
	t.Log("redis-server killed")
	for _, n := range c.nodes {
		t.Logf("%s during the outage: /readyz %s", n.name, n.waitReadyz(t, deliveredWithin, 503))
	}
	rs.start(t)
	t.Log("redis-server restarted, empty")
	for _, n := range c.nodes {
		n.waitReady(t, nodeReadyWithin)
	}
	seq.Lock()
	mark := seq.n // publications numbered from mark on were made once every node was ready again
	seq.Unlock()
	rowMark := int(w.committed.Load())
	afterKey := func(k string) bool {
		i, err := strconv.Atoi(strings.TrimPrefix(k, "m"))
		return err == nil && i >= mark
	}
	waitFor(t, deliveredWithin, func() (bool, string) {
		acked, _, _ := l.snapshot()
		after := 0
		for k := range acked {
			if afterKey(k) {
				after++
			}
		}
		return after >= 50 && int(w.committed.Load()) >= rowMark+300,
			fmt.Sprintf("50 publications and 300 rows after the restart; %d and %d so far", after, int(w.committed.Load())-rowMark)
	})
	close(stopPub)
	<-pubDone
	stopped = true
	final := w.end(t)
	wStopped = true
	lasts := l.lasts()
	waitFor(t, deliveredWithin, func() (bool, string) {
		f := rec.of("ch")
		return reachedAll(f, lasts) && rows.lastID() >= final,
			fmt.Sprintf("the subscribers to receive up to %v and row %d; the channel's has %s (reading ended: %v), the table's row %d (reading: %v)",
				lasts, final, describeFrames(f), rec.ended(), rows.lastID(), rows.reading())
	})

	frames := rec.of("ch")
	rep2 := checkChannel(t, rec.who, frames, l)
	firstGap, firstAfter := -1, -1
	for i, f := range frames {
		switch f := f.(type) {
		case *client.Resync:
			// upstream_gap: items lost between nodes; stream_reset: Redis came back without the
			// channel's stream, so it has a new epoch and the old one's rest is gone.
			if (f.Reason == "upstream_gap" || f.Reason == "stream_reset") && firstGap < 0 {
				firstGap = i
			}
		case *client.Message:
			if afterKey(keyOf(f)) && firstAfter < 0 {
				firstAfter = i
			}
		}
	}
	switch {
	case firstGap < 0:
		t.Errorf("%s: no upstream_gap or stream_reset resync across the Redis restart (resyncs: %s): silence where items may be lost", rec.who, describeResyncs(rep2.resyncs))
	case firstAfter < 0:
		t.Errorf("%s: no publication made after the restart arrived: silence", rec.who)
	case firstAfter < firstGap:
		t.Errorf("%s: the first resync (frame %d) comes after a publication made after the restart (frame %d)", rec.who, firstGap, firstAfter)
	}
	acked, _, _ := l.snapshot()
	for _, p := range lasts {
		if !slices.ContainsFunc(frames, func(f client.Frame) bool { m, ok := f.(*client.Message); return ok && m.Pos == p }) {
			t.Errorf("%s: the last publication, at %v, made after the restart, did not arrive", rec.who, p)
		}
	}
	t.Logf("%s: %d publications acked, %d delivered, %d covered", rec.who, len(acked), rep2.delivered, rep2.covered)

	list := rows.list()
	resyncs := checkRows(t, "table subscriber on "+sn.name, list, final)
	if !slices.ContainsFunc(resyncs, func(r *client.Resync) bool { return r.Reason == "upstream_gap" }) {
		t.Errorf("table subscriber on %s: no upstream_gap resync across the Redis restart (resyncs: %s)", sn.name, describeResyncs(resyncs))
	}
	for i, g := range list {
		if g.resync != nil && g.resync.Reason == "upstream_gap" {
			break
		}
		if g.resync == nil && g.id > rowMark {
			t.Errorf("table subscriber on %s: frame %d, row %d, committed after the restart, came before any upstream_gap resync", sn.name, i, g.id)
			break
		}
	}
	if v, _ := sn.mustMetrics(t).sum("herald_cluster_gaps_total", nil); v == 0 {
		t.Errorf("%s counted no herald_cluster_gaps_total across the Redis restart", sn.name)
	}
}

// TestClusterSSECommandElsewhere: an SSE stream held by node 1, its commands posted to nodes 2
// and 3, as a load balancer that does not pin requests sends them. Each is handed to node 1:
// its reply arrives on the stream, in order with the data; a session no node holds is
// not_found, and a command with another identity's token forbidden, wherever it is posted.
func TestClusterSSECommandElsewhere(t *testing.T) {
	withOneNode(t, testSSECommandElsewhere)
}

func testSSECommandElsewhere(t *testing.T, redisURL string, nodes int) {
	c := startCluster(t, clusterConfig{Nodes: nodes, RedisURL: redisURL})
	n1, n2, n3 := c.at(1), c.at(2), c.at(3)
	s := c.openSSE(t, n1, "stream on node1", "alice")
	channel := "sse-" + randHex(4) + "/room"

	post := func(n *node, subject, frame string, want int, wantCode string) {
		t.Helper()
		code, body := c.command(t, n, s.session, subject, frame)
		if code != want || wantCode != "" && !strings.Contains(body, `"code":"`+wantCode+`"`) {
			t.Fatalf("POST %s to %s as %s: %d %s, want %d %s", frame, n.name, subject, code, body, want, wantCode)
		}
	}
	if code, body := c.command(t, n2, "s"+randHex(16), "alice", `{"type":"ping","id":"x"}`); code != 404 || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("a command for a session no node holds, on node2: %d %s, want 404 not_found", code, body)
	}
	post(n2, "alice", `{"type":"subscribe","id":"s1","sub":"c","channel":"`+channel+`"}`, 202, "")
	i, _ := s.waitFrame(t, 0, "subscribed s1", func(f rawFrame) bool { return f.Type == "subscribed" && f.ID == "s1" })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pos, err := c.publishAPI(ctx, n3, channel, keyData("k1"))
	if err != nil {
		t.Fatal(err)
	}
	i, m := s.waitFrame(t, i, "the message published on node3", func(f rawFrame) bool { return f.Type == "message" && f.Sub == "c" })
	if m.Pos != pos || !strings.Contains(string(m.Data), `"k1"`) {
		t.Errorf("message %s, want k1 at %v", m.raw, pos)
	}
	post(n3, "alice", `{"type":"ping","id":"p1"}`, 202, "")
	i, _ = s.waitFrame(t, i, "pong p1", func(f rawFrame) bool { return f.Type == "pong" && f.ID == "p1" })
	post(n2, "alice", `{"type":"publish","id":"pub1","channel":"`+channel+`","data":{"k":"k2"}}`, 202, "")
	s.waitFrame(t, i, "published pub1", func(f rawFrame) bool { return f.Type == "published" && f.ID == "pub1" })
	s.waitFrame(t, i, "the message published through node2", func(f rawFrame) bool {
		return f.Type == "message" && strings.Contains(string(f.Data), `"k2"`)
	})
	post(n2, "mallory", `{"type":"ping","id":"p2"}`, 403, "forbidden")
	post(n3, "alice", `{"type":"unsubscribe","id":"u1","sub":"c"}`, 202, "")
	s.waitFrame(t, i, "unsubscribed u1", func(f rawFrame) bool { return f.Type == "unsubscribed" && f.ID == "u1" })
}

// anyOf returns one entry of m, for a message.
func anyOf(m map[string]error) string {
	for k, v := range m {
		return fmt.Sprintf("%s: %v", k, v)
	}
	return ""
}
