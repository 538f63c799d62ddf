package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a Receiver that writes down what reaches it, in order.
type recorder struct {
	mu     sync.Mutex
	events []string // "from:data" or "from!reason"
}

func (r *recorder) Receive(from string, data []byte) {
	r.mu.Lock()
	r.events = append(r.events, from+":"+string(data))
	r.mu.Unlock()
}

func (r *recorder) Gap(from string, reason GapReason) {
	r.mu.Lock()
	r.events = append(r.events, from+"!"+string(reason))
	r.mu.Unlock()
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recorder) waitFor(t *testing.T, what string, cond func(ev []string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ev := r.snapshot()
		if cond(ev) {
			return ev
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s; got %d events, last %q", what, len(ev), ev[max(0, len(ev)-5):])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// node is one running transport; stop ends its Run and checks it returned.
type node struct {
	tr   *Transport
	rec  *recorder
	stop func()
}

func startNode(t *testing.T, c *Client, cfg TransportConfig) *node {
	t.Helper()
	if cfg.Block == 0 {
		cfg.Block = 200 * time.Millisecond
	}
	tr, err := NewTransport(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{tr: tr, rec: &recorder{}}
	n.stop = n.run(t)
	t.Cleanup(func() { n.stop() })
	return n
}

func (n *node) run(t *testing.T) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.tr.Run(ctx, n.rec); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// The stream exists once the reader made it; producers never create one.
	key := n.tr.streamKey(n.tr.cfg.Node)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := n.tr.c.rc.Do(context.Background(), n.tr.c.rc.B().Exists().Key(key).Build()).AsBool()
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s not created: %v", key, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sync.OnceFunc(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return 10s after its context ended")
		}
	})
}

func flush(t *testing.T, tr *Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := tr.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func TestTransportOrderOncePerNode(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		a := startNode(t, c, TransportConfig{Node: "a"})
		b := startNode(t, c, TransportConfig{Node: "b"})
		d := startNode(t, c, TransportConfig{Node: "d"})
		const producers, each = 4, 300
		var wg sync.WaitGroup
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					msg := []byte(fmt.Sprintf("g%d/%d", p, i))
					a.tr.Send("b", msg)
					a.tr.Send("d", msg)
				}
			}()
		}
		wg.Wait()
		flush(t, a.tr)
		for _, n := range []*node{b, d} {
			ev := n.rec.waitFor(t, "not every payload arrived", func(ev []string) bool { return len(ev) >= producers*each })
			next := make([]int, producers)
			for _, e := range ev {
				var p, i int
				if _, err := fmt.Sscanf(e, "a:g%d/%d", &p, &i); err != nil {
					t.Fatalf("event %q: want only payloads from a, no gap", e)
				}
				if i != next[p] {
					t.Fatalf("producer %d: payload %d arrived when %d was next: order per producer, once", p, i, next[p])
				}
				next[p]++
			}
		}
		if got := a.rec.snapshot(); len(got) != 0 {
			t.Fatalf("a received %v, want nothing: it was sent nothing", got)
		}
	})
}

func TestTransportOverflowIsAGap(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		b := startNode(t, c, TransportConfig{Node: "b"})
		a, err := NewTransport(c, TransportConfig{Node: "a", QueueItems: 4})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 { // nothing sends yet: the queue holds 4, the rest are dropped
			a.Send("b", []byte(fmt.Sprint(i)))
		}
		if got := a.Dropped("b"); got != 6 {
			t.Fatalf("Dropped = %d, want 6", got)
		}
		an := &node{tr: a, rec: &recorder{}}
		an.stop = an.run(t)
		t.Cleanup(an.stop)
		flush(t, a)
		want := []string{"a:0", "a:1", "a:2", "a:3", "a!transport_lost"}
		b.rec.waitFor(t, fmt.Sprintf("want %q", want), func(ev []string) bool { return strings.Join(ev, " ") == strings.Join(want, " ") })
		a.Send("b", []byte("10"))
		flush(t, a)
		b.rec.waitFor(t, "a payload after the gap did not arrive alone", func(ev []string) bool {
			return strings.Join(ev, " ") == strings.Join(append(want, "a:10"), " ")
		})
	})
}

func TestTransportTrimmedIsAGap(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		a := startNode(t, c, TransportConfig{Node: "a", MaxLen: 10})
		b := startNode(t, c, TransportConfig{Node: "b"})
		a.tr.Send("b", []byte("first"))
		flush(t, a.tr)
		b.rec.waitFor(t, "first payload", func(ev []string) bool { return len(ev) == 1 })
		b.stop() // b's reader pauses; its stream stays, trimmed to about 10 entries
		for i := range 1000 {
			a.tr.Send("b", []byte(fmt.Sprint(i)))
		}
		flush(t, a.tr)
		b.stop = b.run(t)
		ev := b.rec.waitFor(t, "the last payload did not arrive", func(ev []string) bool { return len(ev) > 0 && ev[len(ev)-1] == "a:999" })
		if ev[1] != "a!transport_lost" {
			t.Fatalf("after the trim, events %q...: want the gap before the first payload read", ev[:min(len(ev), 4)])
		}
		if len(ev) > 2+500 {
			t.Fatalf("%d events: the stream was not trimmed, the test shows nothing", len(ev))
		}
	})
}

func TestTransportStreamGoneAndRestart(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		a := startNode(t, c, TransportConfig{Node: "a"})
		b := startNode(t, c, TransportConfig{Node: "b"})
		a.tr.Send("b", []byte("1"))
		flush(t, a.tr)
		b.rec.waitFor(t, "first payload", func(ev []string) bool { return len(ev) == 1 })
		// Redis loses b's stream (a restart without persistence, say).
		if err := c.rc.Do(context.Background(), c.rc.B().Del().Key(b.tr.streamKey("b")).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		b.rec.waitFor(t, "no stream_gone gap", func(ev []string) bool { return len(ev) == 2 && ev[1] == "a!stream_gone" })
		a.tr.Send("b", []byte("2"))
		flush(t, a.tr)
		b.rec.waitFor(t, "the payload after the stream came back", func(ev []string) bool { return len(ev) >= 3 && ev[len(ev)-1] == "a:2" })

		// a restarts under the same id: a new incarnation.
		a.stop()
		a2 := startNode(t, c, TransportConfig{Node: "a"})
		a2.tr.Send("b", []byte("3"))
		flush(t, a2.tr)
		ev := b.rec.waitFor(t, "the new incarnation's payload", func(ev []string) bool { return ev[len(ev)-1] == "a:3" })
		if ev[len(ev)-2] != "a!producer_restart" {
			t.Fatalf("events %q: want a producer_restart gap before a's new incarnation's first payload", ev)
		}
	})
}
