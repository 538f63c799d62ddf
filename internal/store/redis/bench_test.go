package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/store/storetest"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/testenv"
)

// BenchmarkInterest measures round trips to the private Redis: one per Watched, one per Add and
// one per Remove. Figures depend on the machine and its load; compare them within one run.
func BenchmarkInterest(b *testing.B) {
	c := dialB(b, testenv.RedisURL(b))
	s, err := NewInterest(c, interest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	storetest.BenchInterest(b, s)
}

// BenchmarkPresence measures round trips to the private Redis: a heartbeat (Touch), a read of a
// channel of 64 members (Members), and a sweep of it, as its leader (claim, expiry, roster of
// 64 written) and as a follower (claim, roster read). Compare figures within one run.
func BenchmarkPresence(b *testing.B) {
	ctx := context.Background()
	s := NewPresence(dialB(b, testenv.RedisURL(b)))
	now := time.Now()
	for i := range 64 {
		if _, err := s.Track(ctx, "room", presence.Member{ID: fmt.Sprint(i), Meta: []byte(`{"n":1}`)}, now, time.Hour, 64); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Touch", func(b *testing.B) {
		for b.Loop() {
			if ok, err := s.Touch(ctx, "room", "7", now, time.Hour); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Members64", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Members(ctx, "room", now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SweepLeader64", func(b *testing.B) {
		for b.Loop() {
			if l, err := s.Sweep(ctx, "room", "n1", now, time.Hour); err != nil || !l.Leads || len(l.Roster) != 64 {
				b.Fatal(l, err)
			}
		}
	})
	b.Run("SweepFollower64", func(b *testing.B) {
		for b.Loop() {
			if l, err := s.Sweep(ctx, "room", "n2", now, time.Hour); err != nil || l.Leads || len(l.Roster) != 64 {
				b.Fatal(l, err)
			}
		}
	})
}

// countReceiver counts what a benchmark's Transport receives.
type countReceiver struct {
	payloads, gaps atomic.Uint64
	arrived        chan struct{} // capacity 1: a nudge for each arrival
}

func (r *countReceiver) Receive(string, []byte) {
	r.payloads.Add(1)
	select {
	case r.arrived <- struct{}{}:
	default:
	}
}

func (r *countReceiver) Gap(string, GapReason) { r.gaps.Add(1) }

// BenchmarkTransport measures payloads from one Transport to another through the private
// Redis, Send to Receive: payloads/s, and the Redis commands and round trips per payload of
// both transports together (the sender's appends, the reader's reads and renewals). At most
// window payloads are in flight, so no queue overflows. Compare figures within one run.
func BenchmarkTransport(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			c := dialB(b, testenv.RedisURL(b))
			from, err := NewTransport(c, TransportConfig{Node: "from"})
			if err != nil {
				b.Fatal(err)
			}
			to, err := NewTransport(c, TransportConfig{Node: "to"})
			if err != nil {
				b.Fatal(err)
			}
			recv := &countReceiver{arrived: make(chan struct{}, 1)}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for _, tr := range []*Transport{from, to} {
				wg.Go(func() { _ = tr.Run(ctx, recv) })
			}
			defer func() {
				cancel()
				wg.Wait()
			}()
			waitStream(b, to)

			const window = 4096
			wait := func(n uint64) {
				for recv.payloads.Load() < n {
					select {
					case <-recv.arrived:
					case <-time.After(10 * time.Second):
						b.Fatalf("%d payloads of %d arrived; none for 10s", recv.payloads.Load(), n)
					}
				}
			}
			data := make([]byte, size)
			b.SetBytes(int64(size))
			before := from.Stats()
			beforeTo := to.Stats()
			b.ResetTimer()
			start := time.Now()
			for i := range uint64(b.N) {
				if i >= window {
					wait(i - window + 1)
				}
				from.Send("to", data)
			}
			wait(uint64(b.N))
			elapsed := time.Since(start)
			b.StopTimer()
			st, stTo := from.Stats(), to.Stats()
			if st.DroppedQueueFull+st.DroppedNoStream != 0 || recv.gaps.Load() != 0 {
				b.Fatalf("payloads dropped (%+v) or gaps (%d): the figures would not measure delivery", st, recv.gaps.Load())
			}
			cmds := st.Commands - before.Commands + stTo.Commands - beforeTo.Commands
			trips := st.RoundTrips - before.RoundTrips + stTo.RoundTrips - beforeTo.RoundTrips
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "payloads/s")
			b.ReportMetric(float64(cmds)/float64(b.N), "cmds/payload")
			b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/payload")
		})
	}
}

