package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/cluster"
	"github.com/heraldrt/herald/internal/testenv"
)

// nodesConfig returns configs for n nodes sharing one Redis under a fresh prefix.
func nodesConfig(t *testing.T, n int) []Config {
	t.Helper()
	url := testenv.RedisURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "herald-test-" + hex.EncodeToString(b[:])
	out := make([]Config, n)
	for i := range out {
		cfg := baseConfig()
		cfg.Session.MaxSubscriptions = 50
		cfg.Fanout.OrderWait = 5 * time.Second // a loaded test machine: a hole must close, not time out
		cfg.Cluster = ClusterConfig{RedisURL: url, RedisPrefix: prefix, NodeID: fmt.Sprintf("n%d", i+1)}
		out[i] = cfg
	}
	return out
}

func channelSub(c *client, sub, pattern string) string {
	c.t.Helper()
	c.send(`{"type":"subscribe","id":"` + sub + `","sub":"` + sub + `","channel":"` + pattern + `"}`)
	m := c.expect("subscribed")
	return fmt.Sprint(m["pos"])
}

// messages reads message frames from c until each of subs has n, and fails on a resync:
// every publication must arrive. It returns each sub's positions as epoch:offset.
func messages(t *testing.T, c *client, n int, subs ...string) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	done := 0
	for done < len(subs) {
		m, err := c.read(20 * time.Second)
		if err != nil {
			t.Fatalf("waiting for %d messages on each of %v: %v; so far %v", n, subs, err, got)
		}
		sub, _ := m["sub"].(string)
		if m["type"] != "message" {
			t.Fatalf("on %s, after %v: unexpected %v", sub, got[sub], m)
		}
		p, _ := m["pos"].(map[string]any)
		got[sub] = append(got[sub], fmt.Sprintf("%v:%v", p["epoch"], p["offset"]))
		if len(got[sub]) == n {
			done++
		}
	}
	return got
}

func channelPos(t *testing.T, pos string) (epoch string, off int) {
	t.Helper()
	e, o, ok := strings.Cut(pos, ":")
	if !ok {
		t.Fatalf("position %q is not a channel position", pos)
	}
	if _, err := fmt.Sscan(o, &off); err != nil {
		t.Fatalf("position %q: %v", pos, err)
	}
	return e, off
}

// TestChannelsAcrossNodes: three nodes share Redis. A subscriber on each gets every
// publication to its channel, whichever node took it, once, with one position everywhere and
// offsets in order, while all three publish to it at once.
func TestChannelsAcrossNodes(t *testing.T) {
	cfgs := nodesConfig(t, 3)
	nodes := make([]*running, len(cfgs))
	subs := make([]*client, len(cfgs))
	for i, cfg := range cfgs {
		nodes[i] = start(t, cfg)
	}
	heads := map[string]bool{}
	for i, r := range nodes {
		subs[i], _ = connect(t, r)
		heads[channelSub(subs[i], "s", "rooms/1")] = true
		// A pattern subscription on the same channel too.
		channelSub(subs[i], "p", "rooms/*")
	}
	if len(heads) != 1 {
		t.Fatalf("the nodes gave the channel different heads: %v", heads)
	}
	const each = 40
	var wg sync.WaitGroup
	for _, r := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				publish(t, r, "rooms/1", fmt.Sprint(i))
			}
		}()
	}
	wg.Wait()
	var first []string
	for i, c := range subs {
		all := messages(t, c, 3*each, "s", "p")
		for _, sub := range []string{"s", "p"} {
			got := all[sub]
			epoch, _ := channelPos(t, got[0])
			for k, pos := range got {
				e, off := channelPos(t, pos)
				if e != epoch || off != k+1 {
					t.Fatalf("node %d sub %s: message %d at %s, want %s:%d (every offset once, in order): %v", i+1, sub, k, pos, epoch, k+1, got)
				}
			}
			if first == nil {
				first = got
			} else if fmt.Sprint(got) != fmt.Sprint(first) {
				t.Fatalf("node %d sub %s saw other positions than node 1: %v vs %v", i+1, sub, got, first)
			}
		}
	}
}

