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

// The members an expiry removed before it failed are gone: their leaves are announced.
func TestExpiryThatFailsPartWayAnnouncesWhatItRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := memory.NewPresence()
	p, err := presence.New(presence.Config{TTL: 3 * time.Second, Now: c.Now}, failingExpire{st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Track(ctx, "room", member("dead", ""), c.Now(), 3*time.Second, 10); err != nil {
		t.Fatal(err)
	}
	var r recorder
	if _, err := p.Watch(ctx, "room", &r, "s"); err != nil {
		t.Fatal(err)
	}
	want(t, &r, "s room roster:dead")
	c.add(4 * time.Second)
	p.Sweep(ctx)
	want(t, &r, "s room leave:dead")
}
