package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/durable"
)

// durableConfig is baseConfig with short leases, so retries happen within a test.
func durableConfig(lim durable.Limits) Config {
	cfg := baseConfig()
	if lim.Lease == 0 {
		lim.Lease = time.Hour // a test that wants expiry sets it
	}
	cfg.Durable = lim
	cfg.DurableTick = 10 * time.Millisecond
	return cfg
}

// bind subscribes c to the identity's durable subscription sub on channel.
func (c *client) bind(id, sub, channel, mode string) map[string]any {
	c.t.Helper()
	extra := `"mode":"single"`
	if mode == "broadcast" {
		extra = `"durable":true`
	}
	c.send(fmt.Sprintf(`{"type":"subscribe","id":%q,"sub":%q,"channel":%q,%s}`, id, sub, channel, extra))
	m := c.expect("subscribed")
	if m["id"] != id || m["sub"] != sub {
		c.t.Fatalf("subscribed %v, want id %s sub %s", m, id, sub)
	}
	return m
}

// message reads the next frame, a message of sub, and returns its offset.
func (c *client) message(sub string) uint64 {
	c.t.Helper()
	m := c.expect("message")
	if m["sub"] != sub {
		c.t.Fatalf("message %v, want sub %s", m, sub)
	}
	return uint64(m["pos"].(map[string]any)["offset"].(float64))
}

// ack acks offset off of sub, in the epoch the published frame pub gave.
func (c *client) ack(id, sub string, pub map[string]any, off uint64) {
	c.t.Helper()
	epoch := pub["pos"].(map[string]any)["epoch"].(string)
	c.send(fmt.Sprintf(`{"type":"ack","id":%q,"sub":%q,"pos":{"epoch":%q,"offset":%d}}`, id, sub, epoch, off))
}

// quiet checks that nothing but the pong answering a ping arrives: the requests before it
// were answered by nothing.
func (c *client) quiet(id string) {
	c.t.Helper()
	c.send(`{"type":"ping","id":"` + id + `"}`)
	if m := c.expect("pong"); m["id"] != id {
		c.t.Fatalf("pong %v, want id %s", m, id)
	}
}

// TestDurableSingleConnectionLostMidLease: a single subscription's message goes to the most
// recently bound connection; that connection is lost before it acks, and the message goes to
// the other at once, which settles it.
func TestDurableSingleConnectionLostMidLease(t *testing.T) {
	r := start(t, durableConfig(durable.Limits{}))
	a, _ := connect(t, r)
	b, _ := connect(t, r)
	start := a.bind("1", "jobs", "jobs/eu", "single")
	if start["pos"] == nil {
		t.Fatalf("subscribed %v has no pos", start)
	}
	b.bind("1", "jobs", "jobs/eu", "single")
	pub := publish(t, r, "jobs/eu", `{"job":1}`)
	if got := b.message("jobs"); got != offsetOf(t, pub) {
		t.Fatalf("b got offset %d, want %d", got, offsetOf(t, pub))
	}
	_ = b.c.CloseNow() // lost mid-lease
	if got := a.message("jobs"); got != offsetOf(t, pub) {
		t.Fatalf("a got offset %d, want the retried %d", got, offsetOf(t, pub))
	}
	a.ack("2", "jobs", pub, offsetOf(t, pub))
	a.quiet("p")
	// Settled: a later message is the next one, not the first again.
	pub2 := publish(t, r, "jobs/eu", `{"job":2}`)
	if got := a.message("jobs"); got != offsetOf(t, pub2) {
		t.Fatalf("a got offset %d, want %d", got, offsetOf(t, pub2))
	}
	if st := r.srv.durable.Stats(); st.Acked != 1 || st.Retried != 1 || st.Delivered != 3 {
		t.Errorf("stats %+v, want 1 ack, 1 retry, 3 deliveries", st)
	}
}

