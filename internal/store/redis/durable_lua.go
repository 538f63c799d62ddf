package redis

// durableScript is durable.Queue's rules in one script, for one subscription's keys, all in
// its holder's slot. It follows queue.go step for step (the conformance suite drives both with
// the same random steps and compares every answer): read what the step needs, apply the rule
// in Lua tables, write back what changed.
//
// KEYS: 1 H (the holder's subscriptions: name -> def), 2 S (state), 3 C (bound connections:
// id -> order|node|inflight|deadline), 4 Q (ZSET: entry ids by queue order, score = id), 5 E
// (entries: id -> entry), 6 L (leases: id -> lease|deadline|attempts|last|tried,...), 7 P
// (positions: pos -> id), 8 K (settled: pos -> conn), 9 R (LIST: settled positions, newest
// first), 10 O (the owner's claim).
//
// ARGV: 1 op, 2 name, 3 now (ms), 4 max items, 5 max bytes, 6 lease (ms), 7 max attempts, 8
// max in flight, 9 idle TTL (ms), 10 max per holder, 11 settled memory, 12 connection TTL (ms),
// 13... the op's.
//
// An entry is m\n<pos>\n<size>\n<channel>\n<event>\n<data> or g\n<first>\n<last>\n<lost>\n<reason>
// (no part holds a newline: compact JSON has none). Times and positions reach commands as
// ARGV's text or from the keys, never as a Lua number printed back (Lua prints 14 digits),
// except offsets and deadlines compared as numbers (below 2^53, exact in a double).
//
// The answer: status (ok, gone, conflict, toomany), then a value the op gives (the ack's
// result, a bind's created flag and def; a claim's answer is the owner and where it feeds
// from, and no more), start, tail, then delivered acked retried
// parked dropped depth gone, then the deliveries: their count, and per delivery conn, node,
// n, and n pairs of entry and attempt.
const durableScript = `
local H, S, C, Q, E, L, P, K, R, O = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local op, name, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local maxItems, maxBytes, leaseMs = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local maxAttempts, maxInFlight, idleTTL = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local maxPerHolder, settledMemory, connTTL = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])

local function keep()
  local ttl = idleTTL + connTTL
  for i = 1, 9 do redis.call('PEXPIRE', KEYS[i], ttl) end
end

local function forget()
  redis.call('DEL', S, C, Q, E, L, P, K, R, O)
  redis.call('HDEL', H, name)
end

if op == 'claim' then
  if redis.call('EXISTS', S) == 0 then return {'gone'} end
  local node, ttl = ARGV[13], ARGV[14]
  local cur = redis.call('GET', O)
  if not cur or cur == node then
    redis.call('SET', O, node, 'PX', ttl)
    cur = node
  end
  local pos = redis.call('HMGET', S, 'tail', 'start')
  local from = pos[1]
  if not from or from == '' then from = pos[2] or '' end
  return {'ok', cur, from}
end
if op == 'forget' then
  if redis.call('EXISTS', S) == 0 then return {'ok', '0'} end
  forget()
  return {'ok', '1'}
end

local st = redis.call('HMGET', S, 'def', 'start', 'tail', 'seq', 'items', 'bytes', 'leased', 'idle', 'cseq')
local created = '0'
if not st[1] then
  if op ~= 'bind' then return {'gone'} end
  if redis.call('HLEN', H) >= maxPerHolder then return {'toomany'} end
  st = {ARGV[13], '', '', '0', '0', '0', '0', ARGV[3], '0'}
  redis.call('HSET', H, name, ARGV[13])
  created = '1'
elseif op == 'bind' and st[1] ~= ARGV[13] then
  return {'conflict', st[1]}
end
local def, start, tail = st[1], st[2], st[3]
local seq, items, bytes, leased = tonumber(st[4]), tonumber(st[5]), tonumber(st[6]), tonumber(st[7])
local idle, cseq = tonumber(st[8]), tonumber(st[9])
local single = string.sub(def, -7) == '\nsingle'

if op == 'begin' then
  if start == '' then redis.call('HSET', S, 'start', ARGV[13]) end
  keep()
  return {'ok'}
end

-- The bound connections, in the order they bound (the last is the most recent).
local conns = {}
local flat = redis.call('HGETALL', C)
for i = 1, #flat, 2 do
  local o, node, inf, dl = string.match(flat[i + 1], '^(%d+)|([^|]*)|(%d+)|(%d+)$')
  conns[#conns + 1] = {id = flat[i], order = tonumber(o), node = node, inflight = tonumber(inf), deadline = dl}
end
table.sort(conns, function(a, b) return a.order < b.order end)
local function findConn(id)
  for i, c in ipairs(conns) do if c.id == id then return i, c end end
  return nil, nil
end
local function saveConn(c)
  redis.call('HSET', C, c.id, c.order .. '|' .. c.node .. '|' .. c.inflight .. '|' .. c.deadline)
end

if op == 'touch' then
  local dl = tostring(now + connTTL)
  for i = 13, #ARGV do
    local _, c = findConn(ARGV[i])
    if c then c.deadline = dl; saveConn(c) end
  end
  keep()
  return {'ok'}
end

-- The entries, in queue order: false for a slot emptied by this step.
local ents = {}
local ids = redis.call('ZRANGE', Q, 0, -1)
local function split(s)
  local parts, from = {}, 1
  while true do
    local at = string.find(s, '\n', from, true)
    if not at then parts[#parts + 1] = string.sub(s, from); return parts end
    parts[#parts + 1] = string.sub(s, from, at - 1)
    from = at + 1
  end
end
for from = 1, #ids, 1000 do
  local chunk = {}
  for i = from, math.min(from + 999, #ids) do chunk[#chunk + 1] = ids[i] end
  local vals = redis.call('HMGET', E, unpack(chunk))
  local ls = redis.call('HMGET', L, unpack(chunk))
  for i, id in ipairs(chunk) do
    local v = vals[i]
    local e = {id = id, raw = v, lease = '', deadline = 0, attempts = 0, last = '', tried = {}}
    local p = split(v)
    if p[1] == 'm' then
      e.kind, e.pos, e.size = 'm', p[2], tonumber(p[3])
    else
      e.kind, e.first, e.last_, e.lost, e.reason = 'g', p[2], p[3], tonumber(p[4]), p[5]
    end
    if ls[i] then
      local l, dl, att, last, tried = string.match(ls[i], '^([^|]*)|(%d+)|(%d+)|([^|]*)|(.*)$')
      e.lease, e.deadline, e.attempts, e.last = l, tonumber(dl), tonumber(att), last
      for t in string.gmatch(tried, '[^,]+') do e.tried[#e.tried + 1] = t end
    end
    ents[#ents + 1] = e
  end
end

local out = {delivered = 0, acked = 0, retried = 0, parked = 0, dropped = 0}
local function contains(list, x)
  for _, y in ipairs(list) do if y == x then return true end end
  return false
end
local function saveLease(e)
  redis.call('HSET', L, e.id, e.lease .. '|' .. e.deadline .. '|' .. e.attempts .. '|' .. e.last .. '|' .. table.concat(e.tried, ','))
end
local function encodeMarker(e)
  e.raw = 'g\n' .. e.first .. '\n' .. e.last_ .. '\n' .. e.lost .. '\n' .. e.reason
  redis.call('HSET', E, e.id, e.raw)
end
local function addLost(a, b)
  if a == 0 or b == 0 then return 0 end
  return a + b
end
local function posAfter(p, q)
  if q == '' then return true end
  local pe, po = string.match(p, '^(.*):(%d+)$')
  local qe, qo = string.match(q, '^(.*):(%d+)$')
  if pe ~= qe then return true end
  return tonumber(po) > tonumber(qo)
end

-- removeAt empties slot i and forgets what it held.
local function removeAt(i)
  local e = ents[i]
  ents[i] = false
  redis.call('ZREM', Q, e.id)
  redis.call('HDEL', E, e.id)
  redis.call('HDEL', L, e.id)
  if e.kind ~= 'm' then return end
  redis.call('HDEL', P, e.pos)
  items = items - 1
  bytes = bytes - e.size
  if e.lease ~= '' then
    local _, c = findConn(e.lease)
    if c then c.inflight = c.inflight - 1; saveConn(c) end
    e.lease = ''
    leased = leased - 1
  end
end

-- markAt puts a marker for the one item at pos in slot i, emptied by removeAt, under the id
-- it had (its place in the queue), or merges it into the marker in the nearest live slot
-- before when that is one of the same reason.
local function markAt(i, id, pos, reason)
  for j = i - 1, 1, -1 do
    local prev = ents[j]
    if prev then
      if prev.kind == 'g' and prev.reason == reason then
        prev.last_ = pos
        prev.lost = addLost(prev.lost, 1)
        encodeMarker(prev)
        return
      end
      break
    end
  end
  local m = {id = id, kind = 'g', first = pos, last_ = pos, lost = 1, reason = reason, lease = '', tried = {}}
  ents[i] = m
  redis.call('ZADD', Q, id, id)
  encodeMarker(m)
end

local function release(i)
  local e = ents[i]
  local _, c = findConn(e.lease)
  if c then c.inflight = c.inflight - 1; saveConn(c) end
  leased = leased - 1
  if not contains(e.tried, e.lease) then e.tried[#e.tried + 1] = e.lease end
  e.lease = ''
  if e.attempts < maxAttempts then
    out.retried = out.retried + 1
    saveLease(e)
    return
  end
  removeAt(i)
  markAt(i, e.id, e.pos, 'parked')
  out.parked = out.parked + 1
end

local function unbind(id)
  local i = findConn(id)
  if not i then return false end
  table.remove(conns, i)
  redis.call('HDEL', C, id)
  for j = 1, #ents do
    local e = ents[j]
    if e and e.lease == id then release(j) end
  end
  if #conns == 0 then idle = now end
  return true
end

local deliveries, order = {}, {}
local function give(c, raw, attempt)
  if not deliveries[c.id] then
    deliveries[c.id] = {}
    order[#order + 1] = c
  end
  local d = deliveries[c.id]
  d[#d + 1] = raw
  d[#d + 1] = tostring(attempt)
end

local function dispatch()
  if #conns == 0 then return end
  if not single then
    for i = 1, #ents do
      local e = ents[i]
      if e then
        for j = #conns, 1, -1 do give(conns[j], e.raw, 0) end
        if e.kind == 'm' then out.delivered = out.delivered + #conns end
        removeAt(i)
      end
    end
    return
  end
  for i = 1, #ents do
    local e = ents[i]
    if e and e.lease == '' then
      if e.kind == 'g' then
        for j = #conns, 1, -1 do give(conns[j], e.raw, 0) end
        removeAt(i)
      else
        local room = false
        for _, c in ipairs(conns) do if c.inflight < maxInFlight then room = true end end
        if not room then break end
        local allTried = true
        for _, c in ipairs(conns) do if not contains(e.tried, c.id) then allTried = false end end
        if allTried then e.tried = {} end
        local pick = nil
        for j = #conns, 1, -1 do
          local c = conns[j]
          if c.inflight < maxInFlight and not contains(e.tried, c.id) then pick = c; break end
        end
        if pick then
          pick.inflight = pick.inflight + 1
          saveConn(pick)
          leased = leased + 1
          e.lease, e.deadline, e.last = pick.id, now + leaseMs, pick.id
          e.attempts = e.attempts + 1
          saveLease(e)
          give(pick, e.raw, e.attempts)
          out.delivered = out.delivered + 1
        end
      end
    end
  end
end

local status, value = 'ok', created
local changed = true
if op == 'bind' then
  local _, c = findConn(ARGV[14])
  local dl = tostring(now + connTTL)
  if c then
    c.deadline = dl
  else
    cseq = cseq + 1
    c = {id = ARGV[14], order = cseq, node = ARGV[15], inflight = 0, deadline = dl}
    conns[#conns + 1] = c
  end
  saveConn(c)
  idle = 0
  value = created .. '\n' .. def
elseif op == 'unbind' then
  changed = unbind(ARGV[13])
elseif op == 'append' then
  for a = 13, #ARGV do
    local p = split(ARGV[a])
    local pos = p[2]
    if p[1] == 'g' then pos = p[3] end
    if pos ~= '' and posAfter(pos, tail) then
      tail = pos
      if p[1] == 'g' then
        local merged = false
        for j = #ents, 1, -1 do
          local prev = ents[j]
          if prev then
            if prev.kind == 'g' and prev.reason == p[5] then
              prev.last_ = p[3]
              prev.lost = addLost(prev.lost, tonumber(p[4]))
              encodeMarker(prev)
              merged = true
            end
            break
          end
        end
        if not merged then
          local m = {id = tostring(seq), kind = 'g', first = p[2], last_ = p[3], lost = tonumber(p[4]), reason = p[5], lease = '', tried = {}}
          seq = seq + 1
          ents[#ents + 1] = m
          redis.call('ZADD', Q, m.id, m.id)
          encodeMarker(m)
        end
      else
        local e = {id = tostring(seq), kind = 'm', pos = pos, size = tonumber(p[3]), raw = ARGV[a], lease = '', deadline = 0, attempts = 0, last = '', tried = {}}
        seq = seq + 1
        ents[#ents + 1] = e
        redis.call('ZADD', Q, e.id, e.id)
        redis.call('HSET', E, e.id, e.raw)
        redis.call('HSET', P, pos, e.id)
        items = items + 1
        bytes = bytes + e.size
        while items > maxItems or bytes > maxBytes do
          local shed = false
          for i = 1, #ents do
            local x = ents[i]
            if x and x.kind == 'm' and x.lease == '' then
              removeAt(i)
              markAt(i, x.id, x.pos, 'queue_full')
              out.dropped = out.dropped + 1
              shed = true
              break
            end
          end
          if not shed then break end
        end
      end
    end
  end
elseif op == 'ack' then
  local id, pos = ARGV[13], ARGV[14]
  local eid = redis.call('HGET', P, pos)
  local at = nil
  if eid then
    for i = 1, #ents do if ents[i] and ents[i].id == eid then at = i end end
  end
  changed = false
  if not at then
    if id ~= '' and redis.call('HGET', K, pos) == id then value = '2' else value = '3' end
  else
    local e = ents[at]
    if not single or not (e.lease == id or (e.lease == '' and e.last == id)) then
      value = '3'
    else
      removeAt(at)
      redis.call('LPUSH', R, pos)
      redis.call('HSET', K, pos, id)
      if redis.call('LLEN', R) > settledMemory then
        redis.call('HDEL', K, redis.call('RPOP', R))
      end
      out.acked = 1
      value = '1'
      changed = true
    end
  end
elseif op == 'expire' then
  if #conns == 0 and now >= idle + idleTTL then
    forget()
    return {'ok', '', '', '', '0', '0', '0', '0', '0', '0', '1', '0'}
  end
  changed = false
  local i = 1
  while i <= #conns do
    if now < tonumber(conns[i].deadline) then
      i = i + 1
    else
      unbind(conns[i].id)
      changed = true
    end
  end
  if leased > 0 then
    for j = 1, #ents do
      local e = ents[j]
      if e and e.lease ~= '' and now >= e.deadline then
        release(j)
        changed = true
      end
    end
  end
end
if changed then dispatch() end

redis.call('HSET', S, 'def', def, 'start', start, 'tail', tail, 'seq', seq, 'items', items, 'bytes', bytes,
  'leased', leased, 'idle', idle, 'cseq', cseq)
keep()

local res = {status, value, start, tail, tostring(out.delivered), tostring(out.acked), tostring(out.retried),
  tostring(out.parked), tostring(out.dropped), tostring(items), '0', tostring(#order)}
for _, c in ipairs(order) do
  local d = deliveries[c.id]
  res[#res + 1] = c.id
  res[#res + 1] = c.node
  res[#res + 1] = tostring(#d / 2)
  for _, x in ipairs(d) do res[#res + 1] = x end
end
return res
`
