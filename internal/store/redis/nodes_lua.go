package redis

// The registry scripts. Each runs over the registry's two keys, which share one hash tag (one
// Cluster slot): KEYS[1] the deadlines (node -> ms, Redis's clock), KEYS[2] the entries
// (node -> "<incarnation> <url>"). A node is live while Redis's now < its deadline. Deadlines
// are computed here from TIME, so they do not depend on the nodes' clocks.
const nodesPrelude = `
local V, U = KEYS[1], KEYS[2]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function split(v)
  local i = string.find(v, ' ', 1, true)
  if not i then return v, '' end
  return string.sub(v, 1, i - 1), string.sub(v, i + 1)
end
`

// KEYS: V U. ARGV: node incarnation url ttl_ms. Returns {1, ""} registered or renewed, or
// {0, url} when another incarnation holds the id and is live (at url).
// Registering reaps up to 64 entries past their deadline: nodes that died without saying so.
// The keys' TTL, twice the longest TTL a live node registered with, collects a registry nobody
// writes to any more.
const nodesRegisterScript = nodesPrelude + `
local node, inc, url, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local dead = redis.call('ZRANGEBYSCORE', V, '-inf', now, 'LIMIT', 0, 64)
for _, n in ipairs(dead) do
  if n ~= node then
    redis.call('ZREM', V, n)
    redis.call('HDEL', U, n)
  end
end
local dl = redis.call('ZSCORE', V, node)
local held = redis.call('HGET', U, node)
if dl and tonumber(dl) > now and held then
  local hinc, hurl = split(held)
  if hinc ~= inc then return {0, hurl} end
end
redis.call('ZADD', V, now + ttl, node)
redis.call('HSET', U, node, inc .. ' ' .. url)
local keepms = 2 * ttl
if redis.call('PTTL', V) < keepms then
  redis.call('PEXPIRE', V, keepms)
  redis.call('PEXPIRE', U, keepms)
end
return {1, ''}
`

// KEYS: V U. ARGV: node incarnation. Removes the node's entry if this incarnation holds it.
// Returns 1 removed, 0 not there or another's.
const nodesDeregisterScript = nodesPrelude + `
local held = redis.call('HGET', U, ARGV[1])
if not held then return 0 end
local hinc = split(held)
if hinc ~= ARGV[2] then return 0 end
redis.call('ZREM', V, ARGV[1])
redis.call('HDEL', U, ARGV[1])
return 1
`

// KEYS: V U. ARGV: node. Read-only. Returns the node's URL, or nil when it is not live.
const nodesLookupScript = nodesPrelude + `
local dl = redis.call('ZSCORE', V, ARGV[1])
if not dl or tonumber(dl) <= now_ms() then return false end
local held = redis.call('HGET', U, ARGV[1])
if not held then return false end
local _, url = split(held)
return url
`

// KEYS: V U. Read-only. Returns node, url, node, url, ... for every live node.
const nodesLiveScript = nodesPrelude + `
local live = redis.call('ZRANGEBYSCORE', V, '(' .. now_ms(), '+inf')
local out = {}
if #live == 0 then return out end
local held = redis.call('HMGET', U, unpack(live))
for i, n in ipairs(live) do
  if held[i] then
    local _, url = split(held[i])
    out[#out + 1] = n
    out[#out + 1] = url
  end
end
return out
`
