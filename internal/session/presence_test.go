package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// fakePresence records what a session asks of presence, and hands a watcher a roster of
// whoever is tracked.
type fakePresence struct {
	mu       sync.Mutex
	members  map[string]stream.Member // channel + " " + id
	untracks []string
	watchers []func(*stream.Item)
	failWith error
}

func (f *fakePresence) Track(_ context.Context, ch string, m stream.Member) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return f.failWith
	}
	f.members[ch+" "+m.ID] = m
	return nil
}

func (f *fakePresence) Untrack(_ context.Context, ch, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.members[ch+" "+id]
	delete(f.members, ch+" "+id)
	f.untracks = append(f.untracks, ch+" "+id)
	return ok, nil
}

func (f *fakePresence) Watch(_ context.Context, ch string, r stream.Receiver, sub string) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ms []stream.Member
	for k, m := range f.members {
		if strings.HasPrefix(k, ch+" ") {
			ms = append(ms, m)
		}
	}
	f.watchers = append(f.watchers, func(it *stream.Item) { r.Push(sub, it) })
	r.Push(sub, stream.NewPresence(&stream.Presence{Channel: ch, Kind: stream.PresenceRoster, Members: ms}))
	return func() {}, nil
}

// presencePolicy allows presence on rooms/ and subscriptions everywhere.
type presencePolicy struct{}

func (presencePolicy) Channel(action, ch, _ string, _ auth.Identity) error {
	if action == "presence" && !strings.HasPrefix(ch, "rooms/") {
		return &fault.Error{Code: fault.CodeForbidden, Message: "no"}
	}
	return nil
}

// TestPresenceOps: track asks the presence rule and names the member by subject and session;
// a connection tracks at most MaxSubscriptions channels; a refused track leaves nothing
// behind; a presence subscription's roster follows its subscribed, and its joins follow on
// the control lane; the session's end untracks every channel it tracked.
func TestPresenceOps(t *testing.T) {
	g := newGated()
	close(g.gate)
	fp := &fakePresence{members: map[string]stream.Member{}}
	s, err := New(Config{Codec: wire.Codec{}, MaxSubscriptions: 2},
		Deps{Channels: fakeChannels{}, Policy: presencePolicy{}, Presence: fp}, g, auth.Identity{Subject: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	defer func() { cancel(); <-s.Done() }()

	if _, err := s.Track(ctx, "quiet/1", nil); err == nil || err.(*fault.Error).Code != fault.CodeForbidden {
		t.Fatalf("track without the presence rule: %v; want forbidden", err)
	}
	member, err := s.Track(ctx, "rooms/1", []byte(`{"n":1}`))
	if err != nil || member != "ada/"+s.ID() {
		t.Fatalf("Track = %q, %v; want ada/%s", member, err, s.ID())
	}
	if again, err := s.Track(ctx, "rooms/1", []byte(`{"n":2}`)); err != nil || again != member {
		t.Fatalf("tracking the same channel again = %q, %v; want the same member", again, err)
	}
	fp.failWith = &fault.Error{Code: fault.CodePresenceFull, Message: "full"}
	if _, err := s.Track(ctx, "rooms/2", nil); err == nil || err.(*fault.Error).Code != fault.CodePresenceFull {
		t.Fatalf("a refused track: %v; want presence_full passed on", err)
	}
	fp.failWith = nil
	if _, err := s.Track(ctx, "rooms/2", nil); err != nil {
		t.Fatalf("track after a refused one: %v (the refusal must not hold a place)", err)
	}
	if _, err := s.Track(ctx, "rooms/3", nil); err == nil || err.(*fault.Error).Code != fault.CodeTooManySubscriptions {
		t.Fatalf("a third channel with MaxSubscriptions 2: %v; want too_many_subscriptions", err)
	}
	if err := s.Untrack(ctx, "rooms/9"); err == nil || err.(*fault.Error).Code != fault.CodeNotFound {
		t.Fatalf("untrack of a channel not tracked: %v; want not_found", err)
	}

	if err := s.Subscribe(ctx, SubscribeRequest{Ref: "r1", Sub: "p", Channel: "rooms/1", Presence: true}); err != nil {
		t.Fatal(err)
	}
	fp.mu.Lock()
	push := fp.watchers[0]
	fp.mu.Unlock()
	push(stream.NewPresence(&stream.Presence{Channel: "rooms/1", Kind: stream.PresenceJoin,
		Members: []stream.Member{{ID: "bob/x", Subject: "bob"}}}))

	want := []string{
		`{"type":"subscribed","id":"r1","sub":"p"}`,
		`{"type":"roster","sub":"p","channel":"rooms/1","members":[{"id":"` + member + `","subject":"ada","meta":{"n":2}}]}`,
		`{"type":"join","sub":"p","channel":"rooms/1","member":{"id":"bob/x","subject":"bob"}}`,
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		got := strings.Join(g.frames, "\n")
		g.mu.Unlock()
		if got == strings.Join(want, "\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("frames:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}

	s.Close(CloseNormal, "bye")
	<-s.Done()
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if len(fp.members) != 0 || len(fp.untracks) != 2 {
		t.Fatalf("after the session ended: members %v, untracks %v; want none left, two untracks", fp.members, fp.untracks)
	}
}

// A refresh whose claims no longer pass a tracked channel's presence rule untracks it and
// says so with an unprompted error naming the channel; the others stay.
func TestPresenceRecheckedOnRefresh(t *testing.T) {
	g := newGated()
	close(g.gate)
	fp := &fakePresence{members: map[string]stream.Member{}}
	s, err := New(Config{Codec: wire.Codec{}},
		Deps{Channels: fakeChannels{}, Policy: roomPresence{}, Presence: fp, Verifier: fixedVerifier{}}, g,
		auth.Identity{Subject: "u", Claims: map[string]any{"room": "a/"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	defer func() { cancel(); <-s.Done() }()
	for _, ch := range []string{"a/1", "b/1"} {
		if _, err := s.Track(ctx, ch, nil); err != nil && ch == "a/1" {
			t.Fatal(err)
		}
	}
	if _, err := s.Refresh("b/"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		got := strings.Join(g.frames, "\n")
		g.mu.Unlock()
		if strings.Contains(got, `"code":"forbidden"`) && strings.Contains(got, `\"a/1\"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("frames %s; want an unprompted forbidden naming a/1", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if len(fp.members) != 0 || len(fp.untracks) != 1 {
		t.Fatalf("members %v, untracks %v; want a/1 untracked", fp.members, fp.untracks)
	}
}

// roomPresence allows presence on channels under the identity's room claim.
type roomPresence struct{}

func (roomPresence) Channel(action, ch, _ string, id auth.Identity) error {
	room, _ := id.Claims["room"].(string)
	if room != "" && strings.HasPrefix(ch, room) {
		return nil
	}
	return &fault.Error{Code: fault.CodeForbidden, Message: "no"}
}

// A presence subscription needs presence served; without it the subscribe is refused.
func TestPresenceNotServed(t *testing.T) {
	s, err := New(Config{Codec: wire.Codec{}}, Deps{Channels: fakeChannels{}}, newGated(), auth.Identity{Subject: "u"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Abort()
	err = s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "p", Channel: "rooms/1", Presence: true})
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.CodeUnavailable || fe.Field != "presence" {
		t.Fatalf("presence subscription without presence: %v; want unavailable on presence", err)
	}
	if _, err := s.Track(context.Background(), "rooms/1", nil); !errors.As(err, &fe) || fe.Code != fault.CodeUnavailable {
		t.Fatalf("track without presence: %v; want unavailable", err)
	}
}
