package redis

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/heraldrt/herald/internal/ratelog"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/stream"
)

// BrokerConfig configures a Broker. Node is required; the zero value of every other field is
// its default.
type BrokerConfig struct {
	// Node is this node's id: the broker records which nodes hold a channel, so one node's
	// Forget does not end a stream another still serves. Required.
	Node string
	// MaxOffset is the largest offset handed out before a new epoch. Default
	// stream.MaxSafeOffset; tests lower it.
	MaxOffset uint64
	// IdleTTL is how long a channel's stream outlives its last Next or Head. Past it the next
	// publication starts a new epoch, which its subscribers are told of (a resume across epochs
	// is a stream_reset): it collects the streams of nodes that died holding them. Default 7
	// days.
	IdleTTL time.Duration
	// History bounds each channel's history, a Redis stream beside its position (see
	// channel.History). The zero value is the default; a negative History.Size keeps none.
	History channel.HistoryConfig
	// NewEpoch returns a new epoch, as channel.MemoryBrokerConfig.NewEpoch. Default 16 random
	// hexadecimal digits.
	NewEpoch func() string
	// Logger receives what Forget cannot return. Default slog.Default().
	Logger *slog.Logger
}

// DefaultIdleTTL is BrokerConfig.IdleTTL's default.
const DefaultIdleTTL = 7 * 24 * time.Hour

// Broker keeps channel positions in Redis: one stream per channel, whichever node publishes.
// Each call is one script on the channel's slot; the hub's per-channel lock orders one node's
// calls, and the script's atomicity orders every node's.
type Broker struct {
	c         *Client // read-only
	node      string
	maxOffset uint64
	idleTTL   time.Duration
	newEpoch  func() string
	log       *slog.Logger
	warn      *ratelog.Limiter      // a Forget that fails repeats per channel while Redis is down
	history   channel.HistoryConfig // defaults applied; Size < 0: none

	next, head, append_, since, forget *rueidis.Lua
}

var (
	_ channel.Broker  = (*Broker)(nil)
	_ channel.History = (*Broker)(nil)
)

