package presence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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

// Event is a join or a leave as it crosses nodes: what Relay hands on and Apply takes. A
// leave's Member has no Meta.
type Event struct {
	Kind   stream.PresenceKind // stream.PresenceJoin or stream.PresenceLeave
	Member Member
}

// Relay carries this node's presence events to the other nodes; the server implements it with
// its cross-node transport, and each receiving node hands the event to its own Apply.
type Relay interface {
	// Relay hands on ev, a join or leave this node made in channel: a track, an untrack (a
	// connection's close untracks), a member gone that joined again, a leave the sweep
	// announced. It is called for each of the channel's events in the order they happened, with
	// the channel's order lock held (see the package documentation, Locks), so it must not
	// block: queue ev, bounded, and count what a full queue drops. It must not call this
	// Presence's Track, Untrack, Watch or Sweep (the same channel's would wait on itself);
	// calling Apply is safe.
	Relay(channel string, ev Event)
}

// ErrFull is what a Store's Track returns for a new member of a channel already holding max.
var ErrFull = errors.New("presence: channel is full")

// ErrGone is what a heartbeat of a member no longer there answers: join again.
var ErrGone = errors.New("presence: member is gone; join again")

// RosterLimit bounds the roster a sweep lease carries, in members. Past it, a member is known
// to the leader and the store alone: a leader that dies takes it with it, and its leave is
// announced only when it expires, as before leases carried rosters.
const RosterLimit = 4096

// Lease is what a node's claim on a channel's sweep found (Store.Sweep).
type Lease struct {
	// Leader is the smallest node id among the channel's live claims.
	Leader string
	// Leads is true when Leader is the node that claimed: the claim swept the channel.
	Leads bool
	// Roster is the roster on the lease after the claim, members ordered by id, at most
	// RosterLimit, with their id and subject only. A follower's is the one the leader wrote,
	// nil when the leader has written none yet (it has not swept since it came to lead). A
	// leader's is the one it has just written: the channel's live members after the sweep.
	Roster []Member
	// Prior, for a leader, is the roster the lease carried before the claim when another node
	// had written it: this claim took the sweep over. Nil otherwise, and always for a follower.
	Prior []Member
	// Left, for a leader, is the members the claim removed because their deadline had passed,
	// ordered by id. Always nil for a follower.
	Left []Member
}

// Store holds every channel's members and their deadlines, and the channels' sweep leases.
// Implementations: memory.Presence (one node, or nodes in one process in tests) and
// redis.Presence (shared by nodes); the conformance suite is storetest.RunPresence. A Store
// treats a member past its deadline as gone whether or not a sweep has removed it yet, and
// forgets a channel once it has no member and no claim.
//
// Deadlines, claims' included, are the callers' clocks (now), so the nodes' clocks must agree
// to well within the TTL.
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
	// Sweep claims channel's sweep for node until now+ttl, drops the claims past their
	// deadline, and elects the leader: the smallest node id (bytewise) among the live claims.
	// When node leads, the same atomic step removes the channel's members past their deadline
	// (Lease.Left) and writes the live ones that remain on the lease (Lease.Roster), saying
	// which roster it replaced when another node had written it (Lease.Prior). The claim
	// outlives the channel's last member: the lease is forgotten with the channel's last claim.
	Sweep(ctx context.Context, channel, node string, now time.Time, ttl time.Duration) (Lease, error)
	// Release withdraws node's claim on channel's sweep, so another claimant leads at its next
	// sweep rather than once the claim's deadline passes. When the lease's roster is node's, it
	// is first written again with the channel's live members at now, so the next leader diffs
	// against what was true when node let go. The lease is forgotten with its last claim.
	Release(ctx context.Context, channel, node string, now time.Time) error
	// Expire removes every member whose deadline is at or before now in the channels no live
	// claim covers (every node that claimed them died, or none did), and returns them; on an
	// error, it returns those it removed before it failed. A claimed channel is its leader's
	// to sweep.
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
	// TTL is how long a member outlives its node's last heartbeat, and a node's claim on a
	// channel's sweep its last renewal. Default 30s; at least 1s.
	TTL time.Duration
	// MaxMembers is the most members a channel holds. Default 256.
	MaxMembers int
	// MaxMetaBytes bounds a member's meta, compacted. Default 256 bytes: a roster of
	// MaxMembers members travels as one control frame (see the server's check).
	MaxMetaBytes int
	// Node names this node among those sharing the Store: the smallest live node id leads a
	// channel's sweep. Default: a new UUIDv7 per Presence, time-ordered, so the node that has
	// lived longest leads; one id must never be used by two live nodes.
	Node string
	// Relay carries this node's joins and leaves to the other nodes. Nil: one node, nothing is
	// relayed.
	Relay  Relay
	Logger *slog.Logger
	Now    func() time.Time
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
	channels map[string]*channelState // guarded by mu
	// members counts the members this node's connections hold, in every channel: the sum of
	// the channels' local, kept as they change (under mu), so metrics read it for free.
	members atomic.Int64
}

