package presence

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sort"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// Run is the sweeper: every TTL/3 until ctx ends, it heartbeats this node's members (tracking
// again, as a join, one that is gone), claims the sweep of every channel this node holds
// members or subscribers in, expires the members past their deadline in those it leads and in
// those nobody claims, and announces their leaves. When ctx ends it releases its claims, so
// other nodes lead at their next pass rather than a TTL later; the server cancels it once its
// sessions have closed (they untrack as they close).
func (p *Presence) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Bounded: a Store that does not answer leaves the claims to lapse.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.TTL/3)
			p.Release(rctx)
			cancel()
			return
		case <-t.C:
			p.Sweep(ctx)
		}
	}
}

// Sweep is one pass of the sweeper: Run calls it; a test may call it on its own clock.
func (p *Presence) Sweep(ctx context.Context) {
	for _, channel := range p.known() {
		p.sweepChannel(ctx, channel)
	}
	// Members in channels no live node claims: their nodes died, and nobody holds members or
	// subscribers there any more. Whoever sweeps first removes them; each leaves once.
	left, err := p.store.Expire(ctx, p.cfg.Now())
	if err != nil {
		// A store that fails part way returns the members it did remove with the error: they
		// are gone, so their leaves are announced all the same.
		p.cfg.Logger.Warn("presence: expiry failed", "err", err, "removed", len(left))
	}
	sort.Slice(left, func(i, j int) bool {
		if left[i].Channel != left[j].Channel {
			return left[i].Channel < left[j].Channel
		}
		return left[i].Member.ID < left[j].Member.ID
	})
	for i := 0; i < len(left); {
		channel := left[i].Channel
		st, unlock := p.lock(channel)
		for ; i < len(left) && left[i].Channel == channel; i++ {
			p.emit(channel, st, stream.PresenceLeave, left[i].Member)
		}
		unlock()
	}
}

// Release withdraws this node's claims on the channels' sweeps, whatever it still holds
// there: the next leader expires this node's members at their deadline. Run calls it as it
// stops.
func (p *Presence) Release(ctx context.Context) {
	for _, channel := range p.known() {
		st, unlock := p.lock(channel)
		p.release(ctx, channel, st)
		unlock()
	}
}

// known returns the channels this node keeps state for, ordered.
func (p *Presence) known() []string {
	p.mu.Lock()
	names := make([]string, 0, len(p.channels))
	for channel := range p.channels {
		names = append(names, channel)
	}
	p.mu.Unlock()
	sort.Strings(names)
	return names
}

// sweepChannel heartbeats this node's members of channel, then claims its sweep, or lets the
// claim go when the node holds nothing there any more.
func (p *Presence) sweepChannel(ctx context.Context, channel string) {
	st, unlock := p.lock(channel)
	defer unlock()
	now := p.cfg.Now()
	p.heartbeat(ctx, channel, st, now)

	p.mu.Lock()
	interested := st.interested()
	p.mu.Unlock()
	if !interested {
		p.release(ctx, channel, st)
		return
	}
	lease, err := p.store.Sweep(ctx, channel, p.cfg.Node, now, p.cfg.TTL)
	p.mu.Lock()
	wasLeading, heard := st.leads, st.heard
	st.claimed = true // even on an error: the claim may have landed, and releasing none is harmless
	if err == nil {
		st.leads = lease.Leads
		switch {
		case lease.Leads:
			st.heard = nil
		case lease.Roster != nil:
			// A leader that has not swept yet has said nothing: what was heard is kept.
			st.heard = lease.Roster
		}
	}
	p.mu.Unlock()
	if err != nil {
		p.cfg.Logger.Warn("presence: sweep claim failed", "channel", channel, "err", err)
		return
	}
	if !lease.Leads {
		return
	}
	gone := lease.Left
	// A takeover: the members the last leader's roster named that are no longer stored left
	// with no leave announced (their node died with it, or before it relayed them). The store's
	// copy of that roster is the freshest; the one this node heard as a follower stands in for
	// a lease the store lost.
	prior := lease.Prior
	if prior == nil && !wasLeading {
		prior = heard
	}
	if prior != nil {
		vanished := vanished(prior, lease)
		if len(vanished) > 0 {
			p.cfg.Logger.Info("presence: took over a channel's sweep; announcing the leaves of the members gone with the last leader",
				"channel", channel, "node", p.cfg.Node, "members", len(vanished))
		}
		gone = append(gone, vanished...)
		sort.Slice(gone, func(i, j int) bool { return gone[i].ID < gone[j].ID })
	}
	for _, m := range gone {
		p.emit(channel, st, stream.PresenceLeave, m)
	}
}