// TestNodeIDsAreTimeOrdered: a node given no cluster.node_id names itself with a UUIDv7, so
// that one started later sorts after it and the longest-lived node leads each presence sweep.
func TestNodeIDsAreTimeOrdered(t *testing.T) {
	cfgs := nodesConfig(t, 2)
	var ids []string
	for _, cfg := range cfgs {
		cfg.Cluster.NodeID = ""
		r := start(t, cfg)
		ids = append(ids, r.srv.peers.id)
		time.Sleep(2 * time.Millisecond) // the ids' clock is in milliseconds
	}
	uuid7 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, id := range ids {
		if !uuid7.MatchString(id) {
			t.Errorf("node id %q is not a UUIDv7", id)
		}
	}
	if ids[0] >= ids[1] {
		t.Errorf("the node started first is %q, the second %q: want the first to sort first", ids[0], ids[1])
	}
}

// TestIdentitySubscriptionLimit: redis.max_identity_subscriptions bounds one identity's
// subscriptions to a channel namespace across its connections and nodes, not per connection;
// one ended frees a place.
func TestIdentitySubscriptionLimit(t *testing.T) {
	cfgs := nodesConfig(t, 2)
	for i := range cfgs {
		cfgs[i].Cluster.MaxIdentitySubscriptions = 2
	}
	a, b := start(t, cfgs[0]), start(t, cfgs[1])
	ca, _ := connect(t, a)
	cb, _ := connect(t, b) // the same identity, on the other node
	channelSub(ca, "s1", "rooms/1")
	channelSub(cb, "s2", "rooms/2")
	cb.send(`{"type":"subscribe","id":"s3","sub":"s3","channel":"rooms/3"}`)
	if m := cb.expectError("too_many_subscriptions", "s3"); !strings.Contains(fmt.Sprint(m["message"]), "across all its connections") {
		t.Errorf("the refusal %v does not say the limit is the identity's", m)
	}
	ca.send(`{"type":"unsubscribe","id":"u1","sub":"s1"}`)
	ca.expect("unsubscribed")
	channelSub(cb, "s3", "rooms/3")
}

// TestChannelInterest: a node without a subscription to a channel receives nothing of it from
// the others.
func TestChannelInterest(t *testing.T) {
	cfgs := nodesConfig(t, 3)
	a, b, idle := start(t, cfgs[0]), start(t, cfgs[1]), start(t, cfgs[2])
	c, _ := connect(t, a)
	channelSub(c, "s", "solo/x")
	for i := 0; i < 20; i++ {
		publish(t, b, "solo/x", fmt.Sprint(i))
	}
	messages(t, c, 20, "s")
	if got := a.srv.peers.node.Stats().Received[cluster.KindChannel]; got != 20 {
		t.Errorf("the subscriber's node received %d publications from others, want 20", got)
	}
	if got := idle.srv.peers.node.Stats().Received[cluster.KindChannel]; got != 0 {
		t.Errorf("a node without subscribers received %d publications, want 0", got)
	}
	if got := b.srv.peers.node.Stats().Sent[cluster.KindChannel]; got != 20 {
		t.Errorf("the publishing node sent %d, want 20: one per publication and interested node", got)
	}
}

// TestTablesAcrossNodes: two nodes stream one database; one replicates, and a subscriber on
// either gets its changes, filtered, in commit order. The node without a subscription to a
// value receives no change of it, but a truncate reaches every node holding the table.
func TestTablesAcrossNodes(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL)
	cfgs := nodesConfig(t, 3)
	var nodes []*running
	for _, cfg := range cfgs {
		cfg.Changefeed = feedConfig(t, url)
		r := start(t, cfg)
		nodes = append(nodes, r)
	}
	for _, r := range nodes {
		waitReady(t, r)
	}
	var leader *running
	var followers []*running
	for _, r := range nodes {
		if r.srv.feed.Stats().Leader {
			leader = r
		} else {
			followers = append(followers, r)
		}
	}
	if leader == nil || len(followers) != 2 {
		t.Fatalf("want one replicator among three nodes")
	}
	all, _ := connect(t, followers[0])
	tableSub(all, "all", "", "")
	acme, _ := connect(t, followers[1])
	tableSub(acme, "acme", `{"eq":["org_id","acme"]}`, "")
	for i := 1; i <= 5; i++ {
		org := "acme"
		if i%2 == 0 {
			org = "other"
		}
		testenv.Exec(t, url, fmt.Sprintf(`INSERT INTO items (id, org_id) VALUES (%d, '%s')`, i, org))
	}
	testenv.Exec(t, url, `UPDATE items SET title = 't' WHERE id = 1`, `DELETE FROM items WHERE id = 2`, `TRUNCATE items`)
	want := map[string][]string{
		"all":  {"insert:1", "insert:2", "insert:3", "insert:4", "insert:5", "update:1", "delete:2", "truncate:"},
		"acme": {"insert:1", "insert:3", "insert:5", "update:1", "truncate:"}, // a truncate empties every filter's view
	}
	for c, sub := range map[*client]string{all: "all", acme: "acme"} {
		var got []string
		for len(got) < len(want[sub]) {
			m, err := c.read(20 * time.Second)
			if err != nil {
				t.Fatalf("%s: %v; so far %v", sub, err, got)
			}
			if m["type"] != "change" {
				t.Fatalf("%s: unexpected %v", sub, m)
			}
			id := ""
			for _, img := range []string{"row", "old"} {
				if r, ok := m[img].(map[string]any); ok && id == "" {
					id = fmt.Sprint(r["id"])
				}
			}
			got = append(got, fmt.Sprintf("%s:%s", m["op"], id))
		}
		if fmt.Sprint(got) != fmt.Sprint(want[sub]) {
			t.Errorf("%s got %v, want %v", sub, got, want[sub])
		}
	}
	// The acme node was sent only acme's changes and the truncate: 5 of the 8 went there, in 5
	// transactions.
	if got := followers[1].srv.peers.node.Stats().Received[cluster.KindTable]; got != 5 {
		t.Errorf("the filtered subscriber's node received %d transactions, want 5", got)
	}
}