// BenchmarkHistory measures the tables' history on the private Redis: an append of one
// transaction touching 1 and 4 tables (one pipeline), steady state with trimming by bytes, and
// a read of 100 entries. Compare figures within one run.
func BenchmarkHistory(b *testing.B) {
	ctx := context.Background()
	data := []byte(`{"e":[{"i":1,"table":"public.items","op":"insert","after":[{"name":"id","value":1},{"name":"title","value":"a title of some length"}],"lsn":"0/1"}]}`)
	h, err := NewHistory(dialB(b, testenv.RedisURL(b)), history.Config{MaxBytes: 1000 * (len(data) + history.EntryOverhead)})
	if err != nil {
		b.Fatal(err)
	}
	var lsn atomic.Uint64
	for _, tables := range []int{1, 4} {
		b.Run(fmt.Sprintf("Append%d", tables), func(b *testing.B) {
			entries := make([]history.Entry, tables)
			for b.Loop() {
				l := change.LSN(lsn.Add(1))
				for i := range entries {
					entries[i] = history.Entry{Table: fmt.Sprintf("public.t%d", i), LSN: l, Prev: l - 1, Data: data}
				}
				if err := h.Append(ctx, entries); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Read100", func(b *testing.B) {
		last := change.LSN(lsn.Load())
		if last < 101 {
			b.Skip("too few entries appended")
		}
		for b.Loop() {
			r, err := h.Read(ctx, "public.t0", last-100, last, history.Limit{Entries: 1000, Bytes: 1 << 20})
			if err != nil || len(r.Entries) != 100 {
				b.Fatal(len(r.Entries), err)
			}
		}
	})
}

// BenchmarkBroker measures a publication's round trip to the private Redis: Next (an offset
// only), Append with the history off, and Append keeping it (its bound by count reached, so
// each append also trims one), side by side in one run; and Since reading a full history of
// 100 after a position 50 back.
func BenchmarkBroker(b *testing.B) {
	data := []byte(`{"user":"alice","text":"the quick brown fox jumps over the lazy dog","ts":1700000000000}`)
	for _, bc := range []struct {
		name string
		hist channel.HistoryConfig
		op   func(*Broker) error
	}{
		{"Next", channel.HistoryConfig{Size: -1}, func(br *Broker) error { _, err := br.Next("room"); return err }},
		{"Append/history=off", channel.HistoryConfig{Size: -1}, func(br *Broker) error { _, err := br.Append("room", "chat", data); return err }},
		{"Append/history=on", channel.HistoryConfig{}, func(br *Broker) error { _, err := br.Append("room", "chat", data); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			br, err := NewBroker(dialB(b, testenv.RedisURL(b)), BrokerConfig{Node: "n", History: bc.hist})
			if err != nil {
				b.Fatal(err)
			}
			for range 200 {
				if err := bc.op(br); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := bc.op(br); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Since/50", func(b *testing.B) {
		br, err := NewBroker(dialB(b, testenv.RedisURL(b)), BrokerConfig{Node: "n"})
		if err != nil {
			b.Fatal(err)
		}
		var it *stream.Item
		for range 200 {
			if it, err = br.Append("room", "chat", data); err != nil {
				b.Fatal(err)
			}
		}
		from := stream.ChannelPosition(it.Message.Pos.Epoch, it.Message.Pos.Offset-50)
		b.ReportAllocs()
		for b.Loop() {
			if _, items, err := br.Since("room", from); err != nil || len(items) != 50 {
				b.Fatal(len(items), err)
			}
		}
	})
}
