package memory

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/presence"
)

// Presence implements presence.Store in this process. A channel's map is made by its first
// member and deleted with its last, so a channel nobody is in holds nothing. Expire walks
// every member: one node's presence is small (channels times presence.max_members).
type Presence struct {
	mu       sync.Mutex
	channels map[string]map[string]presenceEntry
}

type presenceEntry struct {
	m        presence.Member
	deadline time.Time
}

func (e presenceEntry) live(now time.Time) bool { return now.Before(e.deadline) }

var _ presence.Store = (*Presence)(nil)

// NewPresence returns an empty store.
func NewPresence() *Presence {
	return &Presence{channels: make(map[string]map[string]presenceEntry)}
}

// Track implements presence.Store.
func (s *Presence) Track(_ context.Context, channel string, m presence.Member, now time.Time, ttl time.Duration, max int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.channels[channel]
	e, had := ms[m.ID]
	live := had && e.live(now)
	if !live {
		n := 0
		for _, o := range ms {
			if o.live(now) {
				n++
			}
		}
		if n >= max {
			return false, presence.ErrFull
		}
	}
	if ms == nil {
		ms = make(map[string]presenceEntry)
		s.channels[channel] = ms
	}
	m.Meta = append([]byte(nil), m.Meta...) // the caller's buffer is not ours to keep
	if len(m.Meta) == 0 {
		m.Meta = nil
	}
	ms[m.ID] = presenceEntry{m: m, deadline: now.Add(ttl)}
	return !live, nil
}

// Touch implements presence.Store.
func (s *Presence) Touch(_ context.Context, channel, id string, now time.Time, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.channels[channel]
	e, ok := ms[id]
	switch {
	case !ok:
		return false, nil
	case !e.live(now):
		s.remove(channel, id)
		return false, nil
	}
	e.deadline = now.Add(ttl)
	ms[id] = e
	return true, nil
}

// Untrack implements presence.Store.
func (s *Presence) Untrack(_ context.Context, channel, id string) (presence.Member, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.channels[channel][id]
	if !ok {
		return presence.Member{}, false, nil
	}
	s.remove(channel, id)
	return e.m, true, nil
}

// Members implements presence.Store.
func (s *Presence) Members(_ context.Context, channel string, now time.Time) ([]presence.Member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]presence.Member, 0, len(s.channels[channel]))
	for _, e := range s.channels[channel] {
		if e.live(now) {
			out = append(out, e.m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Expire implements presence.Store.
func (s *Presence) Expire(_ context.Context, now time.Time) ([]presence.Left, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var left []presence.Left
	for channel, ms := range s.channels {
		for id, e := range ms {
			if !e.live(now) {
				left = append(left, presence.Left{Channel: channel, Member: e.m})
				s.remove(channel, id)
			}
		}
	}
	return left, nil
}

// Channels reports how many channels have a member (live or not yet expired): zero once
// everyone is gone.
func (s *Presence) Channels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.channels)
}

// remove deletes a member, and its channel with its last member; the caller holds mu.
func (s *Presence) remove(channel, id string) {
	delete(s.channels[channel], id)
	if len(s.channels[channel]) == 0 {
		delete(s.channels, channel)
	}
}
