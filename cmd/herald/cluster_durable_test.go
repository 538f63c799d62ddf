package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// durableConn speaks herald.v1 frame by frame, for what the Go client does not offer (acks).
type durableConn struct {
	t    *testing.T
	name string
	c    *websocket.Conn
}

func (c *cluster) durableDial(t *testing.T, n *node, subject, name string) *durableConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+n.addr+"/v1/ws", &websocket.DialOptions{Subprotocols: []string{"herald.v1"}})
	if err != nil {
		t.Fatalf("dial %s: %v", n.name, err)
	}
	ws.SetReadLimit(-1)
	t.Cleanup(func() { _ = ws.CloseNow() })
	rc := &durableConn{t: t, name: name + "@" + n.name, c: ws}
	rc.send(fmt.Sprintf(`{"type":"connect","id":"c","token":%q}`, c.token(subject)))
	rc.expect("welcome")
	return rc
}

func (c *durableConn) send(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		c.t.Fatalf("%s: send %s: %v", c.name, frame, err)
	}
}

func (c *durableConn) expect(typ string) map[string]any {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deliveredWithin)
	defer cancel()
	_, b, err := c.c.Read(ctx)
	if err != nil {
		c.t.Fatalf("%s: waiting for %s: %v", c.name, typ, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("%s: %q: %v", c.name, b, err)
	}
	if m["type"] != typ {
		c.t.Fatalf("%s: got %v, want a %s frame", c.name, m, typ)
	}
	return m
}

// TestClusterDurableNodeKilledMidLease: three nodes. A single subscription is bound on node 1
// (which feeds it, as the first to bind), then on node 3, then again on node 1, the most
// recent: a message goes to node 1's second connection. Node 1 is killed with SIGKILL before
// the ack: its connections stay bound, as far as Redis knows, and the subscription has no
// owner. Node 3 takes it over once node 1's claim runs out, and as the lease expires offers the
// message to the next most recently bound connection not yet tried: node 3's.
// Node 3's connection acks it; an ack sent again is a success; another connection's ack of it
// is not_found.
func TestClusterDurableNodeKilledMidLease(t *testing.T) {
	redisVariants(t, func(t *testing.T, url string) {
		c := startCluster(t, clusterConfig{RedisURL: url, Staggered: true,
			Env: []string{"HERALD_DURABLE_LEASE=1s", "HERALD_DURABLE_MAX_ATTEMPTS=5"}})
		first := c.durableDial(t, c.at(1), "alice", "first")
		third := c.durableDial(t, c.at(3), "alice", "third")
		last := c.durableDial(t, c.at(1), "alice", "last")
		other := c.durableDial(t, c.at(2), "alice", "other")
		bind := func(rc *durableConn) {
			rc.send(`{"type":"subscribe","id":"s","sub":"jobs","channel":"jobs/eu","mode":"single"}`)
			rc.expect("subscribed")
		}
		bind(first)
		bind(third)
		bind(last)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pos, err := c.publishAPI(ctx, c.at(2), "jobs/eu", []byte(`{"job":1}`))
		if err != nil {
			t.Fatal(err)
		}
		m := last.expect("message")
		if got := m["pos"].(map[string]any)["offset"]; got != float64(pos.Offset) {
			t.Fatalf("last got %v, want offset %d", m, pos.Offset)
		}
		c.at(1).kill(t)

		m = third.expect("message")
		if got := m["pos"].(map[string]any)["offset"]; got != float64(pos.Offset) {
			t.Fatalf("third got %v, want the retried offset %d", m, pos.Offset)
		}
		ack := fmt.Sprintf(`{"type":"ack","id":"%%s","sub":"jobs","pos":{"epoch":%q,"offset":%d}}`, pos.Epoch, pos.Offset)
		third.send(fmt.Sprintf(ack, "a1"))
		third.send(fmt.Sprintf(ack, "a2"))
		third.send(`{"type":"ping","id":"p"}`)
		if m := third.expect("pong"); m["id"] != "p" {
			t.Fatalf("third: %v", m)
		}
		// A connection bound now is the most recent; the settled message is not its to ack.
		bind(other)
		other.send(fmt.Sprintf(ack, "a3"))
		if m := other.expect("error"); m["code"] != "not_found" || m["id"] != "a3" {
			t.Fatalf("other's ack: %v, want not_found", m)
		}
		// The subscription goes on from node 3: the next message goes to the most recent.
		pos2, err := c.publishAPI(ctx, c.at(3), "jobs/eu", []byte(`{"job":2}`))
		if err != nil {
			t.Fatal(err)
		}
		m = other.expect("message")
		if got := m["pos"].(map[string]any)["offset"]; got != float64(pos2.Offset) {
			t.Fatalf("other got %v, want offset %d", m, pos2.Offset)
		}
	})
}
