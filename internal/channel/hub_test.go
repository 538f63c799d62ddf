package channel

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

func TestPublishFrame(t *testing.T) {
	h := testHub(t, counterEpochs(), 0)
	var body []byte
	var pub *stream.Message
	_, unsub, _ := h.Subscribe(subscriberFunc(func(sub string, it *stream.Item) { pub, body = it.Message, it.Encoded(wire.Codec{}) }), "s1", mustPattern(t, "chat/room1", ""))
	defer unsub()

	pos := mustPublish(t, h, "chat/room1", "msg", `{"text":"hi"}`)
	if want := wire.ChannelPosition("e1", 1); pos != want {
		t.Fatalf("Publish = %v, want %v", pos, want)
	}
	wantBody := `"pos":{"epoch":"e1","offset":1},"channel":"chat/room1","event":"msg","data":{"text":"hi"}}`
	if string(body) != wantBody {
		t.Errorf("body\n got %s\nwant %s", body, wantBody)
	}
	if pub.Pos != pos || pub.Channel != "chat/room1" || pub.Event != "msg" {
		t.Errorf("publication = %+v", pub)
	}
	// Head and body make one frame the client decodes.
	frame := append(wire.AppendDataHead(nil, wire.FrameMessage, "s1"), body...)
	f, err := wire.DecodeServer(frame, 0)
	if err != nil {
		t.Fatalf("DecodeServer(%s): %v", frame, err)
	}
	want := &wire.Message{Sub: "s1", Pos: pos, Channel: "chat/room1", Event: "msg", Data: []byte(`{"text":"hi"}`)}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("decoded frame (-want +got):\n%s", diff)
	}

	mustPublish(t, h, "chat/room1", "", "")
	if want := `"pos":{"epoch":"e1","offset":2},"channel":"chat/room1","data":null}`; string(body) != want {
		t.Errorf("body without event or data\n got %s\nwant %s", body, want)
	}
}

type subscriberFunc func(sub string, it *stream.Item)

func (f subscriberFunc) Push(sub string, it *stream.Item) { f(sub, it) }

