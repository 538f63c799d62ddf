package redis

import (
	"context"
	"fmt"
	"strconv"
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

func startNode(t testing.TB, c *Client, cfg TransportConfig) *node {
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

func (n *node) run(t testing.TB) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.tr.Run(ctx, n.rec); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitStream(t, n.tr)
	return sync.OnceFunc(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return 10s after its context ended")
		}
	})
}

// waitStream waits until tr's reader has made its stream: producers never create one.
func waitStream(t testing.TB, tr *Transport) {
	t.Helper()
	key := tr.streamKey(tr.cfg.Node)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := tr.c.rc.Do(context.Background(), tr.c.rc.B().Exists().Key(key).Build()).AsBool()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s not created: %v", key, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func flush(t testing.TB, tr *Transport) {
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

// of returns the events of producer from in ev: its payloads and its gaps.
func of(ev []string, from string) []string {
	var out []string
	for _, e := range ev {
		if strings.HasPrefix(e, from+":") || strings.HasPrefix(e, from+"!") {
			out = append(out, e)
		}
	}
	return out
}

// noSilentLoss checks the payloads from producer from in ev, numbered in the order sent: they
// arrive in that order, at most once, each one that does not follow the one before it comes
// after a gap from from, and the last to arrive is last.
func noSilentLoss(t *testing.T, ev []string, from string, last int) {
	t.Helper()
	prev, gapped := -1, false
	for _, e := range of(ev, from) {
		if strings.HasPrefix(e, from+"!") {
			gapped = true
			continue
		}
		v, err := strconv.Atoi(strings.TrimPrefix(e, from+":"))
		if err != nil {
			t.Fatalf("event %q: want a numbered payload", e)
		}
		if v <= prev {
			t.Fatalf("payload %d arrived after %d: out of order, or twice", v, prev)
		}
		if v != prev+1 && !gapped {
			t.Fatalf("payload %d arrived after %d with no gap between: %d..%d were lost silently; events %q", v, prev, prev+1, v-1, of(ev, from))
		}
		prev, gapped = v, false
	}
	if prev != last {
		t.Fatalf("the last payload from %s to arrive is %d, want %d", from, prev, last)
	}
}

// sendNumbered sends the payloads "lo".."hi-1" from tr to node.
func sendNumbered(tr *Transport, node string, lo, hi int) {
	for i := lo; i < hi; i++ {
		tr.Send(node, []byte(strconv.Itoa(i)))
	}
}

// requireTrimmed checks that no payload from producer is left in node's stream, so that a test
// of what a trim does shows something.
func requireTrimmed(t *testing.T, c *Client, tr *Transport, node, producer string) {
	t.Helper()
	es, err := c.rc.Do(context.Background(), c.rc.B().Xrange().Key(tr.streamKey(node)).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.FieldValues["p"] == producer && e.FieldValues["t"] == "" {
			t.Fatalf("a payload from %s is still in %s's stream (%d entries): the stream was not trimmed, the test shows nothing", producer, node, len(es))
		}
	}
}

func TestTransportOverflowIsAGap(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		for _, tc := range []struct {
			name  string
			sends int // into a queue of 4
		}{
			{"several dropped", 10},
			// The tick then carries the number right after the last payload read: a reader
			// that took it for the next payload's number would miss the hole.
			{"one dropped", 5},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := dial(t, url)
				b := startNode(t, c, TransportConfig{Node: "b"})
				a, err := NewTransport(c, TransportConfig{Node: "a", QueueItems: 4})
				if err != nil {
					t.Fatal(err)
				}
				sendNumbered(a, "b", 0, tc.sends) // nothing sends yet: the queue holds 4
				dropped := uint64(tc.sends - 4)
				if got := a.Dropped("b"); got != dropped {
					t.Fatalf("Dropped = %d, want %d", got, dropped)
				}
				if st := a.Stats(); st.DroppedQueueFull != dropped || st.Queued != 4 || st.QueuedBytes != 4 || st.Destinations != 1 {
					t.Fatalf("Stats = %+v, want %d dropped at a full queue, 4 payloads of 4 bytes queued for 1 destination", st, dropped)
				}
				an := &node{tr: a, rec: &recorder{}}
				an.stop = an.run(t)
				t.Cleanup(an.stop)
				flush(t, a)
				want := []string{"a:0", "a:1", "a:2", "a:3", "a!transport_lost"}
				b.rec.waitFor(t, fmt.Sprintf("want %q", want), func(ev []string) bool { return strings.Join(ev, " ") == strings.Join(want, " ") })
				a.Send("b", []byte("after"))
				flush(t, a)
				b.rec.waitFor(t, "a payload after the gap did not arrive alone", func(ev []string) bool {
					return strings.Join(ev, " ") == strings.Join(append(want, "a:after"), " ")
				})
				if st := a.Stats(); st.Sent != 5 || st.SentBytes != 4+5 || st.Dropped(DropQueueFull) != dropped || st.Ticks < 1 || st.Queued != 0 {
					t.Fatalf("a's Stats = %+v, want 5 sent (9 bytes), %d dropped, a tick, nothing queued", st, dropped)
				}
				if st := b.tr.Stats(); st.Received != 5 || st.ReceivedBytes != 9 || st.Gaps(GapLost) != 1 || st.GapsRestart+st.GapsStreamGone != 0 {
					t.Fatalf("b's Stats = %+v, want 5 received (9 bytes), one gap: transport_lost", st)
				}
			})
		}
	})
}