// heartbeat renews this node's members of channel, tracking again, as a join, a member that is
// gone (it expired: this node stalled past the TTL, or the store lost it); the caller holds
// st.order.
func (p *Presence) heartbeat(ctx context.Context, channel string, st *channelState, now time.Time) {
	p.mu.Lock()
	locals := make([]Member, 0, len(st.local))
	for _, m := range st.local {
		locals = append(locals, m)
	}
	p.mu.Unlock()
	sort.Slice(locals, func(i, j int) bool { return locals[i].ID < locals[j].ID })
	for _, m := range locals {
		ok, err := p.store.Touch(ctx, channel, m.ID, now, p.cfg.TTL)
		if err != nil {
			p.cfg.Logger.Warn("presence: heartbeat failed", "channel", channel, "err", err)
			continue
		}
		if ok {
			continue
		}
		_, err = p.store.Track(ctx, channel, m, now, p.cfg.TTL, p.cfg.MaxMembers)
		switch {
		case errors.Is(err, ErrFull):
			// The channel filled meanwhile: the member is gone for good, and says so.
			p.cfg.Logger.Warn("presence: a member gone could not join again: the channel is full", "channel", channel, "member", m.ID)
			p.mu.Lock()
			p.forgetMemberLocked(st, m.ID)
			p.mu.Unlock()
			p.emit(channel, st, stream.PresenceLeave, m)
		case err != nil:
			// Kept: the next pass's heartbeat finds out whether this track landed.
			p.cfg.Logger.Warn("presence: a member gone could not join again", "channel", channel, "member", m.ID, "err", err)
		default:
			p.emit(channel, st, stream.PresenceJoin, m)
		}
	}
}

// release withdraws this node's claim on channel's sweep, if it may hold one; the caller
// holds st.order.
func (p *Presence) release(ctx context.Context, channel string, st *channelState) {
	p.mu.Lock()
	claimed := st.claimed
	p.mu.Unlock()
	if !claimed {
		return
	}
	if err := p.store.Release(ctx, channel, p.cfg.Node, p.cfg.Now()); err != nil {
		// The claim lapses by its deadline: another node leads within a TTL.
		p.cfg.Logger.Warn("presence: releasing a channel's sweep failed", "channel", channel, "err", err)
	}
	p.mu.Lock()
	st.claimed, st.leads, st.heard = false, false, nil
	p.mu.Unlock()
}

// vanished returns the members of prior, a roster, that lease (a leader's) shows are no longer
// stored. Past a full roster's last id the store may hold members the roster does not name:
// those are left alone.
func vanished(prior []Member, lease Lease) []Member {
	present := make(map[string]bool, len(lease.Roster)+len(lease.Left))
	for _, m := range lease.Roster {
		present[m.ID] = true
	}
	for _, m := range lease.Left {
		present[m.ID] = true // announced as expired
	}
	last := ""
	if len(lease.Roster) >= RosterLimit {
		last = lease.Roster[len(lease.Roster)-1].ID
	}
	var out []Member
	for _, m := range prior {
		if present[m.ID] || (last != "" && m.ID > last) {
			continue
		}
		out = append(out, Member{ID: m.ID, Subject: m.Subject})
	}
	return out
}

// NewNodeID returns a UUIDv7 made at now: 48 bits of Unix milliseconds, then random bits, so
// ids sort by when their node started and the longest-lived node leads a channel's sweep. The
// server names a node with one when cluster.node_id is empty.
func NewNodeID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	b[6] = b[6]&0x0f | 0x70 // version 7
	b[8] = b[8]&0x3f | 0x80 // variant 10
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
