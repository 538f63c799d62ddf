package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/wire"
)

// Subscription is what Subscribe asks for: a table's changes or a channel's messages. Exactly
// one of Table and Channel is set.
type Subscription struct {
	// Sub is this connection's name for the subscription; every frame about it carries it.
	// 1 to 64 printable ASCII characters, no spaces; unique on the connection.
	Sub string

	Table   string          // schema-qualified: "public.items"
	Filter  json.RawMessage // the filter language; nil: every row
	Columns []string        // nil: every column

	Channel string // a channel, or a pattern: "rooms/1", "docs/alice/**"
	Event   string // deliver only this event name; empty: every event

	// From resumes after this position, the last one received (Conn.Position); zero starts
	// at the stream's end.
	From Position

	// Snapshot asks a table subscription for the rows that match now first: Rows pages, then
	// the changes after them, then Live. Not with From.
	Snapshot bool
	// Single binds the connection to its identity's durable subscription named Sub, with
	// acknowledged delivery: exactly one of the identity's bound connections gets each message,
	// and must Ack it. Durable asks for a durable broadcast instead. Either takes one channel.
	Single, Durable bool
	// Presence asks for the channel's presence too: a Roster through Next after the
	// subscription is live, then a Join or Leave as members come and go. One channel, not a
	// pattern; the channel's presence rule must allow it.
	Presence bool
}

// Subscribe subscribes and waits until the subscription is live, returning the position it
// starts after: zero for a channel pattern, which spans channels and has none, and for a
// snapshot, whose position comes with its Live. A refusal is an
// *Error (unknown_table, bad_filter, duplicate_subscription, ...). The subscription's frames
// arrive through Next; a resumed one may start with a resync.
func (c *Conn) Subscribe(ctx context.Context, s Subscription) (Position, error) {
	id := c.nextID()
	f := &wire.Subscribe{ID: id, Sub: s.Sub, Table: s.Table, Filter: s.Filter, Columns: s.Columns,
		Channel: s.Channel, Event: s.Event, From: s.From, Snapshot: s.Snapshot, Durable: s.Durable, Presence: s.Presence}
	if s.Single {
		f.Mode = wire.ModeSingle
	}
	r, err := c.request(ctx, id, f)
	if err != nil {
		return Position{}, fmt.Errorf("subscribe %s: %w", s.Sub, err)
	}
	switch r := r.(type) {
	case *wire.Subscribed:
		return r.Pos, nil
	case *wire.Error:
		return Position{}, newError("subscribe", s.Sub, r)
	}
	return Position{}, unexpected("subscribe", r)
}

// Ack settles the message at pos of a Single subscription. The server answers a settled ack
// with nothing, so Ack returns once the frame is sent; one the server refuses (a message
// another connection holds, a position it never delivered) comes through Next as an
// *ErrorFrame with code not_found. Acking a message again is harmless.
func (c *Conn) Ack(ctx context.Context, sub string, pos Position) error {
	if err := c.send(ctx, &wire.Ack{ID: c.nextID(), Sub: sub, Pos: pos}); err != nil {
		return fmt.Errorf("ack %s %s: %w", sub, pos, err)
	}
	return nil
}

// Unsubscribe ends a subscription and waits for the server to confirm it; no frame of it
// follows. A subscription this connection does not have is an *Error with code not_found.
func (c *Conn) Unsubscribe(ctx context.Context, sub string) error {
	return c.unsubscribe(ctx, sub, false)
}

// Forget deletes the identity's durable subscription named sub (Subscription.Single or
// Durable), its queue of messages with it, and ends this connection's subscription to it if
// it has one; the identity's other connections bound to it are told with an Unsubscribed. A
// durable subscription the identity does not have is an *Error with code not_found.
func (c *Conn) Forget(ctx context.Context, sub string) error {
	return c.unsubscribe(ctx, sub, true)
}

func (c *Conn) unsubscribe(ctx context.Context, sub string, forget bool) error {
	id := c.nextID()
	r, err := c.request(ctx, id, &wire.Unsubscribe{ID: id, Sub: sub, Forget: forget})
	if err != nil {
		return fmt.Errorf("unsubscribe %s: %w", sub, err)
	}
	switch r := r.(type) {
	case *wire.Unsubscribed:
		return nil
	case *wire.Error:
		return newError("unsubscribe", sub, r)
	}
	return unexpected("unsubscribe", r)
}