func TestTransportTrimmedIsAGap(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		a := startNode(t, c, TransportConfig{Node: "a", MaxLen: MinMaxLen})
		b := startNode(t, c, TransportConfig{Node: "b"})
		a.tr.Send("b", []byte("first"))
		flush(t, a.tr)
		b.rec.waitFor(t, "first payload", func(ev []string) bool { return len(ev) == 1 })
		b.stop() // b's reader pauses; its stream stays, trimmed to about MinMaxLen entries
		sendNumbered(a.tr, "b", 0, 5*MinMaxLen)
		flush(t, a.tr)
		b.stop = b.run(t)
		last := fmt.Sprintf("a:%d", 5*MinMaxLen-1)
		ev := b.rec.waitFor(t, "the last payload did not arrive", func(ev []string) bool { return len(ev) > 0 && ev[len(ev)-1] == last })
		if ev[1] != "a!transport_lost" || ev[2] == "a:0" {
			t.Fatalf("after the trim, events %q...: want the gap, then a payload past a:0 (the stream was trimmed)", ev[:min(len(ev), 4)])
		}
		// The reader found the trim and the jump in a's numbers: one hole, one gap.
		if n := strings.Count(strings.Join(ev, " "), "!"); n != 1 {
			t.Fatalf("%d gaps, want 1: %q", n, ev[:min(len(ev), 4)])
		}
		noSilentLoss(t, ev[1:], "a", 5*MinMaxLen-1)
	})
}

// A producer whose entries were trimmed unread and which sends nothing more: the reader that
// read from it before finds its last entry trimmed away.
func TestTransportTrimmedSilentKnownProducer(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		b := startNode(t, c, TransportConfig{Node: "b"})
		// a ticks only every 30s, past this test: what it shows is the reader's check.
		a := startNode(t, c, TransportConfig{Node: "a", MaxLen: MinMaxLen, Heartbeat: 30 * time.Second})
		f := startNode(t, c, TransportConfig{Node: "f", MaxLen: MinMaxLen})
		a.tr.Send("b", []byte("first"))
		flush(t, a.tr)
		b.rec.waitFor(t, "first payload", func(ev []string) bool { return len(ev) == 1 })
		b.stop()
		for i := range 3 {
			a.tr.Send("b", []byte(fmt.Sprint("x", i)))
		}
		flush(t, a.tr)
		sendNumbered(f.tr, "b", 0, 5*MinMaxLen) // another producer fills the stream
		flush(t, f.tr)
		requireTrimmed(t, c, a.tr, "b", "a")
		b.stop = b.run(t)
		b.rec.waitFor(t, "no gap from a, whose last payloads were trimmed unread", func(ev []string) bool {
			return strings.Contains(strings.Join(of(ev, "a"), " "), "a!transport_lost")
		})
		a.tr.Send("b", []byte("after"))
		flush(t, a.tr)
		ev := b.rec.waitFor(t, "a's payload after the gap", func(ev []string) bool {
			got := of(ev, "a")
			return got[len(got)-1] == "a:after"
		})
		got := of(ev, "a")
		if got[0] != "a:first" || got[1] != "a!transport_lost" || strings.Contains(strings.Join(got, " "), "a:x") {
			t.Fatalf("a's events %q: want a:first, the gap, and none of the trimmed payloads", got)
		}
		noSilentLoss(t, ev, "f", 5*MinMaxLen-1)
	})
}