// TestTablesAcrossNodesAfterTheIdentityDropped: a subscription on a follower pinning a column
// outside the key, made while the table was REPLICA IDENTITY FULL, still hears of a row
// leaving its filter once the identity is DEFAULT and the UPDATE no longer logs the old
// value: the change is routed to it by its unlogged token, and it is told to drop the row.
func TestTablesAcrossNodesAfterTheIdentityDropped(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	var nodes []*running
	for _, cfg := range nodesConfig(t, 2) {
		cfg.Changefeed = feedConfig(t, url)
		nodes = append(nodes, start(t, cfg))
	}
	for _, r := range nodes {
		waitReady(t, r)
	}
	follower := nodes[0]
	if follower.srv.feed.Stats().Leader {
		follower = nodes[1]
	}
	c, _ := connect(t, follower)
	tableSub(c, "acme", `{"eq":["org_id","acme"]}`, "")
	testenv.Exec(t, url, `ALTER TABLE items REPLICA IDENTITY DEFAULT`, `UPDATE items SET org_id = 'globex' WHERE id = 1`)
	m, err := c.read(20 * time.Second)
	if err != nil {
		t.Fatalf("after the row left the filter: %v; want it dropped", err)
	}
	if m["type"] != "change" || m["op"] != "leave" || fmt.Sprint(m["old"].(map[string]any)["id"]) != "1" {
		t.Errorf("after the row left the filter: %v, want a leave of row 1", m)
	}
}

// TestPresenceAndSSEAcrossNodes: a member tracked on one node is in the roster and the joins
// and leaves of a presence subscriber on another; and an SSE stream's commands may be posted
// to any node.
func TestPresenceAndSSEAcrossNodes(t *testing.T) {
	cfgs := nodesConfig(t, 2)
	a, b := start(t, cfgs[0]), start(t, cfgs[1])

	// bob's SSE stream is on a; his commands go to b, which hands them to a.
	bob, resp := openSSE(t, a.url+"/v1/sse", bearerHeader(t, "bob"))
	if bob == nil {
		t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
	}
	session, _ := bob.next("welcome").frame["session"].(string)
	if !strings.HasPrefix(session, "n1.") {
		t.Fatalf("session %q does not name its node n1", session)
	}
	bobTok := token(t, "bob", time.Now().Add(time.Hour))
	if code, m := postJSON(t, b.url+"/v1/sse/"+session, bobTok, `{"type":"subscribe","id":"s1","sub":"room","channel":"rooms/1","presence":true}`); code != 202 {
		t.Fatalf("a command posted to the other node: %d %v, want 202", code, m)
	}
	bob.next("subscribed")
	if ids := memberIDs(t, bob.next("roster").frame); len(ids) != 0 {
		t.Fatalf("roster %v, want none yet", ids)
	}

	alice := connectAs(t, b, "alice", nil)
	alice.send(`{"type":"track","id":"t1","channel":"rooms/1","meta":{"name":"Ada"}}`)
	aliceID, _ := alice.expect("tracked")["member"].(string)
	if mem := memberOf(t, bob.next("join").frame); mem["id"] != aliceID {
		t.Fatalf("join of %v on the other node, want alice's %s", mem, aliceID)
	}
	// A second subscriber on a, after the join: alice is in its roster.
	carol, carolResp := openSSE(t, a.url+"/v1/sse", bearerHeader(t, "carol"))
	if carol == nil {
		t.Fatalf("GET /v1/sse: %d", carolResp.StatusCode)
	}
	carolSession, _ := carol.next("welcome").frame["session"].(string)
	if code, m := postJSON(t, a.url+"/v1/sse/"+carolSession, token(t, "carol", time.Now().Add(time.Hour)), `{"type":"subscribe","id":"s1","sub":"room","channel":"rooms/1","presence":true}`); code != 202 {
		t.Fatalf("subscribe: %d %v", code, m)
	}
	carol.next("subscribed")
	if ids := memberIDs(t, carol.next("roster").frame); len(ids) != 1 || ids[0] != aliceID {
		t.Fatalf("roster on the other node %v, want alice's member", ids)
	}
	_ = alice.c.CloseNow()
	if mem := memberOf(t, bob.next("leave").frame); mem["id"] != aliceID {
		t.Fatalf("leave of %v on the other node, want alice's %s", mem, aliceID)
	}
}

