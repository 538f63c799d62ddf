package channel

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"time"

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
	// Forget says this node no longer holds the channel. A broker serving this node alone
	// ends the channel's stream, so its next Next or Head starts a new epoch; a History keeps
	// it while its history lives, and a broker shared by nodes while another holds it.
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
	// History bounds each channel's history (see History). The zero value is the default; a
	// negative History.Size keeps none.
	History HistoryConfig
}

// MemoryBroker keeps channel positions, and their histories, in this process: one node's
// streams. A stream lives while the hub holds its channel, and after Forget while its history
// holds a publication younger than History.TTL; a stream past that is dropped when it is next
// asked for, and its memory reclaimed by the broker's next Append or Forget at most a TTL
// later (the broker has no goroutine: a node that stops publishing keeps what it had until
// then).
type MemoryBroker struct {
	newEpoch  func() string
	maxOffset uint64
	history   HistoryConfig // defaults applied; Size < 0: none
	start     time.Time     // the origin of the broker's monotonic clock

	mu      sync.Mutex
	streams map[string]*memoryStream // guarded by mu
	// idle are the streams Forget left without a holder while their history lived, at most
	// one entry each, in the order they were queued, each due History.TTL after: a stream
	// still idle and whose history has expired by then is dropped, one still idle and live is
	// queued again. Due times only grow along the queue. Guarded by mu; live entries are
	// idle[idleFirst:].
	idle      []idleStream
	idleFirst int
}

type memoryStream struct {
	epoch  string
	offset uint64 // of the last publication; 0 before the first
	hist   memoryHistory
	// idle: Forget left the stream without a holder while its history lived, and nothing
	// used it since. queued: it has an entry in MemoryBroker.idle.
	idle, queued bool
}

// idleStream is an entry of MemoryBroker.idle: the stream st of name, to look at at due.
type idleStream struct {
	name string
	st   *memoryStream
	due  time.Duration
}

var (
	_ Broker  = (*MemoryBroker)(nil)
	_ History = (*MemoryBroker)(nil)
)

// NewMemoryBroker returns an empty broker.
func NewMemoryBroker(cfg MemoryBrokerConfig) *MemoryBroker {
	b := &MemoryBroker{newEpoch: cfg.NewEpoch, maxOffset: cfg.MaxOffset, history: cfg.History.WithDefaults(),
		start: time.Now(), streams: map[string]*memoryStream{}}
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

// now is the broker's clock: monotonic, from its start.
func (b *MemoryBroker) now() time.Duration { return time.Since(b.start) }

// streamLocked returns channel's stream, starting one with a new epoch when there is none, or
// when Forget left it idle and its history has expired since. A stream that was idle is in use
// again.
func (b *MemoryBroker) streamLocked(channel string, now time.Duration) *memoryStream {
	st := b.streams[channel]
	if st != nil && st.idle {
		if !b.liveLocked(st, now) {
			st = nil // its entry in idle finds another stream, or none, and goes
		} else {
			st.idle = false
		}
	}
	if st == nil {
		st = &memoryStream{epoch: b.newEpoch()}
		b.streams[channel] = st
	}
	return st
}

// liveLocked reports whether st's history holds a publication younger than the TTL.
func (b *MemoryBroker) liveLocked(st *memoryStream, now time.Duration) bool {
	at, ok := st.hist.newest()
	return ok && now-at < b.history.TTL
}

// nextLocked takes st's next position.
func (b *MemoryBroker) nextLocked(st *memoryStream) stream.Position {
	if st.offset >= b.maxOffset {
		// Offsets must stay exact in a JavaScript number, so the stream starts again. A
		// subscriber sees the epoch change; nothing was lost. The history is of the old epoch.
		st.epoch, st.offset = b.newEpoch(), 0
		st.hist.reset()
	}
	st.offset++
	return stream.ChannelPosition(st.epoch, st.offset)
}

// Next returns the position of the next publication to channel. It keeps nothing in the
// channel's history, and empties it, so that the history stays a run of consecutive offsets:
// a hub publishes through Append.
func (b *MemoryBroker) Next(channel string) (stream.Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.streamLocked(channel, b.now())
	st.hist.reset()
	return b.nextLocked(st), nil
}

// Append takes the next position of channel and keeps the publication in its history.
func (b *MemoryBroker) Append(channel, event string, data json.RawMessage) (*stream.Item, error) {
	m := &stream.Message{Channel: channel, Event: event, Data: data}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.history.On() {
		m.Pos = b.nextLocked(b.streamLocked(channel, 0))
		return stream.NewMessage(m), nil
	}
	now := b.now()
	st := b.streamLocked(channel, now)
	m.Pos = b.nextLocked(st)
	it := stream.NewMessage(m)
	st.hist.push(it, historyCost(event, data), now, &b.history)
	if b.idleFirst < len(b.idle) {
		b.sweepLocked(now)
	}
	return it, nil
}

// Since returns channel's head and what its history holds after after.
func (b *MemoryBroker) Since(channel string, after stream.Position) (stream.Position, []*stream.Item, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	st := b.streamLocked(channel, now)
	head := stream.ChannelPosition(st.epoch, st.offset)
	if !b.history.On() {
		return head, nil, nil
	}
	return head, st.hist.since(after.Offset, after.Epoch != st.epoch, now, &b.history), nil
}

// Head returns channel's position now.
func (b *MemoryBroker) Head(channel string) (stream.Position, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.streamLocked(channel, b.now())
	return stream.ChannelPosition(st.epoch, st.offset), nil
}

// Forget ends channel's stream, or, while its history holds a publication younger than the
// TTL, leaves it idle until then: a Next, Head, Append or Since before that finds the same
// epoch.
func (b *MemoryBroker) Forget(channel string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.sweepLocked(now)
	st := b.streams[channel]
	if st == nil {
		return
	}
	if !b.history.On() || !b.liveLocked(st, now) {
		delete(b.streams, channel)
		return
	}
	st.idle = true
	if !st.queued {
		st.queued = true
		b.idle = append(b.idle, idleStream{name: channel, st: st, due: now + b.history.TTL})
	}
}

// sweepLocked looks at the idle streams due by now: one still idle whose history has expired
// is dropped, one still idle and live (published to since, with nobody holding it) is queued
// again a TTL from now, and one in use again leaves the queue. A stream has one entry at a
// time, looked at once a TTL at most, so the queue is bounded by the streams and costs O(1) per
// Forget, amortized; an idle stream's memory is given back at most a TTL after its history
// expired.
func (b *MemoryBroker) sweepLocked(now time.Duration) {
	for b.idleFirst < len(b.idle) {
		e := b.idle[b.idleFirst]
		if e.due > now {
			break
		}
		b.idle[b.idleFirst] = idleStream{}
		b.idleFirst++
		st := e.st
		switch {
		case b.streams[e.name] != st:
			// Dropped since, and perhaps started again: the new stream has its own entry.
		case !st.idle:
			st.queued = false
		case !b.liveLocked(st, now):
			delete(b.streams, e.name)
		default:
			b.idle = append(b.idle, idleStream{name: e.name, st: st, due: now + b.history.TTL})
		}
	}
	switch {
	case b.idleFirst == len(b.idle):
		b.idle, b.idleFirst = b.idle[:0], 0
	case b.idleFirst >= 32 && b.idleFirst*2 >= len(b.idle):
		n := copy(b.idle, b.idle[b.idleFirst:])
		clear(b.idle[n:])
		b.idle, b.idleFirst = b.idle[:n], 0
	}
}
