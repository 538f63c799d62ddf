package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/cluster"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
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

func (c *channels) Subscribe(s stream.Receiver, sub, pattern, event string) (wire.Position, func(), error) {
	head, unsubscribe, err := c.subscribe(s, sub, pattern, event)
	return head, unsubscribe, c.unavail.note(opChannelSubscribe, err)
}

func (c *channels) subscribe(s stream.Receiver, sub, pattern, event string) (wire.Position, func(), error) {
	p, err := channel.ParsePattern(pattern, event)
	if err != nil {
		return wire.Position{}, nil, clientError(err)
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
			return wire.Position{}, nil, shareError(err)
		}
	}
	head, unsubscribe, err := c.hub.Subscribe(s, sub, p)
	if err != nil {
		if release != nil {
			release()
		}
		return wire.Position{}, nil, &wire.Error{Code: wire.CodeUnavailable, Message: "the channel broker did not answer; retry with backoff", Err: err}
	}
	if release != nil {
		hubUnsubscribe := unsubscribe
		unsubscribe = func() { hubUnsubscribe(); release() }
	}
	return head, unsubscribe, nil
}

func (c *channels) Publish(name, event string, data json.RawMessage) (wire.Position, error) {
	pos, err := c.publish(name, event, data)
	return pos, c.unavail.note(opPublish, err)
}

func (c *channels) publish(name, event string, data json.RawMessage) (wire.Position, error) {
	if len(data) > c.maxPublish {
		return wire.Position{}, &wire.Error{Code: wire.CodeFrameTooLarge, Field: "data", Message: fmt.Sprintf(
			"data is %d bytes compacted, more than limits.max_publish_bytes (%d); publish less per message", len(data), c.maxPublish)}
	}
	pos, err := c.hub.Publish(name, event, data)
	if err != nil {
		return wire.Position{}, clientError(err)
	}
	return pos, nil
}

// clientError turns a channel grammar refusal into a bad_frame naming the field, and a full
// fan-out queue or a closing hub into unavailable.
func clientError(err error) error {
	var busy *channel.BusyError
	switch {
	case errors.As(err, &busy):
		return &wire.Error{Code: wire.CodeUnavailable, Err: err, Message: fmt.Sprintf(
			"the node is handing publications to subscribers more slowly than they are published (the fan-out queue stayed full for %s); retry with backoff, or publish less often", busy.Waited)}
	case errors.Is(err, channel.ErrBroker):
		return &wire.Error{Code: wire.CodeUnavailable, Err: err, Message: "the channel broker (the nodes' shared Redis) did not answer, and the publication took no position; retry with backoff"}
	case errors.Is(err, channel.ErrHubClosed):
		return &wire.Error{Code: wire.CodeUnavailable, Err: err, Message: "the node is shutting down; publish to another node or retry"}
	}
	var ce *channel.Error
	if !errors.As(err, &ce) {
		return &wire.Error{Code: wire.CodeInternal, Message: "the channel hub failed", Err: err}
	}
	field := "channel"
	if ce.Reason == channel.ReasonBadEvent {
		field = "event"
	}
	msg := ce.Error()
	if ce.Fix != "" {
		msg += "; " + ce.Fix
	}
	return &wire.Error{Code: wire.CodeBadFrame, Field: field, Message: msg, Err: err}
}
