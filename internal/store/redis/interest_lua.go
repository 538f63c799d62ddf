package redis

// The interest scripts. Each runs over one owner's keys (one hash tag, one Cluster slot).
// KEYS[1..4] are the owner's watched set, identity counts, socket deadlines and generation; the
// token and socket hashes a script finds as it goes are built from ARGV[1] (the key prefix,
// "<prefix>:") and ARGV[2] (the owner's tag), and share the slot.
const interestPrelude = `
local base, tag = ARGV[1], ARGV[2]
local W, N, L, G = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function tkey(tok) return base .. 't:' .. tag .. ':' .. tok end
local function skey(sock) return base .. 's:' .. tag .. ':' .. sock end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function split(v)
  local i = string.find(v, '\0', 1, true)
  return string.sub(v, 1, i - 1), string.sub(v, i + 1)
end
-- drop removes one row. The token leaves the watched set only when its hash is empty, so one
-- socket's unsubscribe never silences another's subscription under the same token.
local function drop(sock, sub, v)
  local tok, id = split(v)
  local tk = tkey(tok)
  redis.call('HDEL', tk, sock .. '\0' .. sub)
  if redis.call('HLEN', tk) == 0 then redis.call('SREM', W, tok) end
  if redis.call('HINCRBY', N, id, -1) <= 0 then redis.call('HDEL', N, id) end
end
local function reap(sock)
  local sk = skey(sock)
  local held = redis.call('HGETALL', sk)
  for i = 1, #held, 2 do drop(sock, held[i], held[i + 1]) end
  redis.call('DEL', sk)
  redis.call('ZREM', L, sock)
  return #held > 0
end
-- prune reaps sockets past their deadline: the rows of a node that died. At most 64 per call
-- keep a script short; the next write takes the rest.
local function prune(now)
  local any = false
  for _, sock in ipairs(redis.call('ZRANGEBYSCORE', L, '-inf', '(' .. now, 'LIMIT', 0, 64)) do
    if reap(sock) then any = true end
  end
  return any
end
local function bump(gttl)
  local g = redis.call('INCR', G)
  redis.call('PEXPIRE', G, gttl)
  return g
end
local function keep(ms)
  redis.call('PEXPIRE', W, ms)
  redis.call('PEXPIRE', N, ms)
  redis.call('PEXPIRE', L, ms)
end
`

// KEYS: W N L G S T. ARGV: base tag socket sub token identity row ttl keep gttl max.
// Returns the new generation, -1 for a duplicate, -2 past the identity's limit.
const addScript = interestPrelude + `
local S, T = KEYS[5], KEYS[6]
local sock, sub, tok, id, row = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local ttl, keepms, gttl, max = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local now = now_ms()
local pruned = prune(now)
local refused = 0
if redis.call('HEXISTS', S, sub) == 1 then
  refused = -1
elseif tonumber(redis.call('HGET', N, id) or '0') >= max then
  refused = -2
end
if refused ~= 0 then
  if pruned then bump(gttl) end
  return refused
end
-- The row lands before its token joins the watched set.
redis.call('HSET', T, sock .. '\0' .. sub, row)
redis.call('SADD', W, tok)
redis.call('HSET', S, sub, tok .. '\0' .. id)
redis.call('HINCRBY', N, id, 1)
redis.call('ZADD', L, now + ttl, sock)
keep(keepms)
redis.call('PEXPIRE', S, keepms)
redis.call('PEXPIRE', T, keepms)
return bump(gttl)
`

// KEYS: W N L G S. ARGV: base tag socket sub gttl. Returns the new generation, or -1 when the
// socket does not hold sub.
const removeScript = interestPrelude + `
local S = KEYS[5]
local sock, sub, gttl = ARGV[3], ARGV[4], tonumber(ARGV[5])
local pruned = prune(now_ms())
local v = redis.call('HGET', S, sub)
if not v then
  if pruned then bump(gttl) end
  return -1
end
drop(sock, sub, v)
redis.call('HDEL', S, sub)
if redis.call('HLEN', S) == 0 then redis.call('ZREM', L, sock) end
return bump(gttl)
`

// KEYS: W N L G S. ARGV: base tag socket gttl. Returns the generation: a new one when rows went.
const reapScript = interestPrelude + `
local sock, gttl = ARGV[3], tonumber(ARGV[4])
local pruned = prune(now_ms())
if reap(sock) or pruned then return bump(gttl) end
return tonumber(redis.call('GET', G) or '0')
`

// KEYS: W N L G S. ARGV: base tag socket ttl keep gttl. Returns how many rows the socket holds.
// The socket renews itself before pruning, so a refresh that comes late, before anyone reaped
// it, keeps its rows.
const refreshScript = interestPrelude + `
local S = KEYS[5]
local sock, ttl, keepms, gttl = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
local held = redis.call('HVALS', S)
if #held > 0 then
  redis.call('ZADD', L, now + ttl, sock)
  redis.call('PEXPIRE', S, keepms)
  keep(keepms)
  local seen = {}
  for _, v in ipairs(held) do
    local tok = split(v)
    if not seen[tok] then
      seen[tok] = true
      redis.call('PEXPIRE', tkey(tok), keepms)
    end
  end
end
if prune(now) then bump(gttl) end
return #held
`

// KEYS: W N L G. ARGV: base tag token... Returns token, field, row triples of live sockets.
const rowsScript = interestPrelude + `
local now = now_ms()
local out = {}
for i = 3, #ARGV do
  local tok = ARGV[i]
  local rows = redis.call('HGETALL', tkey(tok))
  for j = 1, #rows, 2 do
    local sock = split(rows[j])
    local dl = redis.call('ZSCORE', L, sock)
    if dl and tonumber(dl) >= now then
      out[#out + 1] = tok
      out[#out + 1] = rows[j]
      out[#out + 1] = rows[j + 1]
    end
  end
end
return out
`

// KEYS: G M W. ARGV: stamp (1 or 0), mark (16 hex digits, so string order is number order),
// gttl, token... Raises the mark when stamp is 1, and returns the generation, then 1 or 0 for
// each token: watched or not.
const probeScript = `
if ARGV[1] == '1' then
  local cur = redis.call('GET', KEYS[2])
  if not cur or ARGV[2] > cur then
    redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  else
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
end
local out = {tonumber(redis.call('GET', KEYS[1]) or '0')}
for i = 4, #ARGV do
  out[#out + 1] = redis.call('SISMEMBER', KEYS[3], ARGV[i])
end
return out
`

// KEYS: L. Returns the sockets whose deadline has not passed, by the server's clock.
const socketsScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
`