// TestDispatch publishes once to each of several channels with a fixed set of subscriptions
// and checks who got what.
func TestDispatch(t *testing.T) {
	subs := []struct{ sub, glob, event string }{
		{"exact", "chat/room1", ""},
		{"exact-mention", "chat/room1", "mention"},
		{"chat-below", "chat/**", ""},
		{"inbox", "docs/*/inbox", ""},
		{"alice", "docs/alice/**", ""},
		{"alice-mention", "docs/alice/**", "mention"},
		{"root-one", "*", ""},
		{"root-inbox", "*/inbox", ""},
		{"deep", "a/*/c/*", ""},
		{"all", "**", ""},
	}
	tests := []struct {
		channel, event string
		want           []string
	}{
		{"chat/room1", "", []string{"exact", "chat-below", "all"}},
		{"chat/room1", "mention", []string{"exact", "exact-mention", "chat-below", "all"}},
		{"chat/room10", "", []string{"chat-below", "all"}},
		{"chat", "", []string{"root-one", "all"}},
		{"chat/room1/thread", "", []string{"chat-below", "all"}},
		{"docs/alice/inbox", "", []string{"inbox", "alice", "all"}},
		{"docs/alice/inbox", "mention", []string{"inbox", "alice", "alice-mention", "all"}},
		{"docs/bob/inbox", "", []string{"inbox", "all"}},
		{"docs/alice", "", []string{"all"}},
		{"docs/alice/inbox/old", "", []string{"alice", "all"}},
		{"x/inbox", "", []string{"root-inbox", "all"}},
		{"a/b/c/d", "", []string{"deep", "all"}},
		{"a/b/c", "", []string{"all"}},
		{"zzz/y", "", []string{"all"}},
	}
	h := testHub(t, nil, 0)
	r := &recorder{}
	for _, s := range subs {
		_, unsub, _ := h.Subscribe(r, s.sub, mustPattern(t, s.glob, s.event))
		defer unsub()
	}
	for _, tt := range tests {
		t.Run(tt.channel+"|"+tt.event, func(t *testing.T) {
			pos := mustPublish(t, h, tt.channel, tt.event, `1`)
			var gotSubs []string
			for _, g := range r.take() {
				gotSubs = append(gotSubs, g.Sub)
				if g.Channel != tt.channel || g.Event != tt.event || g.Pos != pos {
					t.Errorf("%s got %+v, want channel %q event %q pos %v", g.Sub, g, tt.channel, tt.event, pos)
				}
			}
			if diff := cmp.Diff(sortedCopy(tt.want), sortedCopy(gotSubs)); diff != "" {
				t.Errorf("subscriptions reached (-want +got):\n%s", diff)
			}
		})
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	for i := 1; i < len(c); i++ {
		for j := i; j > 0 && c[j] < c[j-1]; j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
	return c
}

func TestOffsetsAndEpochs(t *testing.T) {
	h := testHub(t, counterEpochs(), 0)
	r := &recorder{}
	pos, unsub, _ := h.Subscribe(r, "s", mustPattern(t, "chat/room1", ""))
	if want := wire.ChannelPosition("e1", 0); pos != want {
		t.Fatalf("Subscribe pos = %v, want %v (before the first publication)", pos, want)
	}
	for i := 1; i <= 100; i++ {
		if got, want := mustPublish(t, h, "chat/room1", "", "1"), wire.ChannelPosition("e1", uint64(i)); got != want {
			t.Fatalf("publish %d at %v, want %v", i, got, want)
		}
	}
	if head, ok := h.Head("chat/room1"); !ok || head != wire.ChannelPosition("e1", 100) {
		t.Errorf("Head = %v, %v; want e1:100, true", head, ok)
	}
	// Another channel has its own offsets and epoch.
	_, unsub2, _ := h.Subscribe(r, "t", mustPattern(t, "chat/room2", ""))
	if got := mustPublish(t, h, "chat/room2", "", "1"); got != wire.ChannelPosition("e2", 1) {
		t.Errorf("first publish to another channel at %v, want e2:1", got)
	}
	unsub2()
	if got := len(r.take()); got != 101 {
		t.Errorf("delivered %d, want 101", got)
	}

	// A second subscriber joins mid-stream and is told where it starts.
	pos2, unsub3, _ := h.Subscribe(r, "late", mustPattern(t, "chat/room1", ""))
	if pos2 != wire.ChannelPosition("e1", 100) {
		t.Errorf("late Subscribe pos = %v, want e1:100", pos2)
	}
	unsub3()

	// The last subscriber leaves: the state is forgotten and the next incarnation has a new
	// epoch, from offset 0 again.
	unsub()
	if _, ok := h.Head("chat/room1"); ok {
		t.Error("Head found the channel after its last subscriber left")
	}
	pos, unsub, _ = h.Subscribe(r, "s", mustPattern(t, "chat/room1", ""))
	defer unsub()
	if pos.Epoch == "e1" || pos.Offset != 0 {
		t.Errorf("resubscribed at %v, want a new epoch at offset 0", pos)
	}
}

func TestEpochRollsOverAtMaxOffset(t *testing.T) {
	h := testHub(t, counterEpochs(), 3)
	r := &recorder{}
	_, unsub, _ := h.Subscribe(r, "s", mustPattern(t, "c", ""))
	defer unsub()
	var got []string
	for range 7 {
		got = append(got, mustPublish(t, h, "c", "", "1").String())
	}
	want := []string{"e1:1", "e1:2", "e1:3", "e2:1", "e2:2", "e2:3", "e3:1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("positions (-want +got):\n%s", diff)
	}
	if n := len(r.take()); n != 7 {
		t.Errorf("delivered %d, want 7: a new epoch loses nothing", n)
	}
}

func TestForgetting(t *testing.T) {
	t.Run("publish nobody receives", func(t *testing.T) {
		h := testHub(t, counterEpochs(), 0)
		a := mustPublish(t, h, "chat/room1", "", "1")
		b := mustPublish(t, h, "chat/room1", "", "1")
		if a != wire.ChannelPosition("e1", 1) || b != wire.ChannelPosition("e2", 1) {
			t.Errorf("positions %v, %v; want e1:1, e2:1: each starts and ends a stream", a, b)
		}
		if s := h.Stats(); s.Channels != 0 || s.Forgotten != 2 {
			t.Errorf("stats %+v, want no channels and two forgotten", s)
		}
	})
	t.Run("non-matching subscription under the same anchor", func(t *testing.T) {
		h := testHub(t, nil, 0)
		_, unsub, _ := h.Subscribe(&recorder{}, "s", mustPattern(t, "docs/*/inbox", ""))
		defer unsub()
		mustPublish(t, h, "docs/alice/outbox", "", "1")
		if s := h.Stats(); s.Channels != 0 {
			t.Errorf("stats %+v, want the unmatched channel forgotten", s)
		}
	})
	t.Run("exact subscription", func(t *testing.T) {
		h := testHub(t, nil, 0)
		_, unsub, _ := h.Subscribe(&recorder{}, "s", mustPattern(t, "chat/room1", ""))
		if s := h.Stats(); s.Channels != 1 || s.Tokens != 1 || s.Subscriptions != 1 {
			t.Errorf("stats %+v, want one channel, token and subscription", s)
		}
		mustPublish(t, h, "chat/room1", "", "1")
		unsub()
		unsub() // idempotent
		if s := h.Stats(); s != (Stats{Published: 1, Delivered: 1, Forgotten: 1}) {
			t.Errorf("stats %+v, want everything gone", s)
		}
	})
	t.Run("pattern subscription", func(t *testing.T) {
		h := testHub(t, counterEpochs(), 0)
		r := &recorder{}
		_, unsub, _ := h.Subscribe(r, "s", mustPattern(t, "docs/**", ""))
		_, other, _ := h.Subscribe(r, "o", mustPattern(t, "docs/*/x", ""))
		for i := range 10 {
			mustPublish(t, h, "docs/a", "", "1")
			mustPublish(t, h, "docs/b/c", "", "1")
			// A pattern subscriber that keeps receiving keeps the epoch.
			if head, _ := h.Head("docs/a"); head != wire.ChannelPosition("e1", uint64(i+1)) {
				t.Fatalf("Head(docs/a) = %v, want e1:%d", head, i+1)
			}
		}
		if s := h.Stats(); s.Channels != 2 {
			t.Errorf("stats %+v, want two channels", s)
		}
		// The other subscription shares the anchor, so the channels outlive "s" until it goes
		// too or they are published to again.
		unsub()
		mustPublish(t, h, "docs/a", "", "1")
		if s := h.Stats(); s.Channels != 1 {
			t.Errorf("stats %+v, want docs/a forgotten by a publish nobody received", s)
		}
		other()
		if s := h.Stats(); s.Channels != 0 || s.Tokens != 0 || s.Subscriptions != 0 {
			t.Errorf("stats %+v, want everything gone", s)
		}
	})
	t.Run("event filter still holds", func(t *testing.T) {
		h := testHub(t, counterEpochs(), 0)
		r := &recorder{}
		_, unsub, _ := h.Subscribe(r, "s", mustPattern(t, "chat/room1", "mention"))
		_, unsub2, _ := h.Subscribe(r, "t", mustPattern(t, "docs/**", "mention"))
		defer unsub()
		defer unsub2()
		mustPublish(t, h, "chat/room1", "chat", "1")
		mustPublish(t, h, "docs/a", "mention", "1")
		mustPublish(t, h, "docs/a", "chat", "1")
		got := []string{mustPublish(t, h, "chat/room1", "mention", "1").String(), mustPublish(t, h, "docs/a", "mention", "1").String()}
		if diff := cmp.Diff([]string{"e1:2", "e2:3"}, got); diff != "" {
			t.Errorf("positions (-want +got):\n%s", diff)
		}
		if n := len(r.take()); n != 3 {
			t.Errorf("delivered %d, want 3", n)
		}
	})
	t.Run("two tokens hold one channel", func(t *testing.T) {
		h := testHub(t, nil, 0)
		_, a, _ := h.Subscribe(&recorder{}, "a", mustPattern(t, "docs/**", ""))
		_, b, _ := h.Subscribe(&recorder{}, "b", mustPattern(t, "docs/x/**", ""))
		mustPublish(t, h, "docs/x/y", "", "1")
		before, _ := h.Head("docs/x/y")
		a()
		if after, ok := h.Head("docs/x/y"); !ok || after != before {
			t.Errorf("Head after one holder left = %v, %v; want %v, true", after, ok, before)
		}
		b()
		if s := h.Stats(); s.Channels != 0 {
			t.Errorf("stats %+v, want the channel forgotten", s)
		}
	})
}

func TestPublishRefuses(t *testing.T) {
	h := testHub(t, nil, 0)
	tests := []struct {
		channel, event string
		want           error
	}{
		{"a/*", "", ErrBadName},
		{"", "", ErrBadName},
		{"a//b", "", ErrBadName},
		{"a", "bad event", ErrBadEvent},
	}
	for _, tt := range tests {
		pos, err := h.Publish(tt.channel, tt.event, []byte("1"))
		if !errors.Is(err, tt.want) || !pos.IsZero() {
			t.Errorf("Publish(%q, %q) = %v, %v; want zero, %v", tt.channel, tt.event, pos, err, tt.want)
		}
	}
	if s := h.Stats(); s.Published != 0 || s.Channels != 0 {
		t.Errorf("stats %+v after refusals, want nothing", s)
	}
}

func TestSubscribePanics(t *testing.T) {
	h := testHub(t, nil, 0)
	for name, f := range map[string]func(){
		"zero pattern":   func() { h.Subscribe(&recorder{}, "s", Pattern{}) },
		"nil subscriber": func() { h.Subscribe(nil, "s", mustPattern(t, "a", "")) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

func TestManySubscribers(t *testing.T) {
	h := testHub(t, nil, 0)
	const n = 2000
	rs := make([]*recorder, n)
	var unsubs []func()
	for i := range rs {
		rs[i] = &recorder{}
		glob := "rooms/1"
		if i%2 == 1 {
			glob = "rooms/*"
		}
		_, u, _ := h.Subscribe(rs[i], "s"+strconv.Itoa(i), mustPattern(t, glob, ""))
		unsubs = append(unsubs, u)
	}
	for range 3 {
		mustPublish(t, h, "rooms/1", "", "1")
	}
	for i, r := range rs {
		if got := len(r.take()); got != 3 {
			t.Fatalf("subscriber %d got %d, want 3", i, got)
		}
	}
	// Unsubscribe every third; the rest still receive.
	for i := 0; i < n; i += 3 {
		unsubs[i]()
	}
	mustPublish(t, h, "rooms/1", "", "1")
	for i, r := range rs {
		want := 1
		if i%3 == 0 {
			want = 0
		}
		if got := len(r.take()); got != want {
			t.Fatalf("subscriber %d got %d, want %d", i, got, want)
		}
	}
	for _, u := range unsubs {
		u()
	}
	if s := h.Stats(); s.Channels != 0 || s.Subscriptions != 0 || s.Tokens != 0 {
		t.Errorf("stats %+v, want everything gone", s)
	}
}

// TestOrderUnderConcurrentPublishers has several goroutines publish to one channel while others
// publish elsewhere: every subscriber sees the channel's offsets 1, 2, 3, ... with none missing
// or out of order, and the positions the publishers got back are exactly those.
func TestOrderUnderConcurrentPublishers(t *testing.T) {
	h := testHub(t, nil, 0)
	const publishers, each = 4, 300
	rs := make([]*recorder, 6)
	for i, glob := range []string{"chat/room1", "chat/room1", "chat/**", "*/room1", "**", "chat/*"} {
		rs[i] = &recorder{}
		_, u, _ := h.Subscribe(rs[i], "s", mustPattern(t, glob, ""))
		defer u()
	}
	var wg sync.WaitGroup
	returned := make([][]uint64, publishers)
	for i := range publishers {
		wg.Go(func() {
			for range each {
				pos := mustPublish(t, h, "chat/room1", "", "1")
				returned[i] = append(returned[i], pos.Offset)
			}
		})
		wg.Go(func() { // noise on other channels, sharing tokens
			for j := range each {
				mustPublish(t, h, fmt.Sprintf("chat/room%d", 2+i), "", "1")
				mustPublish(t, h, fmt.Sprintf("other/%d", j%7), "", "1")
			}
		})
	}
	wg.Wait()

	const total = publishers * each
	seen := make([]bool, total+1)
	for _, offs := range returned {
		for _, o := range offs {
			if o == 0 || o > total || seen[o] {
				t.Fatalf("offset %d returned twice or out of range", o)
			}
			seen[o] = true
		}
	}
	for i, r := range rs {
		var epoch string
		next := uint64(1)
		for _, g := range r.take() {
			if g.Channel != "chat/room1" {
				continue
			}
			if epoch == "" {
				epoch = g.Pos.Epoch
			}
			if g.Pos.Epoch != epoch || g.Pos.Offset != next {
				t.Fatalf("subscriber %d: got %v after offset %d of %s, want %s:%d", i, g.Pos, next-1, epoch, epoch, next)
			}
			next++
		}
		if next != total+1 {
			t.Errorf("subscriber %d saw %d publications to chat/room1, want %d", i, next-1, total)
		}
	}
}

// TestNoDeliveryAfterUnsubscribe checks the unsubscribe contract while publishers run flat out:
// once it returns, Deliver is never called for the subscription again.
func TestNoDeliveryAfterUnsubscribe(t *testing.T) {
	h := testHub(t, nil, 0)
	// Padding ahead of the subscription under test in its group, so a publish spends a while
	// delivering to others between collecting it and reaching it: the window unsubscribe must
	// close.
	noop := subscriberFunc(func(string, *stream.Item) {})
	for _, glob := range []string{"rooms/1", "rooms/*"} {
		for range 1000 {
			_, u, _ := h.Subscribe(noop, "pad", mustPattern(t, glob, ""))
			defer u()
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					mustPublish(t, h, "rooms/"+strconv.Itoa(i), "", "1")
				}
			}
		})
	}
	for round := range 50 {
		var ended atomic.Bool
		var late, before atomic.Int64
		s := subscriberFunc(func(string, *stream.Item) {
			if ended.Load() {
				late.Add(1)
			} else {
				before.Add(1)
			}
		})
		glob := "rooms/*"
		if round%2 == 0 {
			glob = "rooms/1"
		}
		_, unsub, _ := h.Subscribe(s, "s", mustPattern(t, glob, ""))
		for before.Load() == 0 {
			runtime.Gosched() // wait until it is receiving, so the unsubscribe races a live publisher
		}
		unsub()
		ended.Store(true)
		mustPublish(t, h, "rooms/1", "", "1")
		if n := late.Load(); n != 0 {
			t.Fatalf("round %d: %d deliveries after unsubscribe returned", round, n)
		}
	}
	close(stop)
	wg.Wait()
}

// TestSubscribeIsLiveFromPos subscribes exactly while a publisher runs: each subscription
// receives precisely the offsets after the position Subscribe returned.
func TestSubscribeIsLiveFromPos(t *testing.T) {
	h := testHub(t, nil, 0)
	// A holder for the channel, so its epoch lasts the whole test.
	_, hold, _ := h.Subscribe(&recorder{}, "hold", mustPattern(t, "c", ""))
	defer hold()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				mustPublish(t, h, "c", "", "1")
			}
		}
	})
	type joined struct {
		pos   wire.Position
		r     *recorder
		unsub func()
	}
	var js []joined
	for range 50 {
		r := &recorder{}
		pos, u, _ := h.Subscribe(r, "s", mustPattern(t, "c", ""))
		js = append(js, joined{pos, r, u})
		// Let the publisher move on, so each subscription joins a different head.
		for head, _ := h.Head("c"); head.Offset <= pos.Offset; head, _ = h.Head("c") {
			runtime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	head, _ := h.Head("c")
	for i, j := range js {
		j.unsub()
		next := j.pos.Offset + 1
		for _, g := range j.r.take() {
			if g.Pos.Epoch != j.pos.Epoch || g.Pos.Offset != next {
				t.Fatalf("subscription %d from %v got %v, want offset %d", i, j.pos, g.Pos, next)
			}
			next++
		}
		if next != head.Offset+1 {
			t.Errorf("subscription %d from %v ended at offset %d, want %d", i, j.pos, next-1, head.Offset)
		}
	}
}

// TestChurn subscribes, unsubscribes and publishes from many goroutines at once, for the race
// detector, and checks that nothing is left behind once everyone has gone.
func TestChurn(t *testing.T) {
	h := testHub(t, nil, 0)
	globs := []string{"a", "a/b", "a/*", "a/**", "*/b", "**", "a/b/c", "a/*/c", "b/**"}
	names := []string{"a", "a/b", "a/c", "a/b/c", "b/b", "b/x/y", "c"}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			var held []func()
			for i := range 2000 {
				switch (i + w) % 3 {
				case 0:
					_, u, _ := h.Subscribe(&recorder{}, "s", mustPattern(t, globs[(i*7+w)%len(globs)], ""))
					held = append(held, u)
				case 1:
					if len(held) > 0 {
						k := (i * 13) % len(held)
						held[k]()
						held = append(held[:k], held[k+1:]...)
					}
				}
				mustPublish(t, h, names[(i*5+w)%len(names)], "", "1")
			}
			for _, u := range held {
				u()
			}
		})
	}
	wg.Wait()
	if s := h.Stats(); s.Channels != 0 || s.Tokens != 0 || s.Subscriptions != 0 {
		t.Errorf("stats %+v, want everything gone", s)
	}
}