// A producer whose entries were all trimmed unread, so the reader never heard of it, and which
// sends nothing more: its heartbeat tells the reader.
func TestTransportTrimmedSilentUnknownProducer(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		b := startNode(t, c, TransportConfig{Node: "b"})
		a := startNode(t, c, TransportConfig{Node: "a", MaxLen: MinMaxLen, Heartbeat: 50 * time.Millisecond})
		f := startNode(t, c, TransportConfig{Node: "f", MaxLen: MinMaxLen})
		b.stop()
		for i := range 3 {
			a.tr.Send("b", []byte(fmt.Sprint("x", i)))
		}
		flush(t, a.tr)
		sendNumbered(f.tr, "b", 0, 5*MinMaxLen)
		flush(t, f.tr)
		requireTrimmed(t, c, a.tr, "b", "a")
		b.stop = b.run(t)
		b.rec.waitFor(t, "no gap from a, whose every payload was trimmed unread", func(ev []string) bool { return len(of(ev, "a")) > 0 })
		a.tr.Send("b", []byte("after"))
		flush(t, a.tr)
		ev := b.rec.waitFor(t, "a's payload after the gap", func(ev []string) bool {
			got := of(ev, "a")
			return got[len(got)-1] == "a:after"
		})
		if got, want := strings.Join(of(ev, "a"), " "), "a!transport_lost a:after"; got != want {
			t.Fatalf("a's events %q, want %q", got, want)
		}
		if st := a.tr.Stats(); st.Ticks == 0 {
			t.Fatalf("a's Stats = %+v: no tick appended", st)
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
		// The new incarnation reads the stream its last one made, from the marker it appends
		// at its end: what was sent before that is not read (and told by the sender's tick).
		deadline := time.Now().Add(10 * time.Second)
		for markers := 0; markers < 2; {
			es, err := c.rc.Do(context.Background(), c.rc.B().Xrange().Key(a2.tr.streamKey("a")).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				t.Fatal(err)
			}
			markers = 0
			for _, e := range es {
				if e.FieldValues["p"] == "" {
					markers++
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d markers in a's stream, want 2: its new incarnation did not join it", markers)
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.tr.Send("a", []byte("to a2"))
		flush(t, b.tr)
		a2.rec.waitFor(t, "a's new incarnation did not read its stream", func(ev []string) bool {
			return strings.Join(ev, " ") == "b:to a2"
		})
	})
}

// Redis restarts under running transports: with its data lost, the reader reports its stream
// gone once and makes it again; with its data kept, nothing is lost. Either way the senders
// resume, and every payload arrives or is told of by a gap.
func TestTransportRedisRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep bool // SHUTDOWN SAVE, then start from the dump; else SIGKILL and start empty
	}{
		{"data lost", false},
		{"data kept", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startOwnRedis(t)
			c := dial(t, srv.url())
			a := startNode(t, c, TransportConfig{Node: "a", Heartbeat: 50 * time.Millisecond})
			b := startNode(t, c, TransportConfig{Node: "b"})
			sendNumbered(a.tr, "b", 0, 10)
			flush(t, a.tr)
			b.rec.waitFor(t, "the payloads before the outage", func(ev []string) bool { return len(ev) == 10 })
			if tc.keep {
				srv.shutdownSave()
			} else {
				srv.kill()
			}
			sendNumbered(a.tr, "b", 10, 20) // while Redis is away: queued, tried again
			srv.start()
			if !tc.keep {
				b.rec.waitFor(t, "no stream_gone gap after Redis came back empty", func(ev []string) bool {
					return strings.Contains(strings.Join(ev, " "), "a!stream_gone")
				})
			}
			sendNumbered(a.tr, "b", 20, 30)
			flush(t, a.tr)
			ev := b.rec.waitFor(t, "the last payload", func(ev []string) bool { return ev[len(ev)-1] == "a:29" })
			noSilentLoss(t, ev, "a", 29)
			if st := a.tr.Stats(); st.Sent+st.DroppedQueueFull+st.DroppedNoStream != 30 {
				t.Fatalf("a's Stats = %+v: sent and dropped add up to %d, want the 30 payloads", st, st.Sent+st.DroppedQueueFull+st.DroppedNoStream)
			}
			gone := strings.Count(strings.Join(ev, " "), "a!stream_gone")
			if tc.keep {
				if got := strings.Join(ev, " "); strings.Contains(got, "!") || len(ev) != 30 {
					t.Fatalf("events %q: with Redis's data kept, want every payload once and no gap", ev)
				}
			} else if st := b.tr.Stats(); gone != 1 || st.GapsStreamGone != 1 {
				t.Fatalf("%d stream_gone gaps (Stats %+v), want 1 for the one outage: %q", gone, st, ev)
			}
		})
	}
}

func TestNewTransportRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  TransportConfig
		want string
	}{
		"no node":                {TransportConfig{}, "no node id"},
		"stream TTL under block": {TransportConfig{Node: "a", Block: time.Second, StreamTTL: 3 * time.Second}, "stream TTL"},
		"max length too low":     {TransportConfig{Node: "a", MaxLen: MinMaxLen - 1}, "max length"},
		"batch too large":        {TransportConfig{Node: "a", Batch: MinMaxLen + 1}, "batch"},
		"heartbeat past TTL":     {TransportConfig{Node: "a", Heartbeat: time.Minute}, "heartbeat"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewTransport(&Client{}, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewTransport(%+v) = %v, want an error about %q", tc.cfg, err, tc.want)
			}
		})
	}
}
