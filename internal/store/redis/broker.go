package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
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

	next, head, forget *rueidis.Lua
}

var _ channel.Broker = (*Broker)(nil)

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
	return &Broker{
		c: c, node: cfg.Node, maxOffset: cfg.MaxOffset, idleTTL: cfg.IdleTTL, newEpoch: cfg.NewEpoch, log: cfg.Logger,
		next:   rueidis.NewLuaScript(brokerPrelude + nextScript),
		head:   rueidis.NewLuaScript(brokerPrelude + headScript),
		forget: rueidis.NewLuaScript(forgetScript),
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

// KEYS: the stream hash, the holders set. ARGV: a fresh epoch, max offset, node, idle TTL (ms).
// stream(roll) returns the current epoch and offset, starting an epoch when there is none or,
// for Next (roll), when the offset reached max (offsets must stay exact in a JavaScript number), and records the node
// as a holder.
const brokerPrelude = `
local C, H = KEYS[1], KEYS[2]
local fresh, max, node, idle = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local function stream(roll)
  local st = redis.call('HMGET', C, 'e', 'o')
  local e, o = st[1], tonumber(st[2] or '0')
  if not e or (roll and o >= max) then
    e, o = fresh, 0
    redis.call('HSET', C, 'e', e, 'o', 0)
  end
  redis.call('SADD', H, node)
  redis.call('PEXPIRE', C, idle)
  redis.call('PEXPIRE', H, idle)
  return e, o
end
`

const nextScript = `
local e = stream(true)
return {e, redis.call('HINCRBY', C, 'o', 1)}
`

const headScript = `
local e, o = stream(false)
return {e, o}
`

// KEYS: the stream hash, the holders set. ARGV: node. The stream ends when its last holder
// forgets it.
const forgetScript = `
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('SCARD', KEYS[2]) == 0 then redis.call('DEL', KEYS[1]) end
return 0
`

func (b *Broker) keys(ch string) []string {
	tag := channelTag(ch)
	return []string{b.c.key("c", tag), b.c.key("h", tag)}
}

func (b *Broker) position(lua *rueidis.Lua, op, ch string) (stream.Position, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.c.timeout)
	defer cancel()
	args := []string{b.newEpoch(), strconv.FormatUint(b.maxOffset, 10), b.node, strconv.FormatInt(b.idleTTL.Milliseconds(), 10)}
	vals, err := lua.Exec(ctx, b.c.rc, b.keys(ch), args).ToArray()
	if err != nil {
		return stream.Position{}, fmt.Errorf("channel %s: %s: %w", op, ch, err)
	}
	if len(vals) != 2 {
		return stream.Position{}, fmt.Errorf("channel %s: %s: %d values, want 2", op, ch, len(vals))
	}
	epoch, err1 := vals[0].ToString()
	offset, err2 := vals[1].AsInt64()
	if err := errors.Join(err1, err2); err != nil {
		return stream.Position{}, fmt.Errorf("channel %s: %s: %w", op, ch, err)
	}
	if !stream.ValidEpoch(epoch) || offset < 0 {
		return stream.Position{}, fmt.Errorf("channel %s: %s: stored position %q:%d is not valid", op, ch, epoch, offset)
	}
	return stream.ChannelPosition(epoch, uint64(offset)), nil
}

// Next returns the position of the next publication to ch.
func (b *Broker) Next(ch string) (stream.Position, error) { return b.position(b.next, "next", ch) }

// Head returns ch's position now.
func (b *Broker) Head(ch string) (stream.Position, error) { return b.position(b.head, "head", ch) }

// Forget says this node no longer holds ch; the stream ends when no node does. A failure is
// logged: the stream then stays until its IdleTTL, which is harmless.
func (b *Broker) Forget(ch string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.c.timeout)
	defer cancel()
	if err := b.forget.Exec(ctx, b.c.rc, b.keys(ch), []string{b.node}).Error(); err != nil {
		b.log.Warn("channel forget", slog.String("channel", ch), slog.Any("err", err))
	}
}
