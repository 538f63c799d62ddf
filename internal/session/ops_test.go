package session

import (
	"context"
	"testing"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/wire"
)

// otherVerifier verifies every token as another identity.
type otherVerifier struct{}

func (otherVerifier) Verify(string) (auth.Identity, error) { return auth.Identity{Subject: "v"}, nil }

// TestOperationsRefuseWithFaults: every refusal the core decides itself is a *fault.Error with
// its code and field, which any protocol can put in its own frame.
func TestOperationsRefuseWithFaults(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		cfg   Config
		deps  Deps
		op    func(s *Session) error
		code  fault.Code
		field string
	}{
		{name: "a table with none served", op: func(s *Session) error {
			return s.Subscribe(ctx, SubscribeRequest{Sub: "s", Table: "public.t"})
		}, code: fault.CodeUnknownTable, field: "table"},
		{name: "a channel with none served", op: func(s *Session) error {
			return s.Subscribe(ctx, SubscribeRequest{Sub: "s", Channel: "c"})
		}, code: fault.CodeUnavailable},
		{name: "a sub taken", deps: Deps{Channels: fakeChannels{}}, op: func(s *Session) error {
			if err := s.Subscribe(ctx, SubscribeRequest{Sub: "s", Channel: "c"}); err != nil {
				return err
			}
			return s.Subscribe(ctx, SubscribeRequest{Sub: "s", Channel: "d"})
		}, code: fault.CodeDuplicateSubscription, field: "sub"},
		{name: "one subscription too many", cfg: Config{MaxSubscriptions: 1}, deps: Deps{Channels: fakeChannels{}}, op: func(s *Session) error {
			if err := s.Subscribe(ctx, SubscribeRequest{Sub: "r", Channel: "c"}); err != nil {
				return err
			}
			return s.Subscribe(ctx, SubscribeRequest{Sub: "s", Channel: "c"})
		}, code: fault.CodeTooManySubscriptions},
		{name: "a channel position on a pattern", deps: Deps{Channels: headChannels{}}, op: func(s *Session) error {
			return s.Subscribe(ctx, SubscribeRequest{Sub: "s", Channel: "c/*", From: wire.ChannelPosition("e", 1)})
		}, code: fault.CodeBadPosition, field: "from"},
		{name: "a position past the head", deps: Deps{Channels: headChannels{}}, op: func(s *Session) error {
			return s.Subscribe(ctx, SubscribeRequest{Sub: "s", Channel: "c", From: wire.ChannelPosition("e", 10)})
		}, code: fault.CodeBadPosition, field: "from"},
		{name: "no such subscription", op: func(s *Session) error { return s.Unsubscribe("s") },
			code: fault.CodeNotFound, field: "sub"},
		{name: "publish not allowed", deps: Deps{Channels: fakeChannels{}}, op: func(s *Session) error {
			_, err := s.Publish("c", "", []byte("1"))
			return err
		}, code: fault.CodePublishNotAllowed},
		{name: "publish with no channels served", cfg: Config{ClientPublish: true}, op: func(s *Session) error {
			_, err := s.Publish("c", "", []byte("1"))
			return err
		}, code: fault.CodeUnavailable},
		{name: "refresh with no verifier", op: func(s *Session) error {
			_, err := s.Refresh("t")
			return err
		}, code: fault.CodeUnauthorized},
		{name: "refresh as another identity", deps: Deps{Verifier: otherVerifier{}}, op: func(s *Session) error {
			_, err := s.Refresh("t")
			return err
		}, code: fault.CodeForbidden, field: "token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Codec = wire.Codec{}
			s, err := New(tt.cfg, tt.deps, newGated(), auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Abort()
			err = tt.op(s)
			fe, ok := fault.As(err)
			if !ok || fe.Code != tt.code || fe.Field != tt.field || fe.Message == "" {
				t.Fatalf("got %v, want a *fault.Error %s (field %q) with a message", err, tt.code, tt.field)
			}
		})
	}
}
