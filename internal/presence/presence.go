package presence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
)

// Member is one member of a channel's presence (stream.Member: the events carry it as it is).
type Member = stream.Member

// Left is a member the store removed because its deadline passed.
type Left struct {
	Channel string
	Member  Member
}

// ErrFull is what a Store's Track returns for a new member of a channel already holding max.
var ErrFull = errors.New("presence: channel is full")

// ErrGone is what a heartbeat of a member no longer there answers: join again.
var ErrGone = errors.New("presence: member is gone; join again")

// Store holds every channel's members and their deadlines. Implementations: memory.Presence
// (one node) and redis.Presence (shared by nodes; not wired yet); the conformance suite is
// storetest.RunPresence. A Store forgets a channel once
// its last member is gone, and treats a member past its deadline as gone whether or not
// Expire has removed it yet.
type Store interface {
	// Track puts m in channel, live until now+ttl. joined is true when m.ID was not a live
	// member (one past its deadline counts as absent), false when it replaced a live member's
	// meta. A new member of a channel holding max live members is refused with ErrFull.
	Track(ctx context.Context, channel string, m Member, now time.Time, ttl time.Duration, max int) (joined bool, err error)
	// Touch moves a live member's deadline to now+ttl. ok is false when the member is not
	// there, or is past its deadline at now (it is then removed, as Expire would).
	Touch(ctx context.Context, channel, id string, now time.Time, ttl time.Duration) (ok bool, err error)
	// Untrack removes a member, past its deadline or not; ok is false when it was not there.
	Untrack(ctx context.Context, channel, id string) (m Member, ok bool, err error)
	// Members returns channel's live members at now, ordered by ID.
	Members(ctx context.Context, channel string, now time.Time) ([]Member, error)
	// Expire removes every member whose deadline is at or before now, and returns them; on an
	// error, it returns those it removed before it failed.
	Expire(ctx context.Context, now time.Time) ([]Left, error)
}

// Defaults.
const (
	DefaultTTL          = 30 * time.Second
	DefaultMaxMembers   = 256
	DefaultMaxMetaBytes = 256
)

// Config configures presence. The zero value of every field means its default.
type Config struct {
	// TTL is how long a member outlives its node's last heartbeat. Default 30s; at least 1s.
	TTL time.Duration
	// MaxMembers is the most members a channel holds. Default 256.
	MaxMembers int
	// MaxMetaBytes bounds a member's meta, compacted. Default 256 bytes: a roster of
	// MaxMembers members travels as one control frame (see the server's check).
	MaxMetaBytes int
	Logger       *slog.Logger
	Now          func() time.Time
}

func (c Config) withDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = DefaultMaxMembers
	}
	if c.MaxMetaBytes == 0 {
		c.MaxMetaBytes = DefaultMaxMetaBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.TTL < time.Second:
		return fmt.Errorf("presence.ttl is %s; it must be at least 1s (a member outlives its connection by up to this long)", c.TTL)
	case c.MaxMembers < 1:
		return fmt.Errorf("presence.max_members is %d; it must be at least 1", c.MaxMembers)
	case c.MaxMetaBytes < 2:
		return fmt.Errorf("presence.max_meta_bytes is %d; it must be at least 2 (room for {})", c.MaxMetaBytes)
	}
	return nil
}

// Presence is the presence of every channel on this node, over its Store. Safe for
// concurrent use; Run is its one sweeper.
type Presence struct {
	cfg   Config
	store Store

	mu       sync.Mutex
	watchers map[string]map[watcher]struct{} // channel -> its presence subscribers
	local    map[string]map[string]Member    // channel -> id -> members this node's connections hold
}

type watcher struct {
	r   stream.Receiver
	sub string
}

// New returns presence over store.
func New(cfg Config, store Store) (*Presence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Presence{cfg: cfg.withDefaults(), store: store,
		watchers: make(map[string]map[watcher]struct{}), local: make(map[string]map[string]Member)}, nil
}

// Config returns the configuration in effect, defaults filled in.
func (p *Presence) Config() Config { return p.cfg }