// TestDurableAcks: an ack sent again is a success again; an ack of another connection's
// message, of a position never delivered, or of a broadcast subscription is not_found; an ack
// answers nothing on success.
func TestDurableAcks(t *testing.T) {
	r := start(t, durableConfig(durable.Limits{MaxInFlight: 1}))
	a, _ := connect(t, r)
	b, _ := connect(t, r)
	a.bind("1", "jobs", "jobs/eu", "single")
	b.bind("1", "jobs", "jobs/eu", "single")
	p1 := publish(t, r, "jobs/eu", `1`)
	p2 := publish(t, r, "jobs/eu", `2`)
	// One each: b is the most recent, and holds one at most.
	if got := b.message("jobs"); got != offsetOf(t, p1) {
		t.Fatalf("b got %d, want %d", got, offsetOf(t, p1))
	}
	if got := a.message("jobs"); got != offsetOf(t, p2) {
		t.Fatalf("a got %d, want %d", got, offsetOf(t, p2))
	}
	a.ack("k1", "jobs", p1, offsetOf(t, p1)) // b's
	if m := a.expectError("not_found", "k1"); m["field"] != "pos" {
		t.Errorf("foreign ack: %v, want field pos", m)
	}
	b.ack("k2", "jobs", p1, offsetOf(t, p1))
	b.ack("k3", "jobs", p1, offsetOf(t, p1)) // again
	b.quiet("p1")
	a.ack("k4", "jobs", p1, offsetOf(t, p1)) // settled by b
	a.expectError("not_found", "k4")
	a.ack("k5", "jobs", p1, offsetOf(t, p2)+7) // never delivered
	a.expectError("not_found", "k5")
	a.ack("k6", "nothing", p1, 1)
	a.expectError("not_found", "k6")
	a.bind("2", "feed", "news", "broadcast")
	p3 := publish(t, r, "news", `3`)
	if got := a.message("feed"); got != offsetOf(t, p3) {
		t.Fatalf("a got %d, want %d", got, offsetOf(t, p3))
	}
	a.ack("k7", "feed", p3, offsetOf(t, p3))
	a.expectError("not_found", "k7")
	a.ack("k8", "jobs", p2, offsetOf(t, p2))
	a.quiet("p2")
}

// TestDurableLeaseExpiryParks: a message nobody acks goes to the next connection when its
// lease expires, and after max_attempts deliveries it is parked: a parked resync naming it
// goes to every bound connection.
func TestDurableLeaseExpiryParks(t *testing.T) {
	r := start(t, durableConfig(durable.Limits{Lease: 200 * time.Millisecond, MaxAttempts: 2}))
	a, _ := connect(t, r)
	b, _ := connect(t, r)
	a.bind("1", "jobs", "jobs/eu", "single")
	b.bind("1", "jobs", "jobs/eu", "single")
	pub := publish(t, r, "jobs/eu", `1`)
	off := offsetOf(t, pub)
	if got := b.message("jobs"); got != off {
		t.Fatalf("b got %d, want %d", got, off)
	}
	if got := a.message("jobs"); got != off {
		t.Fatalf("after b's lease expired, a got %d, want %d", got, off)
	}
	for _, c := range []*client{a, b} {
		m := c.expect("resync")
		first, last := m["first"].(map[string]any), m["last"].(map[string]any)
		if m["reason"] != "parked" || m["lost"] != 1.0 || first["offset"] != float64(off) || last["offset"] != float64(off) {
			t.Fatalf("resync %v, want parked, first = last = %d, lost 1", m, off)
		}
	}
	// Parked: acking it now finds nothing.
	a.ack("k", "jobs", pub, off)
	a.expectError("not_found", "k")
	if st := r.srv.durable.Stats(); st.Parked != 1 || st.Retried != 1 {
		t.Errorf("stats %+v, want 1 parked, 1 retry", st)
	}
}

// TestDurableQueuedWhileAway: messages published while none of the holder's connections is
// bound wait in the queue; past max_items the oldest are shed, and a connection that binds
// later gets one queue_full resync with their exact range, then the rest.
func TestDurableQueuedWhileAway(t *testing.T) {
	r := start(t, durableConfig(durable.Limits{MaxItems: 3}))
	a, _ := connect(t, r)
	a.bind("1", "feed", "news", "broadcast")
	a.send(`{"type":"unsubscribe","id":"2","sub":"feed"}`)
	a.expect("unsubscribed")
	var pubs []map[string]any
	for i := 0; i < 5; i++ {
		pubs = append(pubs, publish(t, r, "news", fmt.Sprint(i)))
	}
	// The worker appends them; a bind before it has sees them as they come. The depth is 3
	// from the third on, so wait for the two it sheds: then all five are in.
	deadline := time.Now().Add(5 * time.Second)
	for st := r.srv.durable.Stats(); st.Depth != 3 || st.Dropped != 2; st = r.srv.durable.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %d with %d dropped, want 3 with 2 dropped", st.Depth, st.Dropped)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c, _ := connect(t, r)
	c.bind("1", "feed", "news", "broadcast")
	m := c.expect("resync")
	first, last := m["first"].(map[string]any), m["last"].(map[string]any)
	if m["reason"] != "queue_full" || m["lost"] != 2.0 || first["offset"] != float64(offsetOf(t, pubs[0])) || last["offset"] != float64(offsetOf(t, pubs[1])) {
		t.Fatalf("resync %v, want queue_full of the first two", m)
	}
	for _, p := range pubs[2:] {
		if got := c.message("feed"); got != offsetOf(t, p) {
			t.Fatalf("got %d, want %d", got, offsetOf(t, p))
		}
	}
	if st := r.srv.durable.Stats(); st.Dropped != 2 {
		t.Errorf("stats %+v, want 2 dropped", st)
	}
}