// tableNodes starts two nodes streaming one new database with itemsDDL, edit changing each
// node's config first, and returns the replicator and the other node.
func tableNodes(t *testing.T, edit func(*Config)) (url string, leader, follower *running) {
	t.Helper()
	url = testenv.NewDatabase(t)
	testenv.Exec(t, url, itemsDDL)
	var nodes []*running
	for _, cfg := range nodesConfig(t, 2) {
		cfg.Changefeed = feedConfig(t, url)
		if edit != nil {
			edit(&cfg)
		}
		nodes = append(nodes, start(t, cfg))
	}
	for _, r := range nodes {
		waitReady(t, r)
	}
	for _, r := range nodes {
		if r.srv.feed.Stats().Leader {
			leader = r
		} else {
			follower = r
		}
	}
	if leader == nil || follower == nil {
		t.Fatalf("want one replicator of two nodes")
	}
	return url, leader, follower
}

// changeOf returns a change frame as "op:id", failing on any other frame.
func changeOf(t *testing.T, m map[string]any) string {
	t.Helper()
	if m["type"] != "change" {
		t.Fatalf("unexpected %v", m)
	}
	for _, img := range []string{"row", "old"} {
		if r, ok := m[img].(map[string]any); ok {
			return fmt.Sprintf("%s:%v", m["op"], r["id"])
		}
	}
	return fmt.Sprintf("%s:-", m["op"])
}