// Track makes m a member of channel, or replaces its meta, and announces it as a join. A meta
// past MaxMetaBytes is refused with frame_too_large (field meta), a new member of a full
// channel with presence_full; a store failure is unavailable.
func (p *Presence) Track(ctx context.Context, channel string, m Member) error {
	if len(m.Meta) > p.cfg.MaxMetaBytes {
		return &fault.Error{Code: fault.CodeFrameTooLarge, Field: "meta",
			Message: fmt.Sprintf("meta is %d bytes, over this server's presence.max_meta_bytes of %d; keep a member's meta small (an id, a name, a status) and publish the rest", len(m.Meta), p.cfg.MaxMetaBytes)}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A member that replaced its meta is announced as a join too: subscribers replace it by id.
	_, err := p.store.Track(ctx, channel, m, p.cfg.Now(), p.cfg.TTL, p.cfg.MaxMembers)
	switch {
	case errors.Is(err, ErrFull):
		return &fault.Error{Code: fault.CodePresenceFull, Field: "channel",
			Message: fmt.Sprintf("channel %q already has %d members, this server's presence.max_members; try again when one leaves", channel, p.cfg.MaxMembers)}
	case err != nil:
		p.cfg.Logger.Warn("presence: track failed", "channel", channel, "err", err)
		return &fault.Error{Code: fault.CodeUnavailable, Message: "presence could not be recorded; try again later"}
	}
	if p.local[channel] == nil {
		p.local[channel] = make(map[string]Member)
	}
	p.local[channel][m.ID] = m
	p.announce(channel, stream.PresenceJoin, m)
	return nil
}

// Untrack removes member id from channel and announces its leave. ok is false when it was
// not a member (it expired, or was never tracked).
func (p *Presence) Untrack(ctx context.Context, channel, id string) (ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgetLocal(channel, id)
	m, ok, err := p.store.Untrack(ctx, channel, id)
	if err != nil {
		p.cfg.Logger.Warn("presence: untrack failed", "channel", channel, "err", err)
		return false, &fault.Error{Code: fault.CodeUnavailable, Message: "presence could not be updated; try again later"}
	}
	if ok {
		p.announce(channel, stream.PresenceLeave, Member{ID: m.ID, Subject: m.Subject})
	}
	return ok, nil
}

// Heartbeat renews member id of channel; ErrGone when it is no longer there (join again).
func (p *Presence) Heartbeat(ctx context.Context, channel, id string) error {
	ok, err := p.store.Touch(ctx, channel, id, p.cfg.Now(), p.cfg.TTL)
	switch {
	case err != nil:
		return err
	case !ok:
		return ErrGone
	}
	return nil
}

// Watch makes (r, sub) a presence subscriber of channel: it pushes the roster to r at once,
// then every join and leave, until the returned function is called.
func (p *Presence) Watch(ctx context.Context, channel string, r stream.Receiver, sub string) (unwatch func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	members, err := p.store.Members(ctx, channel, p.cfg.Now())
	if err != nil {
		p.cfg.Logger.Warn("presence: roster failed", "channel", channel, "err", err)
		return nil, &fault.Error{Code: fault.CodeUnavailable, Message: "the channel's presence could not be read; try again later"}
	}
	w := watcher{r: r, sub: sub}
	if p.watchers[channel] == nil {
		p.watchers[channel] = make(map[watcher]struct{})
	}
	p.watchers[channel][w] = struct{}{}
	r.Push(sub, stream.NewPresence(&stream.Presence{Channel: channel, Kind: stream.PresenceRoster, Members: members}))
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			delete(p.watchers[channel], w)
			if len(p.watchers[channel]) == 0 {
				delete(p.watchers, channel)
			}
		})
	}, nil
}

// Run is the sweeper: every TTL/3 until ctx ends, it heartbeats this node's members (tracking
// again, as a join, one that is gone) and expires the members past their deadline, announcing
// their leaves.
func (p *Presence) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Sweep(ctx)
		}
	}
}

// Sweep is one pass of the sweeper: Run calls it; a test may call it on its own clock.
func (p *Presence) Sweep(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	for channel, members := range p.local {
		for id, m := range members {
			ok, err := p.store.Touch(ctx, channel, id, now, p.cfg.TTL)
			if err != nil {
				p.cfg.Logger.Warn("presence: heartbeat failed", "channel", channel, "err", err)
				continue
			}
			if ok {
				continue
			}
			// Gone: join again. A channel that filled meanwhile has no room for it.
			if _, err := p.store.Track(ctx, channel, m, now, p.cfg.TTL, p.cfg.MaxMembers); err != nil {
				p.cfg.Logger.Warn("presence: a member gone could not join again", "channel", channel, "member", id, "err", err)
				p.forgetLocal(channel, id)
				continue
			}
			p.announce(channel, stream.PresenceJoin, m)
		}
	}
	// A store that fails part way returns the members it did remove with the error: they are
	// gone, so their leaves are announced all the same.
	left, err := p.store.Expire(ctx, p.cfg.Now())
	if err != nil {
		p.cfg.Logger.Warn("presence: expiry failed", "err", err, "removed", len(left))
	}
	sort.Slice(left, func(i, j int) bool {
		if left[i].Channel != left[j].Channel {
			return left[i].Channel < left[j].Channel
		}
		return left[i].Member.ID < left[j].Member.ID
	})
	for _, l := range left {
		p.forgetLocal(l.Channel, l.Member.ID)
		p.announce(l.Channel, stream.PresenceLeave, Member{ID: l.Member.ID, Subject: l.Member.Subject})
	}
}

// Local reports how many channels this node holds members in, and how many channels have
// presence subscribers: both return to zero once everyone is gone.
func (p *Presence) Local() (channels, watched int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.local), len(p.watchers)
}

func (p *Presence) forgetLocal(channel, id string) {
	delete(p.local[channel], id)
	if len(p.local[channel]) == 0 {
		delete(p.local, channel)
	}
}

// announce pushes one event to channel's subscribers; the caller holds mu.
func (p *Presence) announce(channel string, kind stream.PresenceKind, m Member) {
	ws := p.watchers[channel]
	if len(ws) == 0 {
		return
	}
	it := stream.NewPresence(&stream.Presence{Channel: channel, Kind: kind, Members: []Member{m}})
	for w := range ws {
		w.r.Push(w.sub, it)
	}
}

// CompactMeta returns meta compacted, the form a member's meta is kept and bounded in; nil
// for none (absent or null).
func CompactMeta(meta json.RawMessage) (json.RawMessage, error) {
	if len(meta) == 0 || string(meta) == "null" {
		return nil, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, meta); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
