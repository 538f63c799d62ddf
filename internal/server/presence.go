package server

import (
	"context"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
)

// presences adapts the node's presence to what sessions ask of it: a channel name is checked
// against the channel grammar first, and refused as the channel hub refuses it.
type presences struct {
	p       *presence.Presence
	unavail *unavailable // counts and logs what is refused as unavailable
}

var _ session.Presence = presences{}

func (a presences) Track(ctx context.Context, name string, m stream.Member) error {
	if err := channel.CheckName(name); err != nil {
		return err
	}
	return a.unavail.note(opPresenceTrack, a.p.Track(ctx, name, m))
}

func (a presences) Untrack(ctx context.Context, name, id string) (bool, error) {
	ok, err := a.p.Untrack(ctx, name, id)
	return ok, a.unavail.note(opPresenceUntrack, err)
}

func (a presences) Watch(ctx context.Context, name string, r stream.Receiver, sub string) (func(), error) {
	if err := channel.CheckName(name); err != nil {
		return nil, err
	}
	unwatch, err := a.p.Watch(ctx, name, r, sub)
	return unwatch, a.unavail.note(opPresenceWatch, err)
}
