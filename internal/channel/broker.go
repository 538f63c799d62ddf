package channel

import (
	"encoding/hex"
	"math/rand/v2"
	"sync"

	"github.com/heraldrt/herald/internal/stream"
)

// Broker assigns the positions of channels' streams: an epoch per incarnation of a channel's
// stream, and an offset per publication within it. The hub asks it under the channel's lock,
// so it never sees two calls for one channel at once. A broker shared by many nodes (Redis)
// gives them one stream per channel; MemoryBroker serves one node.
type Broker interface {
	// Next returns the position of the next publication to channel: the offset after the
	// last in the current epoch, starting an epoch when the channel has none, or a new one
	// when the offset would pass stream.MaxSafeOffset.
	Next(channel string) (stream.Position, error)
	// Head returns the channel's position now: the last publication's, offset 0 before the
	// first, starting an epoch when the channel has none.
	Head(channel string) (stream.Position, error)
	// Forget ends the channel's stream: its next Next or Head starts a new epoch.
	Forget(channel string)
}

// MemoryBrokerConfig configures a MemoryBroker. The zero value is the default.
type MemoryBrokerConfig struct {
	// NewEpoch returns a new epoch: valid (1 to stream.MaxEpochBytes bytes of A-Z a-z 0-9
	// "._~-"), different from every earlier epoch of the same channel, and safe for concurrent
	// use. Default: 16 random hexadecimal digits.
	NewEpoch func() string
	// MaxOffset is the largest offset handed out before a new epoch. Default
	// stream.MaxSafeOffset; tests lower it.
	MaxOffset uint64
}

// MemoryBroker keeps channel positions in this process: one node's streams.
type MemoryBroker struct {
	newEpoch  func() string
	maxOffset uint64

	mu      sync.Mutex
	streams map[string]*memoryStream // guarded by mu
}

type memoryStream struct {
	epoch  string
	offset uint64 // of the last publication; 0 before the first
}

var _ Broker = (*MemoryBroker)(nil)

// NewMemoryBroker returns an empty broker.
func NewMemoryBroker(cfg MemoryBrokerConfig) *MemoryBroker {
	b := &MemoryBroker{newEpoch: cfg.NewEpoch, maxOffset: cfg.MaxOffset, streams: map[string]*memoryStream{}}
	if b.newEpoch == nil {
		b.newEpoch = randomEpoch
	}
	if b.maxOffset == 0 {
		b.maxOffset = stream.MaxSafeOffset
	}
	return b
}

// randomEpoch returns 16 random hexadecimal digits. An epoch needs to differ from the earlier
// epochs of its channel, not to be secret, so the runtime's generator (seeded from the OS,
// never repeating across processes) is enough: two incarnations of a channel share an epoch
// with probability 2^-64.
func randomEpoch() string {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

func (b *MemoryBroker) streamLocked(channel string) *memoryStream {
	st := b.streams[channel]
	if st == nil {
		st = &memoryStream{epoch: b.newEpoch()}
		b.streams[channel] = st
	}
	return st
}

// Next returns the position of the next publication to channel.
func (b *MemoryBroker) Next(channel string) (stream.Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.streamLocked(channel)
	if st.offset >= b.maxOffset {
		// Offsets must stay exact in a JavaScript number, so the stream starts again. A
		// subscriber sees the epoch change; nothing was lost.
		st.epoch, st.offset = b.newEpoch(), 0
	}
	st.offset++
	return stream.ChannelPosition(st.epoch, st.offset), nil
}

// Head returns channel's position now.
func (b *MemoryBroker) Head(channel string) (stream.Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.streamLocked(channel)
	return stream.ChannelPosition(st.epoch, st.offset), nil
}

// Forget ends channel's stream.
func (b *MemoryBroker) Forget(channel string) {
	b.mu.Lock()
	delete(b.streams, channel)
	b.mu.Unlock()
}