// TestDurableBroadcastToEveryConnection: a durable broadcast's message goes to every bound
// connection of the holder, and not to another identity's durable subscription of the same
// name.
func TestDurableBroadcastToEveryConnection(t *testing.T) {
	r := start(t, durableConfig(durable.Limits{}))
	a, _ := connect(t, r)
	b, _ := connect(t, r)
	other := dial(t, r)
	other.send(`{"type":"connect","id":"c1","token":"` + token(t, "user-2", time.Now().Add(time.Hour)) + `"}`)
	other.expect("welcome")
	a.bind("1", "feed", "news", "broadcast")
	b.bind("1", "feed", "news", "broadcast")
	// Another identity: the same name is its own subscription, on another channel.
	other.bind("1", "feed", "sport", "broadcast")
	pub := publish(t, r, "news", `"hi"`)
	for _, c := range []*client{a, b} {
		if got := c.message("feed"); got != offsetOf(t, pub) {
			t.Fatalf("got %d, want %d", got, offsetOf(t, pub))
		}
	}
	other.quiet("p")
}

// TestDurableDefinitionAndForget: the same name with another definition is durable_conflict;
// unsubscribe with forget deletes the subscription, and another bound connection is told; a
// durable subscription to a table is not_implemented; an anonymous connection cannot hold one.
func TestDurableDefinitionAndForget(t *testing.T) {
	cfg := durableConfig(durable.Limits{})
	cfg.Auth.AllowAnonymous = true
	r := start(t, cfg)
	a, _ := connect(t, r)
	b, _ := connect(t, r)
	a.bind("1", "jobs", "jobs/eu", "single")
	b.send(`{"type":"subscribe","id":"2","sub":"jobs","channel":"jobs/us","mode":"single"}`)
	b.expectError("durable_conflict", "2")
	b.send(`{"type":"subscribe","id":"3","sub":"jobs","channel":"jobs/eu","durable":true}`)
	b.expectError("durable_conflict", "3")
	b.bind("4", "jobs", "jobs/eu", "single")
	a.send(`{"type":"unsubscribe","id":"5","sub":"jobs","forget":true}`)
	if m := a.expect("unsubscribed"); m["id"] != "5" {
		t.Fatalf("unsubscribed %v", m)
	}
	if m := b.expect("unsubscribed"); m["id"] != nil || m["code"] != "not_found" || m["sub"] != "jobs" {
		t.Fatalf("b: %v, want an unprompted unsubscribed, not_found", m)
	}
	a.send(`{"type":"unsubscribe","id":"6","sub":"jobs","forget":true}`)
	a.expectError("not_found", "6")
	// Gone: the name is free for another definition.
	b.bind("7", "jobs", "jobs/us", "single")
	a.send(`{"type":"subscribe","id":"8","sub":"t","table":"public.items","durable":true}`)
	a.expectError("not_implemented", "8")
	anon := dial(t, r)
	anon.send(`{"type":"connect","id":"c1"}`)
	anon.expect("welcome")
	anon.send(`{"type":"subscribe","id":"9","sub":"jobs","channel":"jobs/eu","mode":"single"}`)
	anon.expectError("forbidden", "9")
}

