package channel

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// History is a Broker that also keeps each channel's last publications, so that a subscriber
// coming back with the position it last received is handed what it missed rather than told it
// is lost. MemoryBroker keeps them in this process; store/redis.Broker in a Redis stream per
// channel, shared by the nodes. A hub whose broker is a History publishes through Append and
// resumes through Since; store/storetest.RunChannelHistory is the contract both pass.
//
// A channel's history is bounded by HistoryConfig: by publications, by bytes and by age. It
// is always a run of consecutive offsets ending at the channel's head, or empty: what falls out
// of it falls out from the oldest end. A stream whose history is not empty is kept, epoch
// included, after Forget, until the history expires by age; so a client that resumes within
// HistoryConfig.TTL finds its epoch even when nobody held the channel meanwhile.
type History interface {
	Broker
	// Append takes the next position of channel, exactly as Next does, and keeps the
	// publication in the channel's history in the same step, so the history's order is
	// offset order. It returns the publication's item, at its position, for the hub to hand
	// to subscribers: a history kept in memory keeps this very item, so a replay shares the
	// encodings its live delivery made.
	Append(channel, event string, data json.RawMessage) (*stream.Item, error)
	// Since returns the channel's head, exactly as Head does, and the items of the
	// publications its history holds after after, oldest first: those past after's offset
	// when after is in the head's epoch, and the whole history otherwise. Every item returned
	// is a message of the head's epoch.
	Since(channel string, after stream.Position) (head stream.Position, items []*stream.Item, err error)
}

// HistoryConfig bounds each channel's history. The zero value is the default; a negative Size
// keeps no history at all.
type HistoryConfig struct {
	// Size is the most publications one channel's history holds. 0: DefaultHistorySize.
	// Negative: no history; a resume is told what it missed with a resync, never replayed.
	Size int
	// Bytes is the most bytes one channel's history holds, counting for each publication its
	// data, its event name and HistoryOverhead. A publication larger than this is not kept.
	// 0: DefaultHistoryBytes.
	Bytes int
	// TTL is how long a publication stays in its channel's history. 0: DefaultHistoryTTL.
	TTL time.Duration
}

// Defaults for the zero value of HistoryConfig's fields. A client that reconnects after a
// network blip, a page reload or a deploy comes back within seconds to a minute or two; what
// it missed of a busy channel is bounded by the count and the bytes. So the history of one
// channel takes at most 64 KiB (plus, in memory, the encodings its deliveries made), and only
// the channels published to in the last two minutes keep one: a node's memory for history is
// at most its publication rate times two minutes, and at most 64 KiB per such channel.
const (
	DefaultHistorySize  = 100
	DefaultHistoryBytes = 64 << 10
	DefaultHistoryTTL   = 2 * time.Minute
)

// HistoryOverhead is what a publication costs in a history besides its data and event name:
// its item, message and position text, roughly.
const HistoryOverhead = 256

// On reports whether the config keeps any history.
func (c HistoryConfig) On() bool { return c.Size >= 0 }

// WithDefaults returns c with its zero fields set to their defaults.
func (c HistoryConfig) WithDefaults() HistoryConfig {
	if c.Size == 0 {
		c.Size = DefaultHistorySize
	}
	if c.Bytes <= 0 {
		c.Bytes = DefaultHistoryBytes
	}
	if c.TTL <= 0 {
		c.TTL = DefaultHistoryTTL
	}
	return c
}

// Validate refuses bounds that are set and not positive (a negative Size is the way to say
// "none").
func (c HistoryConfig) Validate() error {
	switch {
	case c.Bytes < 0:
		return fmt.Errorf("channel history: bytes is %d, want 0 (the default, %d) or more", c.Bytes, DefaultHistoryBytes)
	case c.TTL < 0:
		return fmt.Errorf("channel history: ttl is %s, want 0 (the default, %s) or more", c.TTL, DefaultHistoryTTL)
	}
	return nil
}

// historyCost is what a publication counts against HistoryConfig.Bytes.
func historyCost(event string, data []byte) int { return len(event) + len(data) + HistoryOverhead }

// memoryHistory is one channel's history in a MemoryBroker: a FIFO of items, oldest first,
// with the time each was kept. Guarded by MemoryBroker.mu.
type memoryHistory struct {
	items []histEntry // live entries are items[first:]
	first int
	bytes int // the cost of the live entries
}

type histEntry struct {
	it   *stream.Item
	at   time.Duration // when it was kept, on the broker's monotonic clock
	cost int
}

func (mh *memoryHistory) len() int { return len(mh.items) - mh.first }

// push keeps it, then trims the history to cfg's bounds as of now.
func (mh *memoryHistory) push(it *stream.Item, cost int, now time.Duration, cfg *HistoryConfig) {
	mh.items = append(mh.items, histEntry{it: it, at: now, cost: cost})
	mh.bytes += cost
	mh.trim(now, cfg)
}

// trim drops from the oldest end what is past any bound: the count, the bytes, or the age.
// Each entry is dropped once, so trimming costs O(1) per publication, amortized.
func (mh *memoryHistory) trim(now time.Duration, cfg *HistoryConfig) {
	for mh.len() > 0 {
		e := &mh.items[mh.first]
		if mh.len() <= cfg.Size && mh.bytes <= cfg.Bytes && now-e.at < cfg.TTL {
			break
		}
		mh.bytes -= e.cost
		*e = histEntry{} // let go of the item
		mh.first++
	}
	switch {
	case mh.len() == 0:
		mh.items, mh.first = mh.items[:0], 0
		if cap(mh.items) > 64 {
			mh.items = nil
		}
	case mh.first >= 32 && mh.first*2 >= len(mh.items):
		// Move the live entries to the front once the dropped ones are half the slice, so
		// the slice stays within twice the history's length.
		n := copy(mh.items, mh.items[mh.first:])
		clear(mh.items[n:])
		mh.items, mh.first = mh.items[:n], 0
	}
}

// since returns the items after offset after (all of them when all is set) that are younger
// than the TTL as of now.
func (mh *memoryHistory) since(after uint64, all bool, now time.Duration, cfg *HistoryConfig) []*stream.Item {
	live := mh.items[mh.first:]
	var out []*stream.Item
	for i := range live {
		e := &live[i]
		if now-e.at >= cfg.TTL || !all && e.it.Message.Pos.Offset <= after {
			continue
		}
		if out == nil {
			out = make([]*stream.Item, 0, len(live)-i)
		}
		out = append(out, e.it)
	}
	return out
}

// newest returns when the newest entry was kept, and false when there is none.
func (mh *memoryHistory) newest() (time.Duration, bool) {
	if mh.len() == 0 {
		return 0, false
	}
	return mh.items[len(mh.items)-1].at, true
}

func (mh *memoryHistory) reset() {
	clear(mh.items)
	*mh = memoryHistory{}
}
