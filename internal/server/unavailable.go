package server

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/ratelog"
	"github.com/heraldrt/herald/internal/wire"
)

// op names what a client asked for when the answer was unavailable: the log attribute and the
// metric label herald_unavailable_total{op}.
type op string

const (
	opChannelSubscribe op = "channel_subscribe"
	opPublish          op = "publish"
	opTableSubscribe   op = "table_subscribe"
	opPresenceTrack    op = "presence_track"
	opPresenceUntrack  op = "presence_untrack"
	opPresenceWatch    op = "presence_watch"
)

// unavailable is where the node's adapters (channels, tables, presences) hand every answer
// they give a client, so that an unavailable one is counted and its cause logged exactly once:
// here, at Warn, with what was asked, what failed (the message the client gets) and why (the
// error behind it, which the client does not get). The producers below return such a refusal
// without logging it; the protocol edge above sends it without logging it. One cause repeated
// for every request while a dependency is down is logged once per interval, with the count held
// back (internal/ratelog). nil logs and counts nothing.
type unavailable struct {
	log    *ratelog.Limiter
	counts [len(ops)]atomic.Uint64 // by op, in ops' order
}

// ops lists every op, for the metric's labels.
var ops = [...]op{opChannelSubscribe, opPublish, opTableSubscribe, opPresenceTrack, opPresenceUntrack, opPresenceWatch}

// newUnavailable logs through log, each cause at most once per every (zero: ratelog's default).
func newUnavailable(log *slog.Logger, every time.Duration) *unavailable {
	return &unavailable{log: ratelog.New(log, ratelog.Config{Interval: every})}
}

// note counts and logs err if it is an unavailable for o, and returns it unchanged.
func (u *unavailable) note(o op, err error) error {
	if u == nil || err == nil {
		return err
	}
	// Named as the protocol edge will name it (heraldv1.Refusal).
	we := heraldv1.Refusal("", err, "")
	if we.Code != fault.CodeUnavailable {
		return err
	}
	for i, x := range ops {
		if x == o {
			u.counts[i].Add(1)
		}
	}
	attrs := []slog.Attr{slog.String("op", string(o)), slog.String("code", string(we.Code)), slog.String("told", we.Message)}
	if c := causeOf(we); c != nil {
		attrs = append(attrs, slog.String("cause", c.Error()))
	}
	u.log.Warn(string(o)+"\x00"+we.Message, "request refused as unavailable", attrs...)
	return err
}

// count is how many answers to o were unavailable.
func (u *unavailable) count(o op) uint64 {
	for i, x := range ops {
		if x == o {
			return u.counts[i].Load()
		}
	}
	return 0
}

// causeOf is the error behind a client-facing error: its Err, unwrapped past the client-facing
// layers (a *fault.Error that wire.AsError wrapped, say); nil when there is none.
func causeOf(we *wire.Error) error {
	c := we.Err
	for {
		fe, ok := c.(*fault.Error)
		if !ok || fe == nil {
			return c
		}
		c = fe.Err
	}
}