// TestDurableAcrossNodes: three nodes share Redis. A single subscription's message goes to the
// most recently bound connection, on another node than the one that feeds it; that connection
// is lost mid-lease and the message goes to one on a third node, which acks it there; a
// duplicate ack is a success, another node's connection's ack not_found. Then the node that
// feeds it stops: another takes it over, and a message published after reaches a connection.
func TestDurableAcrossNodes(t *testing.T) {
	cfgs := nodesConfig(t, 3)
	nodes := make([]*running, len(cfgs))
	for i, cfg := range cfgs {
		cfg.Durable = durable.Limits{Lease: time.Hour, ConnTTL: time.Hour}
		cfg.DurableTick = 20 * time.Millisecond
		cfg.DurableOwnerTTL = 300 * time.Millisecond
		nodes[i] = start(t, cfg)
	}
	a, _ := connect(t, nodes[0])
	c, _ := connect(t, nodes[2])
	b, _ := connect(t, nodes[1])
	a.bind("1", "jobs", "jobs/eu", "single") // node 1 feeds it: it bound first
	c.bind("1", "jobs", "jobs/eu", "single")
	b.bind("1", "jobs", "jobs/eu", "single")
	pub := publish(t, nodes[2], "jobs/eu", `{"job":1}`)
	off := offsetOf(t, pub)
	if got := b.message("jobs"); got != off {
		t.Fatalf("b (node 2) got %d, want %d", got, off)
	}
	_ = b.c.CloseNow()
	if got := c.message("jobs"); got != off {
		t.Fatalf("c (node 3) got %d, want the retried %d", got, off)
	}
	c.ack("2", "jobs", pub, off)
	c.ack("3", "jobs", pub, off)
	c.quiet("p")
	a.ack("4", "jobs", pub, off)
	a.expectError("not_found", "4")

	// Node 1 stops; node 3 takes the subscription over and feeds it from where node 1 left.
	nodes[0].halt(t)
	pub2 := publish(t, nodes[1], "jobs/eu", `{"job":2}`)
	if got := c.message("jobs"); got != offsetOf(t, pub2) {
		t.Fatalf("c got %d, want %d", got, offsetOf(t, pub2))
	}
	c.ack("5", "jobs", pub2, offsetOf(t, pub2))
	c.quiet("p2")
}

// TestDurableOverSSE: an SSE stream's URL declares a single subscription; its messages carry
// event ids like any URL subscription's, an ack posted as a command settles one, and a
// reconnect with Last-Event-ID binds the same durable subscription again, whose queue kept
// what was published meanwhile.
func TestDurableOverSSE(t *testing.T) {
	r := start(t, durableConfig(durable.Limits{}))
	url := r.url + "/v1/sse?sub=jobs&channel=jobs/eu&mode=single"
	c, resp := openSSE(t, url, bearerHeader(t, "user-1"))
	if c == nil {
		t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
	}
	session := c.next("welcome").frame["session"].(string)
	c.next("subscribed")
	pub := publish(t, r, "jobs/eu", `1`)
	ev := c.next("message")
	if !strings.HasPrefix(ev.id, "jobs ") {
		t.Errorf("message event id %q, want \"jobs <pos>\"", ev.id)
	}
	epoch := pub["pos"].(map[string]any)["epoch"].(string)
	cmd := r.url + "/v1/sse/" + session
	tok := token(t, "user-1", time.Now().Add(time.Hour))
	ack := fmt.Sprintf(`{"type":"ack","id":"a","sub":"jobs","pos":{"epoch":%q,"offset":%d}}`, epoch, offsetOf(t, pub))
	if code, _ := postJSON(t, cmd, tok, ack); code != 202 {
		t.Fatalf("ack command: %d", code)
	}
	if code, _ := postJSON(t, cmd, tok, `{"type":"ping","id":"p"}`); code != 202 {
		t.Fatalf("ping command: %d", code)
	}
	c.next("pong") // the ack answered nothing
	c.cancel()

	pub2 := publish(t, r, "jobs/eu", `2`)
	h := bearerHeader(t, "user-1")
	h.Set("Last-Event-ID", ev.id)
	c2, resp := openSSE(t, url, h)
	if c2 == nil {
		t.Fatalf("GET /v1/sse again: %d", resp.StatusCode)
	}
	c2.next("welcome")
	c2.next("subscribed")
	if got := c2.next("message"); offsetOf(t, got.frame) != offsetOf(t, pub2) {
		t.Fatalf("after the reconnect: %v, want offset %d", got.frame, offsetOf(t, pub2))
	}
}
