package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/transport/sse"
)

var _ sse.Peers = (*Nodes)(nil)

func newNodes(t *testing.T, c *Client, cfg NodesConfig) *Nodes {
	t.Helper()
	n, err := NewNodes(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func lookup(t *testing.T, n *Nodes, node string) (string, bool) {
	t.Helper()
	url, ok, err := n.Lookup(context.Background(), node)
	if err != nil {
		t.Fatalf("Lookup %s: %v", node, err)
	}
	return url, ok
}

// TestNodes: a registered node can be looked up and is listed live; a second process claiming
// a live node's id is refused until the first deregisters; only the holder deregisters it.
func TestNodes(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		a := newNodes(t, c, NodesConfig{Node: "node-a", URL: "http://10.0.0.1:8080"})
		b := newNodes(t, c, NodesConfig{Node: "node-b", URL: "https://10.0.0.2:8443"})

		if _, ok := lookup(t, a, "node-a"); ok {
			t.Fatal("node-a is live before it registered")
		}
		if live, err := a.Live(ctx); err != nil || len(live) != 0 {
			t.Fatalf("Live = %v, %v before anyone registered; want none", live, err)
		}
		for _, n := range []*Nodes{a, b} {
			if err := n.Register(ctx); err != nil {
				t.Fatalf("%s: Register: %v", n, err)
			}
		}
		if err := a.Register(ctx); err != nil {
			t.Fatalf("renewing: %v", err)
		}
		if got, ok := lookup(t, a, "node-b"); !ok || got != "https://10.0.0.2:8443" {
			t.Errorf("Lookup node-b = %q, %v; want its URL", got, ok)
		}
		if got, err := b.URL(ctx, "node-a"); err != nil || got != "http://10.0.0.1:8080" {
			t.Errorf("URL node-a = %q, %v; want its URL", got, err)
		}
		if got, err := b.URL(ctx, "node-z"); err != nil || got != "" {
			t.Errorf("URL node-z = %q, %v; want none", got, err)
		}
		live, err := b.Live(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []Peer{{"node-a", "http://10.0.0.1:8080"}, {"node-b", "https://10.0.0.2:8443"}}
		if diff := cmp.Diff(want, live); diff != "" {
			t.Errorf("Live (-want +got):\n%s", diff)
		}

		// A second process with node-a's id.
		a2 := newNodes(t, c, NodesConfig{Node: "node-a", URL: "http://10.0.0.9:8080"})
		var taken *NodeTakenError
		if err := a2.Register(ctx); !errors.As(err, &taken) || taken.URL != "http://10.0.0.1:8080" {
			t.Fatalf("Register of a taken id = %v; want a NodeTakenError naming the holder's URL", err)
		}
		if err := a2.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		if got, ok := lookup(t, b, "node-a"); !ok || got != "http://10.0.0.1:8080" {
			t.Fatalf("after another process's Deregister, node-a = %q, %v; want the holder still live", got, ok)
		}
		if err := a.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := lookup(t, b, "node-a"); ok {
			t.Fatal("node-a is live after it deregistered")
		}
		if err := a2.Register(ctx); err != nil {
			t.Fatalf("Register once the holder deregistered: %v", err)
		}
		if got, ok := lookup(t, b, "node-a"); !ok || got != "http://10.0.0.9:8080" {
			t.Errorf("node-a = %q, %v; want the new holder's URL", got, ok)
		}
	})
}

// TestNodesLapse: a node that stops renewing is not live once its TTL has passed, by Redis's
// clock, and the next registration removes its entry; then its id is free.
func TestNodesLapse(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		gone := newNodes(t, c, NodesConfig{Node: "gone", URL: "http://10.0.0.3:8080", TTL: 200 * time.Millisecond})
		b := newNodes(t, c, NodesConfig{Node: "node-b", URL: "http://10.0.0.2:8080"})
		if err := gone.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := lookup(t, b, "gone"); !ok {
			t.Fatal("gone is not live once registered")
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, ok := lookup(t, b, "gone"); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("gone is still live 10s after its 200ms TTL")
			}
		}
		if live, err := b.Live(ctx); err != nil || len(live) != 0 {
			t.Errorf("Live = %v, %v; want none", live, err)
		}
		if err := b.Register(ctx); err != nil {
			t.Fatal(err)
		}
		held, err := c.rc.Do(ctx, c.rc.B().Hexists().Key(c.key("u", nodesTag)).Field("gone").Build()).AsBool()
		if err != nil || held {
			t.Errorf("gone's entry is still stored (%v, %v) after a registration reaped it", held, err)
		}
		again := newNodes(t, c, NodesConfig{Node: "gone", URL: "http://10.0.0.4:8080"})
		if err := again.Register(ctx); err != nil {
			t.Errorf("Register of a lapsed id: %v", err)
		}
	})
}

// TestNodesRun: Run registers at once, renews (the deadline moves on), and deregisters when
// its context ends.
func TestNodesRun(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		n := newNodes(t, c, NodesConfig{Node: "node-r", URL: "http://10.0.0.5:8080", TTL: 300 * time.Millisecond})
		other := newNodes(t, c, NodesConfig{Node: "node-b"})
		deadline := func() float64 {
			s, err := c.rc.Do(context.Background(), c.rc.B().Zscore().Key(c.key("v", nodesTag)).Member("node-r").Build()).AsFloat64()
			if err != nil {
				return 0
			}
			return s
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		var first float64
		for limit := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if first == 0 {
				first = deadline()
			} else if d := deadline(); d > first {
				break // renewed
			}
			if time.Now().After(limit) {
				cancel()
				<-done
				t.Fatalf("no renewal within 10s at a 300ms TTL (first deadline %v)", first)
			}
		}
		if got, ok := lookup(t, other, "node-r"); !ok || got != "http://10.0.0.5:8080" {
			t.Errorf("while running, node-r = %q, %v; want live", got, ok)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		if _, ok := lookup(t, other, "node-r"); ok {
			t.Error("node-r is live after Run returned")
		}
	})
}

// TestNodesURLCache: URL remembers a live node's URL for CacheFor, and asks again for a node it
// found not live.
func TestNodesURLCache(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		a := newNodes(t, c, NodesConfig{Node: "node-a", URL: "http://10.0.0.1:8080"})
		b := newNodes(t, c, NodesConfig{Node: "node-b", CacheFor: time.Hour})
		if got, err := b.URL(ctx, "node-a"); err != nil || got != "" {
			t.Fatalf("URL before node-a registered = %q, %v; want none", got, err)
		}
		if err := a.Register(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := b.URL(ctx, "node-a"); err != nil || got != "http://10.0.0.1:8080" {
			t.Fatalf("URL once node-a registered = %q, %v; want its URL (a node not live is not remembered)", got, err)
		}
		if err := a.Deregister(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err := b.URL(ctx, "node-a"); err != nil || got != "http://10.0.0.1:8080" {
			t.Errorf("URL within CacheFor = %q, %v; want the remembered URL", got, err)
		}
		fresh := newNodes(t, c, NodesConfig{Node: "node-c"})
		if got, err := fresh.URL(ctx, "node-a"); err != nil || got != "" {
			t.Errorf("URL of a deregistered node, asked of Redis = %q, %v; want none", got, err)
		}
	})
}

func TestNewNodesNeedsANode(t *testing.T) {
	if _, err := NewNodes(&Client{}, NodesConfig{}); err == nil {
		t.Error("NewNodes without a node id: no error")
	}
	n, err := NewNodes(&Client{}, NodesConfig{Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Register(context.Background()); err == nil {
		t.Error("Register without a URL: no error")
	}
}
