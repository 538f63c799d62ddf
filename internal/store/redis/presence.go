package redis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/presence"
)

// PresenceShards is how many shards the channels' presence spreads over. A shard is one hash
// tag: its index and the keys of every channel in it share a Cluster slot, so one script keeps a
// channel and the index Expire reads in step. Part of the key layout: changing it strands the
// members already stored (their keys' TTL collects them).
const PresenceShards = 64

// expireBatch is how many channels one Expire script sweeps in a shard; the next call takes
// the rest, so no script runs long.
const expireBatch = 64

// Presence is presence.Store on Redis, shared by every node. Deadlines, members' and claims',
// are the callers' clocks (presence.Store passes now), so the nodes' clocks must agree to well
// within the TTL; the keys' own TTLs, the backstop, run on Redis's clock. See the package
// documentation for its keys.
type Presence struct {
	c *Client // read-only

	track, touch, untrack, members, expire, sweep, release *rueidis.Lua
}

var _ presence.Store = (*Presence)(nil)

// NewPresence returns the presence store on c.
func NewPresence(c *Client) *Presence {
	return &Presence{
		c:       c,
		track:   rueidis.NewLuaScript(presenceTrackScript),
		touch:   rueidis.NewLuaScript(presenceTouchScript),
		untrack: rueidis.NewLuaScript(presenceUntrackScript),
		members: rueidis.NewLuaScriptReadOnly(presenceMembersScript),
		expire:  rueidis.NewLuaScript(presenceExpireScript),
		sweep:   rueidis.NewLuaScript(presenceSweepScript),
		release: rueidis.NewLuaScript(presenceReleaseScript),
	}
}

// shardTag returns the hash tag of a presence shard.
func shardTag(n int) string { return "{p:" + strconv.Itoa(n) + "}" }

func presenceShard(channel string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(channel))
	return int(h.Sum32() % PresenceShards)
}

// channelKeys returns the index, deadlines and members keys of channel.
func (s *Presence) channelKeys(channel string) []string {
	tag := shardTag(presenceShard(channel))
	return []string{s.c.key("i", tag), s.c.key("d", tag) + ":" + channel, s.c.key("m", tag) + ":" + channel}
}

// leaseKey returns the key of channel's sweep lease, in its shard's slot.
func (s *Presence) leaseKey(channel string) string {
	return s.c.key("a", shardTag(presenceShard(channel))) + ":" + channel
}

// keepMillis is the TTL of a channel's keys: twice the members' TTL, renewed by every track
// and heartbeat.
func keepMillis(ttl time.Duration) string { return strconv.FormatInt(2*ttl.Milliseconds(), 10) }

func unixMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// encodeMember stores a member as <len(subject)>:<subject><meta>.
func encodeMember(m presence.Member) string {
	return strconv.Itoa(len(m.Subject)) + ":" + m.Subject + string(m.Meta)
}

func decodeMember(id, v string) (presence.Member, error) {
	l, rest, ok := strings.Cut(v, ":")
	n, err := strconv.Atoi(l)
	if !ok || err != nil || n < 0 || n > len(rest) {
		return presence.Member{}, fmt.Errorf("member %q: malformed value", id)
	}
	m := presence.Member{ID: id, Subject: rest[:n]}
	if len(rest) > n {
		m.Meta = []byte(rest[n:])
	}
	return m, nil
}

// Track implements presence.Store: one script, which counts the live members and adds one.
func (s *Presence) Track(ctx context.Context, channel string, m presence.Member, now time.Time, ttl time.Duration, max int) (bool, error) {
	args := []string{channel, m.ID, encodeMember(m), unixMillis(now), unixMillis(now.Add(ttl)), strconv.Itoa(max), keepMillis(ttl)}
	n, err := s.track.Exec(ctx, s.c.rc, s.channelKeys(channel), args).AsInt64()
	if err != nil {
		return false, fmt.Errorf("presence track %s/%s: %w", channel, m.ID, err)
	}
	if n < 0 {
		return false, presence.ErrFull
	}
	return n == 1, nil
}

