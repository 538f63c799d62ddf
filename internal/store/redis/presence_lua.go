package redis

// The presence scripts. Each runs over one shard's keys (one hash tag, one Cluster slot): I is
// the shard's index (channel -> its earliest member deadline), D and M a channel's deadlines and
// members, A its sweep lease. Deadlines are the caller's clock in ms (presence.Store passes
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

// The sweep lease's scripts. A channel's lease, KEYS[4] of Sweep (A), is a hash beside its
// members: n:<node> -> the node's claim deadline, ms; w -> the node that wrote the roster; r ->
// the roster, <len(id)>:<id><len(subject)>:<subject> per member (the subject part as the
// member's value starts). Node ids are compared byte by byte in Lua, not with <, which is
// strcoll: Redis sets LC_COLLATE from its environment, and the leader must be the same node
// whatever locale each server runs in, and the one Go's ordering names.
const leasePrelude = `
local function less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- leaderOf drops A's claims at or past now and returns the smallest live claimant, or nil.
local function leaderOf(A, now)
  local kv = redis.call('HGETALL', A)
  local leader = nil
  for i = 1, #kv, 2 do
    local f = kv[i]
    if string.sub(f, 1, 2) == 'n:' then
      if tonumber(kv[i + 1]) <= now then
        redis.call('HDEL', A, f)
      else
        local node = string.sub(f, 3)
        if leader == nil or less(node, leader) then leader = node end
      end
    end
  end
  return leader
end

-- rosterOf returns the members of D and M live at nowtext as a roster, at most limit. Only a
-- roster past the limit is sorted here, to keep the first ids: the reader sorts what it reads.
local function rosterOf(D, M, nowtext, limit)
  local ids = redis.call('ZRANGEBYSCORE', D, '(' .. nowtext, '+inf')
  if #ids > limit then table.sort(ids, less) end
  local parts = {}
  for n = 1, math.min(#ids, limit) do
    local id = ids[n]
    local v = redis.call('HGET', M, id)
    if v then
      local c = string.find(v, ':', 1, true)
      parts[#parts + 1] = #id .. ':' .. id .. string.sub(v, 1, c + tonumber(string.sub(v, 1, c - 1)))
    end
  end
  return table.concat(parts)
end
`

// KEYS: I D M A. ARGV: channel node now claimdeadline keep limit. Returns {leads, leader,
// has roster, roster, has prior, prior, id, value, ...}: the ids and values are the members the
// leader's sweep removed; a follower's prior and members are empty. A claim renews the lease's
// TTL, so a lease lives as long as someone claims it, members or not.
const presenceSweepScript = presencePrelude + leasePrelude + `
local I, D, M, A = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ch, node, nowtext = ARGV[1], ARGV[2], ARGV[3]
local now, keepms, limit = tonumber(ARGV[3]), tonumber(ARGV[5]), tonumber(ARGV[6])
redis.call('HSET', A, 'n:' .. node, ARGV[4])
if redis.call('PTTL', A) < keepms then redis.call('PEXPIRE', A, keepms) end
local leader = leaderOf(A, now) or ''
local w = redis.call('HGET', A, 'w')
if leader ~= node then
  if w == leader then return {'0', leader, '1', redis.call('HGET', A, 'r') or '', '0', ''} end
  return {'0', leader, '0', '', '0', ''}
end
local out = {'1', node, '1', '', '0', ''}
if w and w ~= node then
  out[5] = '1'
  out[6] = redis.call('HGET', A, 'r') or ''
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', D, '-inf', nowtext)) do
  local v = redis.call('HGET', M, id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  end
  redis.call('ZREM', D, id)
  redis.call('HDEL', M, id)
end
settle(I, D, M, ch, 0)
out[4] = rosterOf(D, M, nowtext, limit)
redis.call('HSET', A, 'w', node, 'r', out[4])
return out
`

// KEYS: D M A. ARGV: node now limit. Returns 1 when claims remain, 0 when the lease is gone
// with its last one. A roster node wrote is written again first, with the members live now.
const presenceReleaseScript = leasePrelude + `
local D, M, A = KEYS[1], KEYS[2], KEYS[3]
local node, now = ARGV[1], tonumber(ARGV[2])
if redis.call('HGET', A, 'w') == node then
  redis.call('HSET', A, 'r', rosterOf(D, M, ARGV[2], tonumber(ARGV[3])))
end
redis.call('HDEL', A, 'n:' .. node)
if leaderOf(A, now) then return 1 end
redis.call('DEL', A)
return 0
`

// KEYS: I. ARGV: base tag now limit skip. Removes the members at or past their deadline in up
// to limit channels of the shard that no live claim covers, skipping the first skip due
// channels (claimed ones an earlier call passed over), and returns {more, skipped, channel, id,
// value, ...}: more is "1" when channels were left for another call, skipped how many of these
// were claimed and stay due. A channel swept here leaves the due range, so the next call's skip
// is this one's plus skipped. The channels' keys are built from ARGV[1] (the key prefix,
// "<prefix>:") and ARGV[2] (the shard's tag), and share the slot.
const presenceExpireScript = presencePrelude + leasePrelude + `
local I = KEYS[1]
local base, tag, now, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local chans = redis.call('ZRANGEBYSCORE', I, '-inf', ARGV[3], 'LIMIT', tonumber(ARGV[5]), limit + 1)
local out = {'0', '0'}
if #chans > limit then out[1] = '1' end
local skipped = 0
for n = 1, math.min(#chans, limit) do
  local ch = chans[n]
  local A = base .. 'a:' .. tag .. ':' .. ch
  if leaderOf(A, now) then
    skipped = skipped + 1
  else
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
    if redis.call('EXISTS', D) == 0 then redis.call('DEL', A) end
  end
end
out[2] = tostring(skipped)
return out
`
