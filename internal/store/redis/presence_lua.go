package redis

// The presence scripts. Each runs over one shard's keys (one hash tag, one Cluster slot):
// KEYS[1] is the shard's index (channel -> its earliest member deadline), KEYS[2] and KEYS[3] a
// channel's deadlines and members. Deadlines are the caller's clock in ms (presence.Store passes
// now), computed by the caller; a member is live while now < deadline. Times reach commands as
// ARGV's text, never as a Lua number turned back into text (which Lua rounds to 14 digits).
//
// settle keeps the index exact after any change to a channel: its earliest deadline, or the
// channel's keys deleted and its entry gone once the last member has left. keepms > 0 renews
// the channel's keys' TTL (Redis's clock), the backstop that collects a channel nobody writes
// to or sweeps any more.
const presencePrelude = `
local function settle(I, D, M, ch, keepms)
  local first = redis.call('ZRANGE', D, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('DEL', D, M)
    redis.call('ZREM', I, ch)
    return
  end
  redis.call('ZADD', I, first[2], ch)
  if keepms > 0 and redis.call('PTTL', D) < keepms then
    redis.call('PEXPIRE', D, keepms)
    redis.call('PEXPIRE', M, keepms)
  end
end
`

// KEYS: I D M. ARGV: channel id value now deadline max keep. Returns 1 joined, 0 replaced, -1
// full.
// The cap counts live members in the same script that adds one, so tracks from many nodes at
// once never pass it.
const presenceTrackScript = presencePrelude + `
local I, D, M = KEYS[1], KEYS[2], KEYS[3]
local ch, id, val = ARGV[1], ARGV[2], ARGV[3]
local now, max, keepms = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
local dl = redis.call('ZSCORE', D, id)
local live = dl and tonumber(dl) > now
if not live and redis.call('ZCOUNT', D, '(' .. ARGV[4], '+inf') >= max then
  return -1
end
redis.call('ZADD', D, ARGV[5], id)
redis.call('HSET', M, id, val)
settle(I, D, M, ch, keepms)
if live then return 0 end
return 1
`

// KEYS: I D M. ARGV: channel id now deadline keep. Returns 1 renewed, 0 not there (a member past
// its deadline is removed, as Expire would).
const presenceTouchScript = presencePrelude + `
local I, D, M = KEYS[1], KEYS[2], KEYS[3]
local ch, id = ARGV[1], ARGV[2]
local now, keepms = tonumber(ARGV[3]), tonumber(ARGV[5])
local dl = redis.call('ZSCORE', D, id)
if not dl then return 0 end
if tonumber(dl) <= now then
  redis.call('ZREM', D, id)
  redis.call('HDEL', M, id)
  settle(I, D, M, ch, 0)
  return 0
end
redis.call('ZADD', D, ARGV[4], id)
settle(I, D, M, ch, keepms)
return 1
`

// KEYS: I D M. ARGV: channel id. Returns the member's value, or nil when it was not there.
const presenceUntrackScript = presencePrelude + `
local I, D, M = KEYS[1], KEYS[2], KEYS[3]
local ch, id = ARGV[1], ARGV[2]
local v = redis.call('HGET', M, id)
redis.call('ZREM', D, id)
redis.call('HDEL', M, id)
settle(I, D, M, ch, 0)
return v
`

// KEYS: D M. ARGV: now. Returns id, value pairs of the live members. One HGET a member, not
// one HMGET: unpack would fail past Lua's stack for a large presence.max_members.
const presenceMembersScript = `
local D, M = KEYS[1], KEYS[2]
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', D, '(' .. ARGV[1], '+inf')) do
  local v = redis.call('HGET', M, id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  end
end
return out
`

// KEYS: I. ARGV: base tag now limit. Removes the members at or past their deadline in up to
// limit channels of the shard, and returns {more, channel, id, value, ...}: more is "1" when
// channels were left for another call. The channels' keys are built from ARGV[1] (the key
// prefix, "<prefix>:") and ARGV[2] (the shard's tag), and share the slot.
const presenceExpireScript = presencePrelude + `
local I = KEYS[1]
local base, tag, limit = ARGV[1], ARGV[2], tonumber(ARGV[4])
local chans = redis.call('ZRANGEBYSCORE', I, '-inf', ARGV[3], 'LIMIT', 0, limit + 1)
local out = {'0'}
if #chans > limit then out[1] = '1' end
for n = 1, math.min(#chans, limit) do
  local ch = chans[n]
  local D, M = base .. 'd:' .. tag .. ':' .. ch, base .. 'm:' .. tag .. ':' .. ch
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', D, '-inf', ARGV[3])) do
    local v = redis.call('HGET', M, id)
    if v then
      out[#out + 1] = ch
      out[#out + 1] = id
      out[#out + 1] = v
    end
    redis.call('ZREM', D, id)
    redis.call('HDEL', M, id)
  end
  settle(I, D, M, ch, 0)
end
return out
`