// Touch implements presence.Store.
func (s *Presence) Touch(ctx context.Context, channel, id string, now time.Time, ttl time.Duration) (bool, error) {
	args := []string{channel, id, unixMillis(now), unixMillis(now.Add(ttl)), keepMillis(ttl)}
	n, err := s.touch.Exec(ctx, s.c.rc, s.channelKeys(channel), args).AsInt64()
	if err != nil {
		return false, fmt.Errorf("presence touch %s/%s: %w", channel, id, err)
	}
	return n == 1, nil
}

// Untrack implements presence.Store.
func (s *Presence) Untrack(ctx context.Context, channel, id string) (presence.Member, bool, error) {
	v, err := s.untrack.Exec(ctx, s.c.rc, s.channelKeys(channel), []string{channel, id}).ToString()
	if rueidis.IsRedisNil(err) {
		return presence.Member{}, false, nil
	}
	if err != nil {
		return presence.Member{}, false, fmt.Errorf("presence untrack %s/%s: %w", channel, id, err)
	}
	m, err := decodeMember(id, v)
	if err != nil {
		return presence.Member{}, false, fmt.Errorf("presence untrack %s: %w", channel, err)
	}
	return m, true, nil
}

// Members implements presence.Store: one read-only script.
func (s *Presence) Members(ctx context.Context, channel string, now time.Time) ([]presence.Member, error) {
	keys := s.channelKeys(channel)[1:]
	flat, err := s.members.Exec(ctx, s.c.rc, keys, []string{unixMillis(now)}).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("presence members %s: %w", channel, err)
	}
	out := make([]presence.Member, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		m, err := decodeMember(flat[i], flat[i+1])
		if err != nil {
			return nil, fmt.Errorf("presence members %s: %w", channel, err)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Expire implements presence.Store: one script per shard, sent together, again for the shards
// that had more channels due than one script sweeps. Each member leaves once: the script that
// returns it has removed it. A due channel a live claim covers is skipped, and stays due: the
// next call for its shard starts past the ones skipped so far.
func (s *Presence) Expire(ctx context.Context, now time.Time) ([]presence.Left, error) {
	type pass struct{ shard, skip int }
	pending := make([]pass, PresenceShards)
	for i := range pending {
		pending[i] = pass{shard: i}
	}
	var left []presence.Left
	for len(pending) > 0 {
		execs := make([]rueidis.LuaExec, len(pending))
		for i, p := range pending {
			tag := shardTag(p.shard)
			execs[i] = rueidis.LuaExec{
				Keys: []string{s.c.key("i", tag)},
				Args: []string{s.c.prefix + ":", tag, unixMillis(now), strconv.Itoa(expireBatch), strconv.Itoa(p.skip)},
			}
		}
		var again []pass
		var errs []error
		for i, r := range s.expire.ExecMulti(ctx, s.c.rc, execs...) {
			flat, err := r.AsStrSlice()
			if err == nil && (len(flat) < 2 || (len(flat)-2)%3 != 0) {
				err = fmt.Errorf("%d strings, want a flag, a count and triples", len(flat))
			}
			var skipped int
			if err == nil {
				skipped, err = strconv.Atoi(flat[1])
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %w", pending[i].shard, err))
				continue
			}
			if flat[0] == "1" {
				again = append(again, pass{shard: pending[i].shard, skip: pending[i].skip + skipped})
			}
			for j := 2; j < len(flat); j += 3 {
				m, err := decodeMember(flat[j+1], flat[j+2])
				if err != nil {
					errs = append(errs, fmt.Errorf("channel %s: %w", flat[j], err))
					continue
				}
				left = append(left, presence.Left{Channel: flat[j], Member: m})
			}
		}
		if len(errs) > 0 {
			// The members the other shards removed are gone from Redis: they are returned with
			// the error rather than dropped here.
			return left, fmt.Errorf("presence expire: %w", errors.Join(errs...))
		}
		pending = again
	}
	return left, nil
}

// Sweep implements presence.Store: one script, which claims, elects and, for the leader,
// expires and writes the roster, so two nodes never both lead one claim's instant.
func (s *Presence) Sweep(ctx context.Context, channel, node string, now time.Time, ttl time.Duration) (presence.Lease, error) {
	keys := append(s.channelKeys(channel), s.leaseKey(channel))
	args := []string{channel, node, unixMillis(now), unixMillis(now.Add(ttl)), keepMillis(ttl), strconv.Itoa(presence.RosterLimit)}
	flat, err := s.sweep.Exec(ctx, s.c.rc, keys, args).AsStrSlice()
	if err == nil && (len(flat) < 6 || len(flat)%2 != 0) {
		err = fmt.Errorf("%d strings, want six and pairs", len(flat))
	}
	if err != nil {
		return presence.Lease{}, fmt.Errorf("presence sweep %s by %s: %w", channel, node, err)
	}
	l := presence.Lease{Leader: flat[1], Leads: flat[0] == "1"}
	if flat[2] == "1" {
		if l.Roster, err = decodeRoster(flat[3]); err != nil {
			return presence.Lease{}, fmt.Errorf("presence sweep %s by %s: roster: %w", channel, node, err)
		}
	}
	if flat[4] == "1" {
		if l.Prior, err = decodeRoster(flat[5]); err != nil {
			return presence.Lease{}, fmt.Errorf("presence sweep %s by %s: prior roster: %w", channel, node, err)
		}
	}
	for i := 6; i < len(flat); i += 2 {
		m, err := decodeMember(flat[i], flat[i+1])
		if err != nil {
			// Removed all the same: its leave goes out without the subject.
			m = presence.Member{ID: flat[i]}
		}
		l.Left = append(l.Left, m)
	}
	sort.Slice(l.Left, func(i, j int) bool { return l.Left[i].ID < l.Left[j].ID })
	return l, nil
}

// Release implements presence.Store: one script.
func (s *Presence) Release(ctx context.Context, channel, node string, now time.Time) error {
	keys := append(s.channelKeys(channel)[1:], s.leaseKey(channel))
	args := []string{node, unixMillis(now), strconv.Itoa(presence.RosterLimit)}
	if err := s.release.Exec(ctx, s.c.rc, keys, args).Error(); err != nil {
		return fmt.Errorf("presence release %s by %s: %w", channel, node, err)
	}
	return nil
}

// decodeRoster reads a lease's roster, <len(id)>:<id><len(subject)>:<subject> per member, and
// orders it by id ("" is the empty roster, not none).
func decodeRoster(v string) ([]presence.Member, error) {
	out := []presence.Member{}
	for v != "" {
		id, rest, err := cutCounted(v)
		if err != nil {
			return nil, fmt.Errorf("member %d: id: %w", len(out), err)
		}
		subject, rest, err := cutCounted(rest)
		if err != nil {
			return nil, fmt.Errorf("member %q: subject: %w", id, err)
		}
		out = append(out, presence.Member{ID: id, Subject: subject})
		v = rest
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// cutCounted splits <n>:<n bytes><rest>.
func cutCounted(v string) (field, rest string, err error) {
	l, rest, ok := strings.Cut(v, ":")
	n, err := strconv.Atoi(l)
	if !ok || err != nil || n < 0 || n > len(rest) {
		return "", "", errors.New("malformed length")
	}
	return rest[:n], rest[n:], nil
}

// Channels reports how many channels hold members (live or not yet expired), summed over the
// shards' indexes: zero once everyone is gone. It answers -1 when Redis does not, within the
// client's timeout.
func (s *Presence) Channels() int {
	ctx, cancel := context.WithTimeout(context.Background(), s.c.timeout)
	defer cancel()
	cmds := make(rueidis.Commands, PresenceShards)
	for i := range cmds {
		cmds[i] = s.c.rc.B().Zcard().Key(s.c.key("i", shardTag(i))).Build()
	}
	total := 0
	for _, r := range s.c.rc.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return -1
		}
		total += int(n)
	}
	return total
}