// channelState is what this node keeps for one channel: while it holds members or presence
// subscribers there, holds a claim on its sweep, or a call on it is under way.
type channelState struct {
	// order is held across a store call on the channel and the pushes and relays of what it
	// changed, which is what orders the channel's events. Never held while waiting for mu's
	// holder to do I/O: mu is never held across I/O.
	order sync.Mutex

	// Guarded by Presence.mu:
	refs     int                   // callers holding or waiting for order
	watchers map[*watcher]struct{} // presence subscribers
	local    map[string]Member     // id -> members this node's connections hold
	claimed  bool                  // this node's claim on the sweep may be in the store
	leads    bool                  // this node led at its last sweep
	heard    []Member              // as a follower: the roster the leader's lease last carried
}

func (st *channelState) interested() bool { return len(st.local) > 0 || len(st.watchers) > 0 }

// maxHeld bounds what a new watcher holds from Apply while its roster is read. Past it the
// roster is read again: it then holds what was dropped.
const maxHeld = 1024

type watcher struct {
	r   stream.Receiver
	sub string

	// Guarded by Presence.mu. Until its roster is pushed, a watcher holds the events Apply
	// brings rather than miss one made between the roster's read and its push.
	ready    bool
	held     []*stream.Item
	overflow bool // held dropped some: read the roster again
}

// New returns presence over store.
func New(cfg Config, store Store) (*Presence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Node == "" {
		cfg.Node = NewNodeID(time.Now())
	}
	return &Presence{cfg: cfg, store: store, channels: make(map[string]*channelState)}, nil
}

// Config returns the configuration in effect, defaults filled in (Node included).
func (p *Presence) Config() Config { return p.cfg }

// lock takes channel's order lock, making its state when there is none, and returns the state
// and the unlock, which forgets a state nothing is left in.
func (p *Presence) lock(channel string) (*channelState, func()) {
	p.mu.Lock()
	st := p.channels[channel]
	if st == nil {
		st = &channelState{watchers: make(map[*watcher]struct{}), local: make(map[string]Member)}
		p.channels[channel] = st
	}
	st.refs++
	p.mu.Unlock()
	st.order.Lock()
	return st, func() {
		p.mu.Lock()
		st.refs--
		p.forgetLocked(channel, st)
		p.mu.Unlock()
		st.order.Unlock()
	}
}

// forgetLocked drops channel's state once nothing is left in it; the caller holds mu.
func (p *Presence) forgetLocked(channel string, st *channelState) {
	if st.refs == 0 && !st.interested() && !st.claimed && p.channels[channel] == st {
		delete(p.channels, channel)
	}
}

// Track makes m a member of channel, or replaces its meta, and announces it as a join. A meta
// past MaxMetaBytes is refused with frame_too_large (field meta), a new member of a full
// channel with presence_full; a store failure is unavailable.
func (p *Presence) Track(ctx context.Context, channel string, m Member) error {
	if len(m.Meta) > p.cfg.MaxMetaBytes {
		return &fault.Error{Code: fault.CodeFrameTooLarge, Field: "meta",
			Message: fmt.Sprintf("meta is %d bytes, over this server's presence.max_meta_bytes of %d; keep a member's meta small (an id, a name, a status) and publish the rest", len(m.Meta), p.cfg.MaxMetaBytes)}
	}
	st, unlock := p.lock(channel)
	defer unlock()
	// A member that replaced its meta is announced as a join too: subscribers replace it by id.
	_, err := p.store.Track(ctx, channel, m, p.cfg.Now(), p.cfg.TTL, p.cfg.MaxMembers)
	switch {
	case errors.Is(err, ErrFull):
		return &fault.Error{Code: fault.CodePresenceFull, Field: "channel",
			Message: fmt.Sprintf("channel %q already has %d members, this server's presence.max_members; try again when one leaves", channel, p.cfg.MaxMembers)}
	case err != nil:
		return &fault.Error{Code: fault.CodeUnavailable, Message: "presence could not be recorded; try again later",
			Err: fmt.Errorf("presence: track in channel %q: %w", channel, err)}
	}
	p.mu.Lock()
	if _, had := st.local[m.ID]; !had {
		p.members.Add(1)
	}
	st.local[m.ID] = m
	p.mu.Unlock()
	p.emit(channel, st, stream.PresenceJoin, m)
	return nil
}

