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

// Presence is presence.Store on Redis, shared by every node. Deadlines are the callers'
// clocks (presence.Store passes now), so the nodes' clocks must agree to well within the TTL;
// the keys' own TTLs, the backstop, run on Redis's clock. See the package documentation for
// its keys.
type Presence struct {
	c *Client // read-only

	track, touch, untrack, members, expire *rueidis.Lua
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
// returns it has removed it.
func (s *Presence) Expire(ctx context.Context, now time.Time) ([]presence.Left, error) {
	pending := make([]int, PresenceShards)
	for i := range pending {
		pending[i] = i
	}
	var left []presence.Left
	for len(pending) > 0 {
		execs := make([]rueidis.LuaExec, len(pending))
		for i, shard := range pending {
			tag := shardTag(shard)
			execs[i] = rueidis.LuaExec{
				Keys: []string{s.c.key("i", tag)},
				Args: []string{s.c.prefix + ":", tag, unixMillis(now), strconv.Itoa(expireBatch)},
			}
		}
		var again []int
		var errs []error
		for i, r := range s.expire.ExecMulti(ctx, s.c.rc, execs...) {
			flat, err := r.AsStrSlice()
			if err == nil && (len(flat) == 0 || (len(flat)-1)%3 != 0) {
				err = fmt.Errorf("%d strings, want a flag and triples", len(flat))
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %w", pending[i], err))
				continue
			}
			if flat[0] == "1" {
				again = append(again, pending[i])
			}
			for j := 1; j < len(flat); j += 3 {
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
