package presence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/store/memory"
	"github.com/heraldrt/herald/internal/stream"
)

// recorder is a presence subscriber that writes down what it is pushed, as "kind:ids".
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) Push(sub string, it *stream.Item) {
	p := it.Presence
	ids := make([]string, len(p.Members))
	for i, m := range p.Members {
		ids[i] = m.ID
		if len(m.Meta) > 0 {
			ids[i] += string(m.Meta)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, sub+" "+p.Channel+" "+string(p.Kind)+":"+strings.Join(ids, ","))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newPresence(t *testing.T, cfg presence.Config) (*presence.Presence, *memory.Presence, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Now = c.Now
	st := memory.NewPresence()
	p, err := presence.New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	return p, st, c
}

func member(id, meta string) presence.Member {
	m := presence.Member{ID: id, Subject: "u-" + id}
	if meta != "" {
		m.Meta = json.RawMessage(meta)
	}
	return m
}

func want(t *testing.T, r *recorder, w ...string) {
	t.Helper()
	got := r.take()
	if strings.Join(got, "\n") != strings.Join(w, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
	}
}

func TestRosterThenJoinAndLeave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, st, _ := newPresence(t, presence.Config{})
	var r recorder
	if err := p.Track(ctx, "room", member("a", `{"s":"on"}`)); err != nil {
		t.Fatal(err)
	}
	unwatch, err := p.Watch(ctx, "room", &r, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want(t, &r, `s1 room roster:a{"s":"on"}`)
	if err := p.Track(ctx, "room", member("b", "")); err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ctx, "room", member("a", `{"s":"away"}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ctx, "hall", member("c", "")); err != nil { // another channel: not seen
		t.Fatal(err)
	}
	if ok, err := p.Untrack(ctx, "room", "b"); !ok || err != nil {
		t.Fatalf("Untrack = %v, %v", ok, err)
	}
	if ok, _ := p.Untrack(ctx, "room", "b"); ok {
		t.Fatal("second Untrack: ok; want false, and no second leave")
	}
	want(t, &r, "s1 room join:b", `s1 room join:a{"s":"away"}`, "s1 room leave:b")
	if got := p.Members(); got != 2 { // a (its meta replaced, once) and c
		t.Errorf("Members = %d, want 2", got)
	}
	unwatch()
	unwatch()
	if err := p.Track(ctx, "room", member("d", "")); err != nil {
		t.Fatal(err)
	}
	want(t, &r)
	p.Untrack(ctx, "room", "a")
	p.Untrack(ctx, "room", "d")
	p.Untrack(ctx, "hall", "c")
	if ch, w := p.Local(); ch != 0 || w != 0 || st.Channels() != 0 {
		t.Fatalf("after everyone left: %d local channels, %d watched, %d stored; want 0 (empty channels forgotten)", ch, w, st.Channels())
	}
	if got := p.Members(); got != 0 {
		t.Errorf("Members after everyone left = %d, want 0", got)
	}
}

func TestExpiryAnnouncesLeave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, st, c := newPresence(t, presence.Config{TTL: 3 * time.Second})
	var r recorder
	// A member of a node that stopped beating: tracked in the store by someone else.
	if _, err := st.Track(ctx, "room", member("dead", ""), c.Now(), 3*time.Second, 10); err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ctx, "room", member("a", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	want(t, &r, "s room roster:a,dead")
	// Sweeps every TTL/3: this node's member is renewed each time, the other is not.
	for range 4 {
		c.add(time.Second)
		p.Sweep(ctx)
	}
	want(t, &r, "s room leave:dead")
	c.add(time.Second)
	p.Sweep(ctx)
	want(t, &r)
	if ms, _ := st.Members(ctx, "room", c.Now()); len(ms) != 1 || ms[0].ID != "a" {
		t.Fatalf("members = %v; want a, kept alive by its heartbeats", ms)
	}
}

func TestHeartbeatOfGoneMemberJoinsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, st, c := newPresence(t, presence.Config{TTL: 3 * time.Second})
	var r recorder
	if err := p.Track(ctx, "room", member("a", `{"k":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.Heartbeat(ctx, "room", "a"); err != nil {
		t.Fatalf("Heartbeat of a live member: %v", err)
	}
	if _, err := p.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	want(t, &r, `s room roster:a{"k":1}`)
	// The node stalls past the TTL: its member expires in the store.
	c.add(4 * time.Second)
	if err := p.Heartbeat(ctx, "room", "a"); !errors.Is(err, presence.ErrGone) {
		t.Fatalf("Heartbeat after the TTL: %v; want ErrGone (join again)", err)
	}
	// The sweeper's heartbeat finds it gone and joins it again, with its meta.
	p.Sweep(ctx)
	want(t, &r, `s room join:a{"k":1}`)
	if ms, _ := st.Members(ctx, "room", c.Now()); len(ms) != 1 {
		t.Fatalf("members = %v; want a again", ms)
	}
}

func TestMemberCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, _, _ := newPresence(t, presence.Config{MaxMembers: 3})
	for i := range 3 {
		if err := p.Track(ctx, "room", member(fmt.Sprint(i), "")); err != nil {
			t.Fatal(err)
		}
	}
	err := p.Track(ctx, "room", member("x", ""))
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.CodePresenceFull {
		t.Fatalf("fourth member of a channel of 3: %v; want presence_full", err)
	}
	if err := p.Track(ctx, "room", member("0", `{"meta":"new"}`)); err != nil {
		t.Fatalf("a member at the cap updating its meta: %v", err)
	}
	if err := p.Track(ctx, "other", member("x", "")); err != nil {
		t.Fatalf("another channel: %v", err)
	}
}

func TestDefaultCapIs256(t *testing.T) {
	t.Parallel()
	p, _, _ := newPresence(t, presence.Config{})
	if got := p.Config().MaxMembers; got != 256 {
		t.Fatalf("default max members %d; want 256", got)
	}
}

func TestMetaBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, st, _ := newPresence(t, presence.Config{MaxMetaBytes: 16})
	if err := p.Track(ctx, "room", member("a", `{"n":"01234567"}`)); err != nil { // 16 bytes
		t.Fatalf("meta at the bound: %v", err)
	}
	err := p.Track(ctx, "room", member("b", `{"n":"012345678"}`)) // 17 bytes
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.CodeFrameTooLarge || fe.Field != "meta" {
		t.Fatalf("meta past the bound: %v; want frame_too_large on meta", err)
	}
	if ms, _ := st.Members(ctx, "room", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); len(ms) != 1 {
		t.Fatalf("members %v; the refused one must not be stored", ms)
	}
}

func TestCompactMeta(t *testing.T) {
	t.Parallel()
	for in, w := range map[string]string{"": "", "null": "", `{ "a" : [1, 2] }`: `{"a":[1,2]}`} {
		got, err := presence.CompactMeta(json.RawMessage(in))
		if err != nil || string(got) != w {
			t.Errorf("CompactMeta(%q) = %q, %v; want %q", in, got, err, w)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []presence.Config{{TTL: time.Millisecond}, {MaxMembers: -1}, {MaxMetaBytes: 1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil; want an error", c)
		}
	}
	if err := (presence.Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
}

func TestRunOwnsOneSweeper(t *testing.T) {
	t.Parallel()
	p, err := presence.New(presence.Config{TTL: time.Second}, memory.NewPresence())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// failingExpire is a store whose Expire removes what it should and then fails, as a Redis store
// that lost its connection part way through the shards does.
type failingExpire struct{ *memory.Presence }

func (f failingExpire) Expire(ctx context.Context, now time.Time) ([]presence.Left, error) {
	left, err := f.Presence.Expire(ctx, now)
	if err != nil {
		return left, err
	}
	return left, errors.New("connection lost after the first shard")
}

// The members an expiry removed before it failed are gone: their leaves are announced. The
// channel is one this node holds nothing in, so no lease covers it and Expire takes it; its
// leave reaches the other nodes through the relay.
func TestExpiryThatFailsPartWayAnnouncesWhatItRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := memory.NewPresence()
	var rl relayLog
	p, err := presence.New(presence.Config{TTL: 3 * time.Second, Now: c.Now, Relay: &rl}, failingExpire{st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Track(ctx, "room", member("dead", ""), c.Now(), 3*time.Second, 10); err != nil {
		t.Fatal(err)
	}
	c.add(4 * time.Second)
	p.Sweep(ctx)
	rl.want(t, "room leave:dead")
	if n := st.Channels(); n != 0 {
		t.Fatalf("store holds %d channels; want 0", n)
	}
}

// relayLog is a Relay that writes down what it is handed, as "channel kind:id".
type relayLog struct {
	mu  sync.Mutex
	got []string
}

func (l *relayLog) Relay(channel string, ev presence.Event) {
	s := channel + " " + string(ev.Kind) + ":" + ev.Member.ID + string(ev.Member.Meta)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, s)
}

func (l *relayLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.got
	l.got = nil
	return g
}

func (l *relayLog) want(t *testing.T, w ...string) {
	t.Helper()
	if got := l.take(); strings.Join(got, "\n") != strings.Join(w, "\n") {
		t.Fatalf("relayed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
	}
}

// Every join and leave this node makes is relayed, in order; a roster, and what Apply brings,
// are not.
func TestRelayCarriesThisNodesEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rl relayLog
	p, st, c := newPresence(t, presence.Config{TTL: 3 * time.Second, MaxMembers: 2, Relay: &rl})
	var r recorder
	if _, err := p.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ctx, "room", member("a", `{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ctx, "room", member("a", `{"n":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ctx, "room", member("b", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Untrack(ctx, "room", "b"); err != nil {
		t.Fatal(err)
	}
	p.Apply("room", presence.Event{Kind: stream.PresenceJoin, Member: member("remote", "")})
	rl.want(t, `room join:a{"n":1}`, `room join:a{"n":2}`, "room join:b", "room leave:b")
	want(t, &r, "s room roster:", `s room join:a{"n":1}`, `s room join:a{"n":2}`, "s room join:b", "s room leave:b", "s room join:remote")

	// A member of a dead node expires: this node leads the channel, and announces it.
	if _, err := st.Track(ctx, "room", member("dead", ""), c.Now(), 3*time.Second, 10); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.add(time.Second)
		p.Sweep(ctx)
	}
	rl.want(t, "room leave:dead")

	// This node stalls past the TTL: a is gone, and joins again, with its meta.
	c.add(4 * time.Second)
	p.Sweep(ctx)
	rl.want(t, `room join:a{"n":2}`)

	// It stalls again, and other nodes' members take the places meanwhile: a cannot join again,
	// and its leave says so.
	c.add(4 * time.Second)
	for _, id := range []string{"x", "y"} {
		if _, err := st.Track(ctx, "room", member(id, ""), c.Now(), time.Hour, 2); err != nil {
			t.Fatal(err)
		}
	}
	p.Sweep(ctx)
	rl.want(t, "room leave:a")
	want(t, &r, "s room leave:dead", `s room join:a{"n":2}`, "s room leave:a")
	if ch, _ := p.Local(); ch != 0 {
		t.Fatalf("%d channels with local members; want 0: a is gone for good", ch)
	}
	if got := p.Members(); got != 0 {
		t.Errorf("Members = %d, want 0: a is gone for good", got)
	}
}

// Apply pushes another node's event to this node's subscribers of that channel only, a leave
// without meta, and ignores a kind it does not know.
func TestApplyReachesLocalSubscribers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rl relayLog
	p, _, _ := newPresence(t, presence.Config{Relay: &rl})
	var room, hall recorder
	if _, err := p.Watch(ctx, "room", &room, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Watch(ctx, "hall", &hall, "s2"); err != nil {
		t.Fatal(err)
	}
	want(t, &room, "s1 room roster:")
	want(t, &hall, "s2 hall roster:")
	p.Apply("room", presence.Event{Kind: stream.PresenceJoin, Member: member("x", `{"k":1}`)})
	p.Apply("room", presence.Event{Kind: stream.PresenceLeave, Member: member("x", `{"k":1}`)})
	p.Apply("room", presence.Event{Kind: stream.PresenceRoster, Member: member("y", "")})
	p.Apply("nobody-watches", presence.Event{Kind: stream.PresenceJoin, Member: member("z", "")})
	want(t, &room, `s1 room join:x{"k":1}`, "s1 room leave:x")
	want(t, &hall)
	rl.want(t)
	if n := p.Channels(); n != 2 {
		t.Fatalf("%d channels known; want 2 (an event for a channel nobody here watches leaves nothing)", n)
	}
}

// hookedMembers is a store that runs a function before each roster read returns.
type hookedMembers struct {
	*memory.Presence
	before func(n int)
	reads  int
}

func (h *hookedMembers) Members(ctx context.Context, channel string, now time.Time) ([]presence.Member, error) {
	ms, err := h.Presence.Members(ctx, channel, now)
	h.reads++
	h.before(h.reads)
	return ms, err
}

// An event another node made after the roster was read reaches this node while the roster is
// on its way: the new subscriber gets it after the roster, not never.
func TestWatchHoldsWhatArrivesWhileTheRosterIsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var p *presence.Presence
	st := &hookedMembers{Presence: memory.NewPresence()}
	st.before = func(int) {
		p.Apply("room", presence.Event{Kind: stream.PresenceJoin, Member: member("x", "")})
	}
	p, err := presence.New(presence.Config{}, st)
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	if _, err := p.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	want(t, &r, "s room roster:", "s room join:x")
}

// More events than a new subscriber holds arrive while its roster is read: the roster is read
// again, and covers them; a channel that outruns three reads refuses the watch.
func TestWatchReadsTheRosterAgainWhenOutrun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var p *presence.Presence
	flood := 1
	st := &hookedMembers{Presence: memory.NewPresence()}
	st.before = func(n int) {
		if n > flood {
			return
		}
		for i := range 1025 {
			p.Apply("room", presence.Event{Kind: stream.PresenceJoin, Member: member(fmt.Sprint(i), "")})
		}
	}
	p, err := presence.New(presence.Config{}, st)
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	if _, err := p.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	want(t, &r, "s room roster:")
	if st.reads != 2 {
		t.Fatalf("roster read %d times; want 2", st.reads)
	}
	st.reads, flood = 0, 3
	var r2 recorder
	_, err = p.Watch(ctx, "room", &r2, "s2")
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.CodeUnavailable {
		t.Fatalf("a watch outrun three times: %v; want unavailable", err)
	}
	want(t, &r2)
	if _, w := p.Local(); w != 1 {
		t.Fatalf("%d watched channels; want 1 (the refused watcher is gone)", w)
	}
}

// lostLease is a store that lost every lease's prior roster (Redis lost the key): a leader that
// takes over diffs the roster it heard as a follower instead.
type lostLease struct{ *memory.Presence }

func (l lostLease) Sweep(ctx context.Context, channel, node string, now time.Time, ttl time.Duration) (presence.Lease, error) {
	lease, err := l.Presence.Sweep(ctx, channel, node, now, ttl)
	lease.Prior = nil
	return lease, err
}

func TestTakeoverFromTheHeardRoster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := lostLease{memory.NewPresence()}
	var ra, rb relayLog
	a, err := presence.New(presence.Config{TTL: 3 * time.Second, Node: "n1", Now: c.Now, Relay: &ra}, st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := presence.New(presence.Config{TTL: 3 * time.Second, Node: "n2", Now: c.Now, Relay: &rb}, st)
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	if _, err := b.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	if err := a.Track(ctx, "room", member("a1", "")); err != nil {
		t.Fatal(err)
	}
	a.Sweep(ctx)
	b.Sweep(ctx) // follows, and hears a1
	// a dies; a1's untrack reached the store, its leave never left a.
	if _, err := a.Untrack(ctx, "room", "a1"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.add(time.Second)
		b.Sweep(ctx)
	}
	want(t, &r, "s room roster:", "s room leave:a1")
	rb.want(t, "room leave:a1")
}

// A node left with nothing in a channel lets its claim go, and forgets the channel.
func TestSweepLetsGoOfEmptyChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, st, _ := newPresence(t, presence.Config{})
	var r recorder
	unwatch, err := p.Watch(ctx, "hall", &r, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Track(ctx, "room", member("a", "")); err != nil {
		t.Fatal(err)
	}
	p.Sweep(ctx)
	if n, m := p.Channels(), st.Channels(); n != 2 || m != 2 {
		t.Fatalf("%d channels known, %d stored; want 2 and 2 (each claimed)", n, m)
	}
	unwatch()
	if _, err := p.Untrack(ctx, "room", "a"); err != nil {
		t.Fatal(err)
	}
	p.Sweep(ctx)
	if n, m := p.Channels(), st.Channels(); n != 0 || m != 0 {
		t.Fatalf("%d channels known, %d stored; want 0 and 0", n, m)
	}
}

// A channel's events reach its subscribers and the relay in one order, whatever the
// concurrency.
func TestRelayOrderIsTheSubscribersOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rl relayLog
	p, _, _ := newPresence(t, presence.Config{Relay: &rl, MaxMembers: 1000})
	var r recorder
	if _, err := p.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				id := fmt.Sprint(g, "-", i%5)
				if i%2 == 0 {
					_ = p.Track(ctx, "room", member(id, ""))
				} else {
					_, _ = p.Untrack(ctx, "room", id)
				}
			}
		}()
	}
	wg.Wait()
	got := r.take()[1:] // after the roster
	relayed := rl.take()
	if len(relayed) != len(got) {
		t.Fatalf("%d relayed, %d pushed; want the same", len(relayed), len(got))
	}
	for i := range got {
		if got[i] != "s "+relayed[i] {
			t.Fatalf("event %d: pushed %q, relayed %q; want one order", i, got[i], relayed[i])
		}
	}
}

func TestDefaultNodeIDs(t *testing.T) {
	t.Parallel()
	a, _, _ := newPresence(t, presence.Config{})
	b, _, _ := newPresence(t, presence.Config{})
	if a.Config().Node == "" || a.Config().Node == b.Config().Node {
		t.Fatalf("default node ids %q and %q; want two distinct ids", a.Config().Node, b.Config().Node)
	}
	if n, _, _ := newPresence(t, presence.Config{Node: "n1"}); n.Config().Node != "n1" {
		t.Fatalf("node %q; want the configured n1", n.Config().Node)
	}
}
