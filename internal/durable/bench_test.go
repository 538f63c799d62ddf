package durable

import (
	"fmt"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

// BenchmarkSingleAppendAck measures a single subscription's hot path: a publication appended
// and leased to one of the bound connections, then acked, with the queue holding backlog items.
func BenchmarkSingleAppendAck(b *testing.B) {
	for _, backlog := range []int{0, 100, 900} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			q := NewQueue(Def{Channel: "jobs", Mode: Single}, Limits{MaxItems: 1000, MaxBytes: 64 << 20, MaxInFlight: 1 << 20, ConnTTL: time.Hour}, t0)
			now := t0
			off := uint64(0)
			msg := func() Entry {
				off++
				return Entry{Msg: &stream.Message{Pos: stream.ChannelPosition("e", off), Channel: "jobs", Data: []byte(`{"job":1}`)}}
			}
			// The backlog waits: nobody is bound yet.
			for range backlog {
				q.Append([]Entry{msg()}, now)
			}
			for i := range 4 {
				q.Bind(Conn{ID: fmt.Sprintf("c%d", i)}, now)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				e := msg()
				o := q.Append([]Entry{e}, now)
				c := o.Deliveries[0].Conn.ID
				if r, _ := q.Ack(c, e.Msg.Pos, now); r != Acked {
					b.Fatalf("ack: %s", r)
				}
			}
		})
	}
}
