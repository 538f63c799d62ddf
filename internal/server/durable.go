package server

import (
	"context"
	"fmt"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
)

// durables adapts the node's durable registry to what sessions ask of it: the holder is the
// identity's subject and app, the name the subscription's sub, and the connection the session.
type durables struct {
	r    *durable.Registry
	node string // this node's id among many; "" alone
}

var _ session.Durable = durables{}

func (d durables) Bind(ctx context.Context, rc stream.Receiver, conn string, r session.SubscribeRequest, end func(*fault.Error)) (session.DurableSubscription, error) {
	mode := durable.Broadcast
	if r.Single {
		mode = durable.Single
	}
	b, err := d.r.Bind(ctx, durable.BindRequest{
		Key:  holderKey(r.Identity, r.Sub),
		Def:  durable.Def{Channel: r.Channel, Event: r.Event, Mode: mode},
		Conn: durable.Conn{ID: conn, Node: d.node}, Receiver: rc, Name: r.Sub, End: end,
	})
	if err != nil {
		return session.DurableSubscription{}, err
	}
	ds := session.DurableSubscription{Head: b.Start(), Unsubscribe: b.Unbind}
	if r.Single {
		ds.Ack = b.Ack
	}
	return ds, nil
}

func (d durables) Forget(ctx context.Context, id auth.Identity, name string) error {
	ok, err := d.r.Forget(ctx, holderKey(id, name))
	if err != nil {
		return err
	}
	if !ok {
		return &fault.Error{Code: fault.CodeNotFound, Field: "sub", Message: fmt.Sprintf("you hold no durable subscription %q", name)}
	}
	return nil
}

// holderKey is the key of id's durable subscription name.
func holderKey(id auth.Identity, name string) durable.Key {
	return durable.Key{Subject: id.Subject, App: id.App, Name: name}
}

// durableFeed hands the durable registry the channel hub's items through the node's channels,
// which, among many nodes, also file the interest that brings another node's publications here.
type durableFeed struct{ c *channels }

var _ durable.Channels = durableFeed{}

func (f durableFeed) Subscribe(r stream.Receiver, sub, name, event string, from stream.Position) (durable.Feed, error) {
	cs, err := f.c.Subscribe(r, sub, name, event, from)
	if err != nil {
		return durable.Feed{}, err
	}
	return durable.Feed{Head: cs.Head, Replay: cs.Replay, Unsubscribe: cs.Unsubscribe}, nil
}