// TestTableResumeAcrossNodes: a subscriber that comes back on another node with the position
// of the last change it had gets, from the history the replicator keeps in Redis, the changes
// it missed through its filter (a row that left it comes as leave), in order, then live ones:
// no gap, no duplicate.
func TestTableResumeAcrossNodes(t *testing.T) {
	url, leader, follower := tableNodes(t, nil)
	// An unfiltered subscriber on the follower stays, to tell when the replicator has routed
	// (and so recorded and stamped) what is written while the other is away.
	watch, _ := connect(t, follower)
	tableSub(watch, "all", "", "")
	c, _ := connect(t, follower)
	tableSub(c, "acme", `{"eq":["org_id","acme"]}`, "")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	m := c.expect("change")
	last, _ := m["pos"].(string)
	if got := changeOf(t, m); got != "insert:1" {
		t.Fatalf("first change %s, want insert:1", got)
	}
	_ = c.c.CloseNow()

	// While it is away: an acme row in a transaction with another org's, an update that moves
	// row 1 out of its view, another org's row, and an acme row.
	testenv.Exec(t, url, `BEGIN; INSERT INTO items (id, org_id) VALUES (2, 'other'); INSERT INTO items (id, org_id) VALUES (3, 'acme'); COMMIT`)
	testenv.Exec(t, url, `UPDATE items SET org_id = 'other' WHERE id = 1`)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (4, 'other')`)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (5, 'acme')`)
	for seen := []string{}; len(seen) == 0 || seen[len(seen)-1] != "insert:5"; {
		seen = append(seen, changeOf(t, watch.expect("change")))
	}

	back, _ := connect(t, leader)
	back.send(`{"type":"subscribe","id":"acme","sub":"acme","table":"public.items","filter":{"eq":["org_id","acme"]},"from":"` + last + `"}`)
	if m := back.expect("subscribed"); m["pos"] != last {
		t.Fatalf("subscribed %v, want pos %s", m, last)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (6, 'acme')`)
	want := []string{"insert:3", "leave:1", "insert:5", "insert:6"}
	var got []string
	prev := last
	for len(got) < len(want) {
		m, err := back.read(20 * time.Second)
		if err != nil {
			t.Fatalf("waiting for %v: %v; so far %v", want, err, got)
		}
		got = append(got, changeOf(t, m))
		pos, _ := m["pos"].(string)
		if p, q := mustPos(t, pos), mustPos(t, prev); !after(p, q) {
			t.Fatalf("change at %s after %s: not in order (so far %v)", pos, prev, got)
		}
		prev = pos
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("resumed on the other node: %v, want %v", got, want)
	}
	// What a resume checks a head the node was only told of against: how far the slot has
	// confirmed, past the last change, from any node.
	last6 := mustPos(t, prev).LSN
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := follower.srv.schema.Confirmed(context.Background())
		if err == nil && c > last6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot's confirmed position, read on the follower: %s, %v; want past %s", c, err, last6)
		}
	}
}

// TestTableResumeAcrossNodesBeyondHistory: a from older than what a table's history in Redis
// still holds is a history_expired resync, then live changes.
func TestTableResumeAcrossNodesBeyondHistory(t *testing.T) {
	// Each table's history keeps its newest transaction alone.
	url, leader, follower := tableNodes(t, func(c *Config) { c.HistoryBytes = 1 })
	c, _ := connect(t, follower)
	tableSub(c, "all", "", "")
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	last, _ := c.expect("change")["pos"].(string)
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (2, 'acme')`, `INSERT INTO items (id, org_id) VALUES (3, 'acme')`)
	for _, want := range []string{"insert:2", "insert:3"} {
		if got := changeOf(t, c.expect("change")); got != want {
			t.Fatalf("live change %s, want %s", got, want)
		}
	}

	back, _ := connect(t, leader)
	back.send(`{"type":"subscribe","id":"all","sub":"all","table":"public.items","from":"` + last + `"}`)
	back.expect("subscribed")
	if m := back.expect("resync"); m["reason"] != "history_expired" {
		t.Fatalf("resync %v, want history_expired", m)
	}
	testenv.Exec(t, url, `INSERT INTO items (id, org_id) VALUES (4, 'acme')`)
	if got := changeOf(t, back.expect("change")); got != "insert:4" {
		t.Fatalf("change %s, want insert:4", got)
	}
}

// TestChannelResumeAcrossNodes: a client that received a channel's messages on node A and lost
// its connection comes back on node B from the last one it received, while the channel was
// published to on both nodes. It gets exactly what it missed, from the history the nodes share
// in Redis, then live messages taken on either node; from before the history, one resync.
func TestChannelResumeAcrossNodes(t *testing.T) {
	cfgs := nodesConfig(t, 2)
	for i := range cfgs {
		cfgs[i].Fanout.History = channel.HistoryConfig{Size: 5}
	}
	a, b := start(t, cfgs[0]), start(t, cfgs[1])
	posOf := func(m map[string]any) string {
		p := m["pos"].(map[string]any)
		return fmt.Sprintf("%v:%v", p["epoch"], p["offset"])
	}
	// A keeper on B holds the channel there, so B hands it on and starts a resumed
	// subscription after what it handed on.
	keeper, _ := connect(t, b)
	channelSub(keeper, "k", "room")

	c, _ := connect(t, a)
	channelSub(c, "s", "room")
	for i := 0; i < 3; i++ {
		publish(t, a, "room", fmt.Sprint(i))
	}
	last := messages(t, c, 3, "s")["s"][2]
	_ = c.c.CloseNow()
	var missed []string
	for i := 0; i < 4; i++ {
		missed = append(missed, posOf(publish(t, []*running{a, b}[i%2], "room", fmt.Sprint(10+i))))
	}
	messages(t, keeper, 7, "k") // B has handed on everything

	t.Run("within the history", func(t *testing.T) {
		c2, _ := connect(t, b)
		c2.send(`{"type":"subscribe","id":"s","sub":"s","channel":"room","from":"` + last + `"}`)
		if m := c2.expect("subscribed"); posOf(m) != last {
			t.Fatalf("subscribed at %v, want the from %s", m["pos"], last)
		}
		if got := messages(t, c2, 4, "s")["s"]; fmt.Sprint(got) != fmt.Sprint(missed) {
			t.Fatalf("replayed %v, want exactly the missed %v", got, missed)
		}
		live := posOf(publish(t, a, "room", "99"))
		if got := messages(t, c2, 1, "s")["s"]; got[0] != live {
			t.Fatalf("live after the replay: %v, want %s, published on A", got, live)
		}
		messages(t, keeper, 1, "k")
	})
	t.Run("beyond the history", func(t *testing.T) {
		epoch, _ := channelPos(t, last)
		head := posOf(publish(t, b, "room", "100"))
		_, headOff := channelPos(t, head)
		messages(t, keeper, 1, "k")
		c3, _ := connect(t, a)
		from := epoch + ":1"
		c3.send(`{"type":"subscribe","id":"s","sub":"s","channel":"room","from":"` + from + `"}`)
		c3.expect("subscribed")
		m := c3.expect("resync")
		first, _ := m["first"].(map[string]any)
		if m["reason"] != "history_expired" || fmt.Sprintf("%v:%v", first["epoch"], first["offset"]) != epoch+":2" ||
			posOf(map[string]any{"pos": m["last"]}) != head || m["lost"] != float64(headOff-1) {
			t.Fatalf("resync %v, want history_expired from %s:2 to %s, %d lost", m, epoch, head, headOff-1)
		}
	})
}