// Track makes the connection a member of channel's presence, with meta (nil: none, else
// compact JSON within the server's presence.max_meta_bytes), or replaces its meta when it is
// one already. It returns the member's id, as Roster, Join and Leave name it. The channel's
// presence rule must allow it; a refusal is an *Error (forbidden, presence_full,
// frame_too_large, ...). The membership lasts until Untrack or the connection ends.
func (c *Conn) Track(ctx context.Context, channel string, meta json.RawMessage) (member string, err error) {
	id := c.nextID()
	r, err := c.request(ctx, id, &wire.Track{ID: id, Channel: channel, Meta: meta})
	if err != nil {
		return "", fmt.Errorf("track %s: %w", channel, err)
	}
	switch r := r.(type) {
	case *wire.Tracked:
		return r.Member, nil
	case *wire.Error:
		return "", newError("track", "", r)
	}
	return "", unexpected("track", r)
}

// Untrack ends the connection's membership of channel's presence; its presence subscribers
// see it leave.
func (c *Conn) Untrack(ctx context.Context, channel string) error {
	id := c.nextID()
	r, err := c.request(ctx, id, &wire.Untrack{ID: id, Channel: channel})
	if err != nil {
		return fmt.Errorf("untrack %s: %w", channel, err)
	}
	switch r := r.(type) {
	case *wire.Untracked:
		return nil
	case *wire.Error:
		return newError("untrack", "", r)
	}
	return unexpected("untrack", r)
}

// Publication is one publish: a channel (a name, not a pattern), an optional event name, and
// any JSON value but null.
type Publication struct {
	Channel string
	Event   string
	Data    json.RawMessage
}

// Publish publishes over the connection and returns the publication's position. The server
// must allow clients to publish (channels.client_publish); otherwise it is an *Error with code
// publish_not_allowed, and PublishHTTP with an API key is the way.
func (c *Conn) Publish(ctx context.Context, p Publication) (Position, error) {
	id := c.nextID()
	r, err := c.request(ctx, id, &wire.Publish{ID: id, Channel: p.Channel, Event: p.Event, Data: p.Data})
	if err != nil {
		return Position{}, fmt.Errorf("publish to %s: %w", p.Channel, err)
	}
	switch r := r.(type) {
	case *wire.Published:
		return r.Pos, nil
	case *wire.Error:
		return Position{}, newError("publish", "", r)
	}
	return Position{}, unexpected("publish", r)
}

// Ping sends a ping frame and waits for its pong: the application-level liveness check. It
// returns the round trip. A missing pong within a few seconds means the connection is dead:
// close it and reconnect.
func (c *Conn) Ping(ctx context.Context) (time.Duration, error) {
	id := c.nextID()
	start := time.Now()
	r, err := c.request(ctx, id, &wire.Ping{ID: id})
	if err != nil {
		return 0, fmt.Errorf("ping: %w", err)
	}
	switch r := r.(type) {
	case *wire.Pong:
		return time.Since(start), nil
	case *wire.Error:
		return 0, newError("ping", "", r)
	}
	return 0, unexpected("ping", r)
}

// Refresh replaces the connection's token, keeping every subscription, and returns when the
// new token expires (zero when it does not). Send it when Next returns an *Expiring. A refused
// token is an *Error; the old token stays in force until it expires.
func (c *Conn) Refresh(ctx context.Context, token string) (time.Time, error) {
	id := c.nextID()
	r, err := c.request(ctx, id, &wire.Refresh{ID: id, Token: token})
	if err != nil {
		return time.Time{}, fmt.Errorf("refresh: %w", err)
	}
	switch r := r.(type) {
	case *wire.Refreshed:
		return r.ExpiresAt, nil
	case *wire.Error:
		return time.Time{}, newError("refresh", "", r)
	}
	return time.Time{}, unexpected("refresh", r)
}

func unexpected(op string, f wire.Frame) error {
	return fmt.Errorf("%s: the server answered with a %s frame", op, f.Type())
}
