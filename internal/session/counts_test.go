package session

import (
	"context"
	"errors"
	"testing"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// oneTable attaches any table subscription, or refuses every one with err.
type oneTable struct{ err error }

func (o oneTable) Subscribe(context.Context, stream.Receiver, SubscribeRequest) (TableSubscription, error) {
	if o.err != nil {
		return TableSubscription{}, o.err
	}
	return TableSubscription{Unsubscribe: func() {}}, nil
}

// TestCountsFollowSubscriptions: a session counts into its Counts each subscription that goes
// live, by kind, and its end, however it ends (unsubscribed, or the session's end); a refused
// one is not counted; sessions sharing a Counts add up.
func TestCountsFollowSubscriptions(t *testing.T) {
	var counts Counts
	want := func(step string, liveT, liveC int64, totT, totC uint64) {
		t.Helper()
		if lt, lc, tt, tc := counts.Live(KindTable), counts.Live(KindChannel), counts.Total(KindTable), counts.Total(KindChannel); lt != liveT || lc != liveC || tt != totT || tc != totC {
			t.Fatalf("%s: live table %d channel %d, total table %d channel %d; want %d %d %d %d", step, lt, lc, tt, tc, liveT, liveC, totT, totC)
		}
	}
	newSession := func(tables Tables) *Session {
		g := newGated()
		close(g.gate)
		s, err := New(Config{Codec: wire.Codec{}, Counts: &counts}, Deps{Channels: fakeChannels{}, Tables: tables}, g, auth.Identity{Subject: "ada"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newSession(oneTable{})
	go a.Run(ctx)
	b := newSession(oneTable{err: errors.New("refused")})
	go b.Run(ctx)

	for _, r := range []SubscribeRequest{{Sub: "t1", Table: "public.items"}, {Sub: "t2", Table: "public.items"}, {Sub: "c1", Channel: "room"}} {
		if err := a.Subscribe(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Subscribe(ctx, SubscribeRequest{Sub: "t", Table: "public.items"}); err == nil {
		t.Fatal("the refused table subscription was taken")
	}
	if err := b.Subscribe(ctx, SubscribeRequest{Sub: "c", Channel: "room"}); err != nil {
		t.Fatal(err)
	}
	want("subscribed", 2, 2, 2, 2)
	if err := a.Unsubscribe("t1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Unsubscribe("t1"); err == nil {
		t.Fatal("a second unsubscribe found the subscription")
	}
	want("unsubscribed", 1, 2, 2, 2)
	a.Close(CloseNormal, "bye")
	<-a.Done()
	want("one session ended", 0, 1, 2, 2)
	b.Close(CloseNormal, "bye")
	<-b.Done()
	want("both ended", 0, 0, 2, 2)
}
