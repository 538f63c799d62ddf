package memory

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/presence"
)

// Presence implements presence.Store in this process: one node's, or, in tests, the store
// several nodes in one process share. A channel is made by its first member or claim and
// deleted once it has neither, so a channel nobody is in holds nothing. Expire walks every
// channel: one node's presence is small (channels times presence.max_members).
type Presence struct {
	mu       sync.Mutex
	channels map[string]*presenceChannel // guarded by mu
}

type presenceChannel struct {
	members  map[string]presenceEntry
	claims   map[string]time.Time // node -> its claim's deadline
	roster   []presence.Member    // the lease's roster, as rosterBy wrote it; nil before any
	rosterBy string
}

type presenceEntry struct {
	m        presence.Member
	deadline time.Time
}

func (e presenceEntry) live(now time.Time) bool { return now.Before(e.deadline) }

var _ presence.Store = (*Presence)(nil)

// NewPresence returns an empty store.
func NewPresence() *Presence {
	return &Presence{channels: make(map[string]*presenceChannel)}
}

// channel returns channel's state, made when there is none; the caller holds mu.
func (s *Presence) channel(channel string) *presenceChannel {
	c := s.channels[channel]
	if c == nil {
		c = &presenceChannel{members: make(map[string]presenceEntry), claims: make(map[string]time.Time)}
		s.channels[channel] = c
	}
	return c
}

// Track implements presence.Store.
func (s *Presence) Track(_ context.Context, channel string, m presence.Member, now time.Time, ttl time.Duration, max int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channel]
	var e presenceEntry
	had := false
	if c != nil {
		e, had = c.members[m.ID]
	}
	live := had && e.live(now)
	if !live {
		n := 0
		if c != nil {
			for _, o := range c.members {
				if o.live(now) {
					n++
				}
			}
		}
		if n >= max {
			return false, presence.ErrFull
		}
	}
	m.Meta = append([]byte(nil), m.Meta...) // the caller's buffer is not ours to keep
	if len(m.Meta) == 0 {
		m.Meta = nil
	}
	s.channel(channel).members[m.ID] = presenceEntry{m: m, deadline: now.Add(ttl)}
	return !live, nil
}

// Touch implements presence.Store.
func (s *Presence) Touch(_ context.Context, channel, id string, now time.Time, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channel]
	if c == nil {
		return false, nil
	}
	e, ok := c.members[id]
	switch {
	case !ok:
		return false, nil
	case !e.live(now):
		s.remove(channel, c, id)
		return false, nil
	}
	e.deadline = now.Add(ttl)
	c.members[id] = e
	return true, nil
}

// Untrack implements presence.Store.
func (s *Presence) Untrack(_ context.Context, channel, id string) (presence.Member, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channel]
	if c == nil {
		return presence.Member{}, false, nil
	}
	e, ok := c.members[id]
	if !ok {
		return presence.Member{}, false, nil
	}
	s.remove(channel, c, id)
	return e.m, true, nil
}

// Members implements presence.Store.
func (s *Presence) Members(_ context.Context, channel string, now time.Time) ([]presence.Member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channel]
	if c == nil {
		return []presence.Member{}, nil
	}
	return c.live(now, false), nil
}

// Sweep implements presence.Store.
func (s *Presence) Sweep(_ context.Context, channel, node string, now time.Time, ttl time.Duration) (presence.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channel(channel)
	c.claims[node] = now.Add(ttl)
	leader := c.leader(now)
	if leader != node {
		l := presence.Lease{Leader: leader}
		if c.rosterBy == leader {
			l.Roster = append([]presence.Member{}, c.roster...)
		}
		return l, nil
	}
	l := presence.Lease{Leader: node, Leads: true}
	for id, e := range c.members {
		if !e.live(now) {
			l.Left = append(l.Left, e.m)
			delete(c.members, id)
		}
	}
	sort.Slice(l.Left, func(i, j int) bool { return l.Left[i].ID < l.Left[j].ID })
	if c.rosterBy != node && c.roster != nil {
		l.Prior = c.roster
	}
	c.writeRoster(node, now)
	l.Roster = append([]presence.Member{}, c.roster...)
	return l, nil
}

// Release implements presence.Store.
func (s *Presence) Release(_ context.Context, channel, node string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channel]
	if c == nil {
		return nil
	}
	if c.rosterBy == node {
		c.writeRoster(node, now)
	}
	delete(c.claims, node)
	s.settle(channel, c)
	return nil
}

// Expire implements presence.Store.
func (s *Presence) Expire(_ context.Context, now time.Time) ([]presence.Left, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var left []presence.Left
	for channel, c := range s.channels {
		if c.leader(now) != "" {
			continue // its leader's to sweep
		}
		for id, e := range c.members {
			if !e.live(now) {
				left = append(left, presence.Left{Channel: channel, Member: e.m})
				delete(c.members, id)
			}
		}
		s.settle(channel, c)
	}
	return left, nil
}

// Channels reports how many channels have a member (live or not yet expired) or a claim: zero
// once everyone is gone and every claim was released or has lapsed and been swept.
func (s *Presence) Channels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.channels)
}

// remove deletes a member, and its channel with its last member and claim; the caller holds
// mu.
func (s *Presence) remove(channel string, c *presenceChannel, id string) {
	delete(c.members, id)
	s.settle(channel, c)
}

// settle forgets a channel with no member and no claim, its lease with it; the caller holds
// mu.
func (s *Presence) settle(channel string, c *presenceChannel) {
	if len(c.members) == 0 && len(c.claims) == 0 {
		delete(s.channels, channel)
	}
}

// leader drops the claims past their deadline and returns the smallest node id among the live
// ones, "" when none is.
func (c *presenceChannel) leader(now time.Time) string {
	leader := ""
	for node, deadline := range c.claims {
		switch {
		case !now.Before(deadline):
			delete(c.claims, node)
		case leader == "" || node < leader:
			leader = node
		}
	}
	return leader
}

// live returns the members live at now ordered by id, with their meta or, for a roster,
// without.
func (c *presenceChannel) live(now time.Time, roster bool) []presence.Member {
	out := make([]presence.Member, 0, len(c.members))
	for _, e := range c.members {
		if e.live(now) {
			m := e.m
			if roster {
				m = presence.Member{ID: m.ID, Subject: m.Subject}
			}
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// writeRoster writes node's roster on the lease: the live members at now, at most
// presence.RosterLimit.
func (c *presenceChannel) writeRoster(node string, now time.Time) {
	r := c.live(now, true)
	if len(r) > presence.RosterLimit {
		r = r[:presence.RosterLimit]
	}
	c.roster, c.rosterBy = r, node
}