// NewBroker returns the broker on c.
func NewBroker(c *Client, cfg BrokerConfig) (*Broker, error) {
	if cfg.Node == "" {
		return nil, errors.New("redis broker: no node id")
	}
	if cfg.MaxOffset == 0 || cfg.MaxOffset > stream.MaxSafeOffset {
		cfg.MaxOffset = stream.MaxSafeOffset
	}
	if cfg.IdleTTL <= 0 {
		cfg.IdleTTL = DefaultIdleTTL
	}
	if cfg.NewEpoch == nil {
		cfg.NewEpoch = randomEpoch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.History.Validate(); err != nil {
		return nil, fmt.Errorf("redis broker: %w", err)
	}
	hist := cfg.History.WithDefaults()
	// Redis counts a TTL in milliseconds, and PEXPIRE 0 deletes at once.
	hist.TTL = max(hist.TTL, time.Millisecond)
	return &Broker{
		c: c, node: cfg.Node, maxOffset: cfg.MaxOffset, idleTTL: cfg.IdleTTL, newEpoch: cfg.NewEpoch, log: cfg.Logger, warn: ratelog.New(cfg.Logger, ratelog.Config{}),
		history: hist,
		next:    rueidis.NewLuaScript(brokerPrelude + nextScript),
		head:    rueidis.NewLuaScript(brokerPrelude + headScript),
		append_: rueidis.NewLuaScript(brokerPrelude + appendScript),
		since:   rueidis.NewLuaScript(brokerPrelude + sinceScript),
		forget:  rueidis.NewLuaScript(forgetScript),
	}, nil
}

func randomEpoch() string {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

// KEYS: the stream hash, the holders set, the history. ARGV: a fresh epoch, max offset, node,
// idle TTL (ms). stream(roll) returns the current epoch and offset, starting an epoch when
// there is none or, for Next and Append (roll), when the offset reached max (offsets must stay
// exact in a JavaScript number), and records the node as a holder. A new epoch empties the
// history, which is of the old one, and zeroes its byte count (b).
const brokerPrelude = `
local C, H, E = KEYS[1], KEYS[2], KEYS[3]
local fresh, max, node, idle = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local function stream(roll)
  local st = redis.call('HMGET', C, 'e', 'o')
  local e, o = st[1], tonumber(st[2] or '0')
  if not e or (roll and o >= max) then
    e, o = fresh, 0
    redis.call('HSET', C, 'e', e, 'o', 0, 'b', 0)
    redis.call('DEL', E)
  end
  redis.call('SADD', H, node)
  redis.call('PEXPIRE', C, idle)
  redis.call('PEXPIRE', H, idle)
  return e, o
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// Next keeps nothing in the history, and empties it, so that the history stays a run of
// consecutive offsets: a hub publishes through Append.
const nextScript = `
local e = stream(true)
redis.call('DEL', E)
redis.call('HSET', C, 'b', 0)
return {e, redis.call('HINCRBY', C, 'o', 1)}
`

const headScript = `
local e, o = stream(false)
return {e, o}
`

// ARGV after the prelude's: history size (negative: none), bytes, TTL (ms), the entry's fixed
// cost, event, data. The history is a stream whose entry ids are <offset>-0, each with its time
// (t, ms, Redis's clock), its cost (c), event (v) and data (d); the hash keeps the costs'
// sum (b). After the append it is trimmed from the oldest end, exactly, by count, bytes and
// age: each entry is read and dropped once, and at most one more is read to find where to stop
// (at first; sixteen at a time past it), so trimming is O(1) per append, amortized. The
// whole stream expires a TTL after its last append, when every entry in it has.
const appendScript = `
local e = stream(true)
local o = redis.call('HINCRBY', C, 'o', 1)
local size, bytes, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if size < 0 then return {e, o} end
local ev, d = ARGV[9], ARGV[10]
local cost = tonumber(ARGV[8]) + #ev + #d
local now = now_ms()
local n = redis.call('XLEN', E)
local b = 0
if n > 0 then b = tonumber(redis.call('HGET', C, 'b') or '0') end
redis.call('XADD', E, string.format('%.0f-0', o), 't', string.format('%.0f', now), 'c', cost, 'v', ev, 'd', d)
n, b = n + 1, b + cost
local cursor, last, done = '-', nil, false
local want = math.max(n - size, 0) + 1 -- those over the count, and one to look at
while not done and n > 0 do
  local batch = redis.call('XRANGE', E, cursor, '+', 'COUNT', want)
  want = 16
  if #batch == 0 then break end
  for _, ent in ipairs(batch) do
    local f = ent[2]
    if n > size or b > bytes or now - tonumber(f[2]) >= ttl then
      n, b, last = n - 1, b - tonumber(f[4]), ent[1]
    else
      done = true
      break
    end
  end
  cursor = '(' .. batch[#batch][1]
end
if n == 0 then
  redis.call('DEL', E)
  b = 0
else
  if last then redis.call('XTRIM', E, 'MINID', (string.gsub(last, '-0$', '-1'))) end
  redis.call('PEXPIRE', E, ttl)
end
redis.call('HSET', C, 'b', b)
return {e, o}
`

// ARGV after the prelude's: history TTL (ms; 0: none kept), the epoch and offset to read
// after. Returns the epoch, the head's offset, then id, event and data per entry younger than
// the TTL: those after the offset when the epoch is the stream's, all of them otherwise.
const sinceScript = `
local e, o = stream(false)
local ttl = tonumber(ARGV[5])
local out = {e, o}
if ttl <= 0 then return out end
local from = '-'
if e == ARGV[6] then from = '(' .. ARGV[7] .. '-0' end
local now = now_ms()
for _, ent in ipairs(redis.call('XRANGE', E, from, '+')) do
  local f = ent[2]
  if now - tonumber(f[2]) < ttl then
    out[#out + 1] = ent[1]
    out[#out + 1] = f[6]
    out[#out + 1] = f[8]
  end
end
return out
`

// KEYS: the stream hash, the holders set, the history. ARGV: node. The stream ends when its
// last holder forgets it, unless its history holds entries: then it lives exactly as long as
// they may, until the history expires a TTL after its last append.
const forgetScript = `
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('SCARD', KEYS[2]) == 0 then
  local ttl = redis.call('PTTL', KEYS[3])
  if ttl > 0 and redis.call('XLEN', KEYS[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
  else
    redis.call('DEL', KEYS[1], KEYS[3])
  end
end
return 0
`

func (b *Broker) keys(ch string) []string {
	tag := channelTag(ch)
	return []string{b.c.key("c", tag), b.c.key("h", tag), b.c.key("e", tag)}
}

func (b *Broker) args(extra ...string) []string {
	return append([]string{b.newEpoch(), strconv.FormatUint(b.maxOffset, 10), b.node, strconv.FormatInt(b.idleTTL.Milliseconds(), 10)}, extra...)
}

func (b *Broker) exec(lua *rueidis.Lua, op, ch string, args []string) ([]rueidis.RedisMessage, stream.Position, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.c.timeout)
	defer cancel()
	vals, err := lua.Exec(ctx, b.c.rc, b.keys(ch), args).ToArray()
	if err != nil {
		return nil, stream.Position{}, fmt.Errorf("channel %s: %s: %w", op, ch, err)
	}
	if len(vals) < 2 {
		return nil, stream.Position{}, fmt.Errorf("channel %s: %s: %d values, want 2 or more", op, ch, len(vals))
	}
	epoch, err1 := vals[0].ToString()
	offset, err2 := vals[1].AsInt64()
	if err := errors.Join(err1, err2); err != nil {
		return nil, stream.Position{}, fmt.Errorf("channel %s: %s: %w", op, ch, err)
	}
	if !stream.ValidEpoch(epoch) || offset < 0 {
		return nil, stream.Position{}, fmt.Errorf("channel %s: %s: stored position %q:%d is not valid", op, ch, epoch, offset)
	}
	return vals[2:], stream.ChannelPosition(epoch, uint64(offset)), nil
}

func (b *Broker) position(lua *rueidis.Lua, op, ch string) (stream.Position, error) {
	_, p, err := b.exec(lua, op, ch, b.args())
	return p, err
}

// Next returns the position of the next publication to ch. It keeps nothing in ch's history,
// and empties it: a hub publishes through Append.
func (b *Broker) Next(ch string) (stream.Position, error) { return b.position(b.next, "next", ch) }

// Head returns ch's position now.
func (b *Broker) Head(ch string) (stream.Position, error) { return b.position(b.head, "head", ch) }

// Append takes the next position of ch and keeps the publication in ch's history, in one
// script.
func (b *Broker) Append(ch, event string, data json.RawMessage) (*stream.Item, error) {
	size := -1
	if b.history.On() {
		size = b.history.Size
	}
	_, p, err := b.exec(b.append_, "append", ch, b.args(strconv.Itoa(size), strconv.Itoa(b.history.Bytes),
		strconv.FormatInt(b.history.TTL.Milliseconds(), 10), strconv.Itoa(channel.HistoryOverhead), event, string(data)))
	if err != nil {
		return nil, err
	}
	return stream.NewMessage(&stream.Message{Pos: p, Channel: ch, Event: event, Data: data}), nil
}

// Since returns ch's head and what its history holds after after.
func (b *Broker) Since(ch string, after stream.Position) (stream.Position, []*stream.Item, error) {
	ttl := "0"
	if b.history.On() {
		ttl = strconv.FormatInt(b.history.TTL.Milliseconds(), 10)
	}
	rest, head, err := b.exec(b.since, "since", ch, b.args(ttl, after.Epoch, strconv.FormatUint(after.Offset, 10)))
	if err != nil {
		return stream.Position{}, nil, err
	}
	if len(rest)%3 != 0 {
		return stream.Position{}, nil, fmt.Errorf("channel since: %s: %d values after the head, want triples", ch, len(rest))
	}
	var items []*stream.Item
	if len(rest) > 0 {
		items = make([]*stream.Item, 0, len(rest)/3)
	}
	for i := 0; i < len(rest); i += 3 {
		id, err1 := rest[i].ToString()
		event, err2 := rest[i+1].ToString()
		data, err3 := rest[i+2].ToString()
		if err := errors.Join(err1, err2, err3); err != nil {
			return stream.Position{}, nil, fmt.Errorf("channel since: %s: %w", ch, err)
		}
		digits, _, _ := strings.Cut(id, "-")
		off, err := strconv.ParseUint(digits, 10, 64)
		if err != nil || off == 0 || off > head.Offset {
			return stream.Position{}, nil, fmt.Errorf("channel since: %s: history entry %q is not an offset up to the head %s", ch, id, head)
		}
		items = append(items, stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition(head.Epoch, off), Channel: ch, Event: event, Data: json.RawMessage(data)}))
	}
	return head, items, nil
}

// Forget says this node no longer holds ch; the stream ends when no node does and its history
// is empty, or when its history expires. A failure is logged: the stream then stays until its
// IdleTTL, which is harmless.
func (b *Broker) Forget(ch string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.c.timeout)
	defer cancel()
	if err := b.forget.Exec(ctx, b.c.rc, b.keys(ch), []string{b.node}).Error(); err != nil {
		b.warn.Warn("forget", "channel forget", slog.String("channel", ch), slog.Any("err", err))
	}
}
