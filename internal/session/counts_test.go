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

// headTable attaches any table subscription starting after head.
type headTable struct{ head stream.Position }

func (h headTable) Subscribe(context.Context, stream.Receiver, SubscribeRequest) (TableSubscription, error) {
	return TableSubscription{Head: h.head, Unsubscribe: func() {}}, nil
}

// ownedChannels attaches any channel subscription at head, owed replay.
type ownedChannels struct {
	fakeChannels
	head   stream.Position
	replay []*stream.Item
}

func (c ownedChannels) Subscribe(stream.Receiver, string, string, string, wire.Position) (ChannelSubscription, error) {
	return ChannelSubscription{Head: c.head, Replay: c.replay, Unsubscribe: func() {}}, nil
}

// TestCountsResumes: a subscription that asks to resume is counted once by how it started:
// replayed when its producer started it right after from, history_expired or stream_reset when
// it started with that resync. One that does not ask to resume is not counted.
func TestCountsResumes(t *testing.T) {
	var counts Counts
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	from := stream.TablePosition(100, 0)
	later := stream.TablePosition(200, 0)
	msg := stream.NewMessage(&stream.Message{Channel: "room", Pos: stream.ChannelPosition("e1", 4)})
	reset := stream.NewGap(&stream.Gap{First: stream.ChannelPosition("e2", 1), Last: stream.ChannelPosition("e2", 3), Reason: stream.ReasonStreamReset})
	for _, c := range []struct {
		tables   Tables
		channels Channels
		req      SubscribeRequest
	}{
		{headTable{from}, fakeChannels{}, SubscribeRequest{Sub: "a", Table: "public.items", From: from}},
		{headTable{later}, fakeChannels{}, SubscribeRequest{Sub: "b", Table: "public.items", From: from}},
		{headTable{later}, fakeChannels{}, SubscribeRequest{Sub: "c", Table: "public.items"}},
		{oneTable{}, ownedChannels{head: stream.ChannelPosition("e1", 4), replay: []*stream.Item{msg}}, SubscribeRequest{Sub: "d", Channel: "room", From: stream.ChannelPosition("e1", 3)}},
		{oneTable{}, ownedChannels{head: stream.ChannelPosition("e1", 3)}, SubscribeRequest{Sub: "e", Channel: "room", From: stream.ChannelPosition("e1", 3)}},
		{oneTable{}, ownedChannels{head: stream.ChannelPosition("e2", 3), replay: []*stream.Item{reset}}, SubscribeRequest{Sub: "f", Channel: "room", From: stream.ChannelPosition("e1", 3)}},
	} {
		g := newGated()
		close(g.gate)
		s, err := New(Config{Codec: wire.Codec{}, Counts: &counts}, Deps{Channels: c.channels, Tables: c.tables}, g, auth.Identity{Subject: "ada"})
		if err != nil {
			t.Fatal(err)
		}
		go s.Run(ctx)
		if err := s.Subscribe(ctx, c.req); err != nil {
			t.Fatalf("%s: %v", c.req.Sub, err)
		}
		s.Close(CloseNormal, "bye")
		<-s.Done()
	}
	for _, w := range []struct {
		kind SubscriptionKind
		o    ResumeOutcome
		n    uint64
	}{
		{KindTable, ResumeReplayed, 1}, {KindTable, ResumeHistoryExpired, 1}, {KindTable, ResumeStreamReset, 0},
		{KindChannel, ResumeReplayed, 2}, {KindChannel, ResumeHistoryExpired, 0}, {KindChannel, ResumeStreamReset, 1},
	} {
		if got := counts.Resumes(w.kind, w.o); got != w.n {
			t.Errorf("%s resumes %s: %d, want %d", w.kind, w.o, got, w.n)
		}
	}
}