// Untrack removes member id from channel and announces its leave. ok is false when it was
// not a member (it expired, or was never tracked).
func (p *Presence) Untrack(ctx context.Context, channel, id string) (ok bool, err error) {
	st, unlock := p.lock(channel)
	defer unlock()
	// Forgotten first: a member whose untrack failed is no longer renewed, and expires.
	p.mu.Lock()
	p.forgetMemberLocked(st, id)
	p.mu.Unlock()
	m, ok, err := p.store.Untrack(ctx, channel, id)
	if err != nil {
		return false, &fault.Error{Code: fault.CodeUnavailable, Message: "presence could not be updated; try again later",
			Err: fmt.Errorf("presence: untrack from channel %q: %w", channel, err)}
	}
	if ok {
		p.emit(channel, st, stream.PresenceLeave, m)
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
// then every join and leave, this node's and those Apply brings from the others, until the
// returned function is called.
func (p *Presence) Watch(ctx context.Context, channel string, r stream.Receiver, sub string) (unwatch func(), err error) {
	st, unlock := p.lock(channel)
	defer unlock()
	w := &watcher{r: r, sub: sub}
	// Watching before the roster is read: an event another node makes after the read reaches
	// this node after it, and is held for the watcher rather than lost.
	p.mu.Lock()
	st.watchers[w] = struct{}{}
	p.mu.Unlock()
	for attempt := 1; ; attempt++ {
		members, err := p.store.Members(ctx, channel, p.cfg.Now())
		if err != nil {
			p.dropWatcher(st, w)
			return nil, &fault.Error{Code: fault.CodeUnavailable, Message: "the channel's presence could not be read; try again later",
				Err: fmt.Errorf("presence: read channel %q's roster: %w", channel, err)}
		}
		p.mu.Lock()
		if !w.overflow {
			r.Push(sub, stream.NewPresence(&stream.Presence{Channel: channel, Kind: stream.PresenceRoster, Members: members}))
			for _, it := range w.held {
				r.Push(sub, it)
			}
			w.held, w.ready = nil, true
			p.mu.Unlock()
			break
		}
		w.held, w.overflow = nil, false
		p.mu.Unlock()
		if attempt == 3 {
			p.dropWatcher(st, w)
			return nil, &fault.Error{Code: fault.CodeUnavailable, Message: "the channel's presence changes too fast to read; try again later",
				Err: fmt.Errorf("presence: channel %q's roster was outrun three times by more than %d events", channel, maxHeld)}
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			delete(st.watchers, w)
			p.forgetLocked(channel, st)
		})
	}, nil
}

func (p *Presence) dropWatcher(st *channelState, w *watcher) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(st.watchers, w)
}

// Apply pushes ev, which another node made in channel and relayed, to this node's presence
// subscribers of channel. It relays nothing, does no I/O and waits for no store call, so the
// server's transport reader may call it directly. An event of another kind than join or leave
// is ignored.
func (p *Presence) Apply(channel string, ev Event) {
	switch ev.Kind {
	case stream.PresenceJoin:
	case stream.PresenceLeave:
		ev.Member = Member{ID: ev.Member.ID, Subject: ev.Member.Subject}
	default:
		p.cfg.Logger.Warn("presence: an event of no known kind from another node", "channel", channel, "kind", ev.Kind)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.channels[channel]; st != nil {
		p.pushLocked(channel, st, ev.Kind, ev.Member)
	}
}

// emit pushes a join or leave this node made to channel's subscribers here, then relays it;
// the caller holds st.order.
func (p *Presence) emit(channel string, st *channelState, kind stream.PresenceKind, m Member) {
	if kind == stream.PresenceLeave {
		m = Member{ID: m.ID, Subject: m.Subject}
	}
	p.mu.Lock()
	p.pushLocked(channel, st, kind, m)
	p.mu.Unlock()
	if p.cfg.Relay != nil {
		p.cfg.Relay.Relay(channel, Event{Kind: kind, Member: m})
	}
}

// pushLocked pushes one event to channel's subscribers, or holds it for one whose roster is
// being read; the caller holds mu.
func (p *Presence) pushLocked(channel string, st *channelState, kind stream.PresenceKind, m Member) {
	if len(st.watchers) == 0 {
		return
	}
	it := stream.NewPresence(&stream.Presence{Channel: channel, Kind: kind, Members: []Member{m}})
	for w := range st.watchers {
		switch {
		case w.ready:
			w.r.Push(w.sub, it)
		case len(w.held) < maxHeld:
			w.held = append(w.held, it)
		default:
			w.held, w.overflow = nil, true
		}
	}
}

// Local reports how many channels this node holds members in, and how many channels have
// presence subscribers: both return to zero once everyone is gone.
func (p *Presence) Local() (channels, watched int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.channels {
		if len(st.local) > 0 {
			channels++
		}
		if len(st.watchers) > 0 {
			watched++
		}
	}
	return channels, watched
}

// Members reports how many members this node's connections hold, over every channel.
func (p *Presence) Members() int64 { return p.members.Load() }

// forgetMemberLocked drops member id from st's local members; the caller holds mu.
func (p *Presence) forgetMemberLocked(st *channelState, id string) {
	if _, ok := st.local[id]; ok {
		delete(st.local, id)
		p.members.Add(-1)
	}
}

// Channels reports how many channels this node keeps anything for: members, subscribers or a
// claim on the sweep. Zero once everyone is gone and the sweeper has let its claims go.
func (p *Presence) Channels() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.channels)
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
