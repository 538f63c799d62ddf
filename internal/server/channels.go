package server

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/cluster"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
)

// channels adapts the node's channel hub to what sessions and the publish API ask of it,
// enforces the node's limit on a publication's size for both, and turns the hub's refusals into
// client-facing errors.
type channels struct {
	hub        *channel.Hub
	maxPublish int          // the largest data of one publication, compacted, in bytes
	peers      *peers       // nil when the node is alone
	unavail    *unavailable // counts and logs what is refused as unavailable
}

var _ session.Channels = (*channels)(nil)

func newChannels(b channel.Bus, fanout channel.Config, maxPublish int) (*channels, error) {
	fanout.Bus = b
	hub, err := channel.New(fanout)
	if err != nil {
		return nil, err
	}
	return &channels{hub: hub, maxPublish: maxPublish}, nil
}

func (c *channels) Subscribe(s stream.Receiver, sub, pattern, event string, from stream.Position) (session.ChannelSubscription, error) {
	cs, err := c.subscribe(s, sub, pattern, event, from)
	return cs, c.unavail.note(opChannelSubscribe, err)
}

func (c *channels) subscribe(s stream.Receiver, sub, pattern, event string, from stream.Position) (session.ChannelSubscription, error) {
	p, err := channel.ParsePattern(pattern, event)
	if err != nil {
		return session.ChannelSubscription{}, err
	}
	var release func()
	if c.peers != nil {
		// Filed before the subscription reads the channel's head: every publication past the
		// head finds this node in the interest index (docs/ARCHITECTURE.md, Many nodes).
		owner, token := cluster.ChannelInterest(p)
		subject := ""
		if id, ok := s.(interface{ Identity() auth.Identity }); ok {
			subject = id.Identity().Subject
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		release, err = c.peers.node.Watch(ctx, owner, token, subject)
		cancel()
		if err != nil {
			return session.ChannelSubscription{}, shareError(err)
		}
	}
	// A resume reads the channel's history (with a shared broker, from Redis) under the
	// channel's lock as it joins: see channel.Hub.SubscribeFrom.
	start, unsubscribe, err := c.hub.SubscribeFrom(s, sub, p, from)
	if err != nil {
		if release != nil {
			release()
		}
		return session.ChannelSubscription{}, err
	}
	if release != nil {
		hubUnsubscribe := unsubscribe
		unsubscribe = func() { hubUnsubscribe(); release() }
	}
	return session.ChannelSubscription{Head: start.Pos, Replay: start.Replay, Unsubscribe: unsubscribe}, nil
}

func (c *channels) Publish(name, event string, data json.RawMessage) (stream.Position, error) {
	pos, err := c.publish(name, event, data)
	return pos, c.unavail.note(opPublish, err)
}

func (c *channels) publish(name, event string, data json.RawMessage) (stream.Position, error) {
	if len(data) > c.maxPublish {
		return stream.Position{}, &fault.Error{Code: fault.CodeFrameTooLarge, Field: "data", Message: fmt.Sprintf(
			"data is %d bytes compacted, more than limits.max_publish_bytes (%d); publish less per message", len(data), c.maxPublish)}
	}
	pos, err := c.hub.Publish(name, event, data)
	if err != nil {
		return stream.Position{}, err
	}
	return pos, nil
}