// TestSSEResumeAcrossNodes: a stream's reconnect reaches another node; that node fetches the
// stream's subscriptions from the node that kept them, and every one resumes after its
// position in the Last-Event-ID, with what was published meanwhile on either node.
func TestSSEResumeAcrossNodes(t *testing.T) {
	cfgs := nodesConfig(t, 2)
	for i := range cfgs {
		cfgs[i].Fanout.History = channel.HistoryConfig{Size: 10}
		cfgs[i].SSEResumeWindow = time.Minute
	}
	a, b := start(t, cfgs[0]), start(t, cfgs[1])
	tok := token(t, "u", time.Now().Add(time.Hour))

	c, resp := openSSE(t, a.url+"/v1/sse?sub=feed&channel=feed", bearerHeader(t, "u"))
	if c == nil {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	session := c.next("welcome").frame["session"].(string)
	c.next("subscribed")
	if code, m := postJSON(t, b.url+"/v1/sse/"+session, tok, `{"type":"subscribe","id":"1","sub":"inbox","channel":"inbox"}`); code != 202 {
		t.Fatalf("subscribe by a command posted to the other node: %d %v", code, m)
	}
	c.next("subscribed")
	publish(t, a, "feed", `1`)
	publish(t, b, "inbox", `1`)
	var last string
	for range 2 {
		last = c.next("message").id
	}
	if !strings.HasPrefix(last, "@"+session+" ") {
		t.Fatalf("last id %q does not name the stream", last)
	}
	c.cancel()
	publish(t, b, "feed", `2`)
	publish(t, a, "inbox", `2`)

	h := bearerHeader(t, "u")
	h.Set("Last-Event-ID", last)
	c2, resp := openSSE(t, b.url+"/v1/sse?sub=feed&channel=feed", h)
	if c2 == nil {
		t.Fatalf("GET on the other node: %d", resp.StatusCode)
	}
	c2.next("welcome")
	got := map[string][]string{}
	for len(got["feed"]) < 2 || len(got["inbox"]) < 2 {
		select {
		case ev, ok := <-c2.events:
			if !ok {
				t.Fatalf("stream ended; got %v", got)
			}
			sub, _ := ev.frame["sub"].(string)
			typ := fmt.Sprint(ev.frame["type"])
			if typ == "message" {
				typ += " " + fmt.Sprint(ev.frame["data"])
			}
			got[sub] = append(got[sub], typ)
		case <-time.After(10 * time.Second):
			t.Fatalf("resumed stream: got %v, want both subscriptions and message 2 on each", got)
		}
	}
	if fmt.Sprint(got["feed"]) != "[subscribed message 2]" || fmt.Sprint(got["inbox"]) != "[subscribed message 2]" {
		t.Errorf("resumed on the other node: %v, want each subscribed then message 2", got)
	}
}
