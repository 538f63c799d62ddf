package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// denyPublish is a Policy that lets identities subscribe to channels whose name starts with
// their "room" claim, and publish nowhere.
type denyPublish struct{}

func (denyPublish) Channel(action, ch, _ string, id auth.Identity) error {
	room, _ := id.Claims["room"].(string)
	if action == "subscribe" && room != "" && strings.HasPrefix(ch, room) {
		return nil
	}
	return &fault.Error{Code: fault.CodeForbidden, Message: "no"}
}

// fixedVerifier verifies any token as the identity it names in Claims["room"].
type fixedVerifier struct{}

func (fixedVerifier) Verify(token string) (auth.Identity, error) {
	return auth.Identity{Subject: "u", Claims: map[string]any{"room": token}}, nil
}

// TestPolicyOnChannelsAndRefresh: the session asks its Policy before a channel subscription
// and a publication; a refresh whose claims no longer allow a subscription ends it with an
// unprompted unsubscribed each, the session going on; a policy_error gap is explained by one error
// naming the rule per subscription, however many gaps follow.
func TestPolicyOnChannelsAndRefresh(t *testing.T) {
	g := newGated()
	close(g.gate)
	s, err := New(Config{Codec: wire.Codec{}, ClientPublish: true},
		Deps{Channels: fakeChannels{}, Policy: denyPublish{}, Verifier: fixedVerifier{}}, g,
		auth.Identity{Subject: "u", Claims: map[string]any{"room": "a/"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	defer func() { cancel(); <-s.Done() }()

	if err := s.Subscribe(ctx, SubscribeRequest{Ref: "1", Sub: "x", Channel: "b/1"}); err == nil || err.(*fault.Error).Code != fault.CodeForbidden {
		t.Fatalf("subscribe outside the room: %v, want forbidden", err)
	}
	for _, sub := range []string{"a1", "a2"} {
		if err := s.Subscribe(ctx, SubscribeRequest{Ref: sub, Sub: sub, Channel: "a/" + sub}); err != nil {
			t.Fatalf("subscribe %s: %v", sub, err)
		}
	}
	if _, err := s.Publish("a/a1", "", []byte(`1`)); err == nil || err.(*fault.Error).Code != fault.CodeForbidden {
		t.Fatalf("publish: %v, want forbidden", err)
	}
	at := stream.TablePosition(10, 1)
	for range 3 {
		s.Push("a2", stream.NewGap(&stream.Gap{First: at, Last: at, Reason: stream.ReasonPolicyError, Rule: `policy.tables."public.t".row`}))
	}
	if _, err := s.Refresh("b/"); err != nil { // a token for room b/: neither subscription's channel
		t.Fatalf("refresh: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		all := strings.Join(g.frames, "\n")
		g.mu.Unlock()
		if strings.Count(all, `"type":"unsubscribed"`) == 2 || time.Now().After(deadline) {
			if n := strings.Count(all, `"code":"policy_error"`); n != 1 || !strings.Contains(all, `policy.tables.\"public.t\".row`) {
				t.Errorf("%d policy_error errors, want one naming the rule:\n%s", n, all)
			}
			for _, sub := range []string{"a1", "a2"} {
				if !strings.Contains(all, `{"type":"unsubscribed","sub":"`+sub+`","code":"forbidden"`) {
					t.Errorf("no unprompted unsubscribed forbidden for %s:\n%s", sub, all)
				}
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	left := len(s.subs)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d subscriptions left after the refresh revoked both", left)
	}
}
