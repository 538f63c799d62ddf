package storetest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/stream"
)

// NewChannelHistory returns a fresh history broker keeping cfg, sharing nothing with the brokers of
// other subtests.
type NewChannelHistory func(t *testing.T, cfg channel.HistoryConfig) channel.History

// historyExpiry is the TTL of the subtests that wait for a history to expire. They sleep past
// it: expiry is the store's clock's business (Redis's own, for a shared broker), so there is
// no clock to inject. The subtests that need a history to live use an hour.
const historyExpiry = 200 * time.Millisecond

// RunChannelHistory runs the channel.History suite: publications appended in offset order and read
// back after any position, the bounds by count, bytes and age, the epoch kept past Forget
// while the history lives, and a history that is off.
func RunChannelHistory(t *testing.T, newHistory NewChannelHistory) {
	live := channel.HistoryConfig{TTL: time.Hour}
	t.Run("append takes positions as next does and keeps them in order", func(t *testing.T) {
		b := newHistory(t, live)
		var want []string
		for i := 1; i <= 5; i++ {
			event := ""
			if i%2 == 0 {
				event = "even"
			}
			data := fmt.Sprintf(`{"n":%d,"s":"a \"quoted\" \u00e9 %s"}`, i, strings.Repeat("x", i))
			it := mustAppend(t, b, "a/b", event, data)
			m := it.Message
			if m.Pos.Offset != uint64(i) || m.Channel != "a/b" || m.Event != event || string(m.Data) != data {
				t.Fatalf("Append #%d = %+v, want offset %d, channel a/b, event %q, data %s", i, m, i, event, data)
			}
			if it.PosText() != m.Pos.String() {
				t.Fatalf("item's position text %q, want %q", it.PosText(), m.Pos)
			}
			want = append(want, describe(it))
		}
		epoch := mustHead(t, b, "a/b").Epoch
		for after := 0; after <= 5; after++ {
			head, items := mustSince(t, b, "a/b", stream.ChannelPosition(epoch, uint64(after)))
			if head != stream.ChannelPosition(epoch, 5) {
				t.Fatalf("Since head = %v, want %s:5", head, epoch)
			}
			if got := describeAll(items); fmt.Sprint(got) != fmt.Sprint(want[after:]) {
				t.Fatalf("Since %d = %q, want %q", after, got, want[after:])
			}
		}
		_, items := mustSince(t, b, "a/b", stream.ChannelPosition("other-epoch", 3))
		if got := describeAll(items); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Since another epoch = %q, want the whole history %q", got, want)
		}
		if p := must(t)(b.Next("x")); p.Offset != 1 {
			t.Fatalf("Next of another channel = %v, want offset 1: channels are independent", p)
		}
	})
	t.Run("since starts an epoch as head does", func(t *testing.T) {
		b := newHistory(t, live)
		head, items := mustSince(t, b, "new", stream.ChannelPosition("e", 4))
		if !stream.ValidEpoch(head.Epoch) || head.Offset != 0 || len(items) != 0 {
			t.Fatalf("Since of a new channel = %v, %q; want a valid epoch at 0 and nothing", head, describeAll(items))
		}
		if p := mustAppend(t, b, "new", "", "1").Message.Pos; p != stream.ChannelPosition(head.Epoch, 1) {
			t.Fatalf("Append after Since = %v, want %s:1", p, head.Epoch)
		}
	})
	t.Run("bounded by count", func(t *testing.T) {
		b := newHistory(t, channel.HistoryConfig{Size: 3, TTL: time.Hour})
		for range 10 {
			mustAppend(t, b, "c", "", "1")
		}
		if got := offsets(t, b, "c"); fmt.Sprint(got) != "[8 9 10]" {
			t.Fatalf("history %v, want the last three", got)
		}
	})
	t.Run("bounded by bytes", func(t *testing.T) {
		// Room for two publications of 100 bytes with their event names, not three.
		b := newHistory(t, channel.HistoryConfig{Bytes: 2*(100+2+channel.HistoryOverhead) + 50, TTL: time.Hour})
		data := `"` + strings.Repeat("x", 98) + `"`
		for range 5 {
			mustAppend(t, b, "c", "ev", data)
		}
		if got := offsets(t, b, "c"); fmt.Sprint(got) != "[4 5]" {
			t.Fatalf("history %v, want the last two", got)
		}
		// One larger than the bound is not kept, and takes the others with it.
		mustAppend(t, b, "c", "", `"`+strings.Repeat("y", 1000)+`"`)
		if got := offsets(t, b, "c"); len(got) != 0 {
			t.Fatalf("history %v, want none", got)
		}
		mustAppend(t, b, "c", "", "1")
		mustAppend(t, b, "c", "", "2")
		if got := offsets(t, b, "c"); fmt.Sprint(got) != "[7 8]" {
			t.Fatalf("history %v after the large one, want 7 and 8", got)
		}
	})
	t.Run("bounded by age", func(t *testing.T) {
		b := newHistory(t, channel.HistoryConfig{TTL: historyExpiry})
		mustAppend(t, b, "c", "", "1")
		mustAppend(t, b, "c", "", "2")
		time.Sleep(3 * historyExpiry)
		if got := offsets(t, b, "c"); len(got) != 0 {
			t.Fatalf("history %v a TTL later, want none", got)
		}
		// b still holds the channel (it never forgot it): the epoch stays.
		if p := mustAppend(t, b, "c", "", "3").Message.Pos; p.Offset != 3 {
			t.Fatalf("Append after the history expired = %v, want offset 3", p)
		}
		if got := offsets(t, b, "c"); fmt.Sprint(got) != "[3]" {
			t.Fatalf("history %v, want 3", got)
		}
	})
	t.Run("forget keeps the stream while its history lives", func(t *testing.T) {
		b := newHistory(t, live)
		it := mustAppend(t, b, "f", "", "1")
		first := it.Message.Pos
		b.Forget("f")
		head, items := mustSince(t, b, "f", stream.ChannelPosition(first.Epoch, 0))
		if head != first || fmt.Sprint(describeAll(items)) != fmt.Sprint([]string{describe(it)}) {
			t.Fatalf("after Forget: Since = %v, %q; want %v and its publication", head, describeAll(items), first)
		}
		b.Forget("f")
		if p := mustAppend(t, b, "f", "", "2").Message.Pos; p != stream.ChannelPosition(first.Epoch, 2) {
			t.Fatalf("Append after Forget = %v, want %s:2", p, first.Epoch)
		}
		// A stream with no history ends at Forget, as without one.
		h := mustHead(t, b, "empty")
		b.Forget("empty")
		if p := mustHead(t, b, "empty"); p.Epoch == h.Epoch {
			t.Fatalf("Head after Forget of a stream with no history = %v, want a new epoch", p)
		}
	})
	t.Run("forget ends the stream once its history expired", func(t *testing.T) {
		b := newHistory(t, channel.HistoryConfig{TTL: historyExpiry})
		first := mustAppend(t, b, "f", "", "1").Message.Pos
		b.Forget("f")
		time.Sleep(3 * historyExpiry)
		if p := mustHead(t, b, "f"); p.Epoch == first.Epoch || p.Offset != 0 {
			t.Fatalf("Head a TTL after Forget = %v, want a new epoch at 0", p)
		}
	})
	t.Run("next leaves no hole: it empties the history", func(t *testing.T) {
		b := newHistory(t, live)
		old := mustAppend(t, b, "r", "", "1").Message.Pos
		b.Forget("never") // harmless
		mustNext(t, b, "r")
		if got := offsets(t, b, "r"); len(got) != 0 {
			t.Fatalf("history %v after Next, want none", got)
		}
		mustAppend(t, b, "r", "", "3")
		if got := offsets(t, b, "r"); fmt.Sprint(got) != "[3]" {
			t.Fatalf("history %v, want 3", got)
		}
		if h := mustHead(t, b, "r"); h.Epoch != old.Epoch {
			t.Fatalf("Head %v, want epoch %s still", h, old.Epoch)
		}
	})
	t.Run("off", func(t *testing.T) {
		b := newHistory(t, channel.HistoryConfig{Size: -1})
		a := mustAppend(t, b, "o", "", "1").Message.Pos
		if p := mustAppend(t, b, "o", "", "2").Message.Pos; p != stream.ChannelPosition(a.Epoch, 2) {
			t.Fatalf("second Append = %v, want %s:2", p, a.Epoch)
		}
		if head, items := mustSince(t, b, "o", stream.ChannelPosition(a.Epoch, 0)); head.Offset != 2 || len(items) != 0 {
			t.Fatalf("Since = %v, %q; want the head at 2 and nothing kept", head, describeAll(items))
		}
		b.Forget("o")
		if h := mustHead(t, b, "o"); h.Epoch == a.Epoch {
			t.Fatalf("Head after Forget = %v, want a new epoch: nothing keeps the stream", h)
		}
	})
	t.Run("concurrent appends are kept in offset order", func(t *testing.T) {
		b := newHistory(t, channel.HistoryConfig{Size: 1000, Bytes: 1 << 20, TTL: time.Hour})
		const workers, each = 8, 25
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if _, err := b.Append("c", "", json.RawMessage(fmt.Sprintf(`"%d/%d"`, w, i))); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := offsets(t, b, "c")
		if len(got) != workers*each || !sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) || got[0] != 1 || got[len(got)-1] != workers*each {
			t.Fatalf("history %v, want 1..%d in order", got, workers*each)
		}
	})
}

func describe(it *stream.Item) string {
	m := it.Message
	return fmt.Sprintf("%s %s %q %s", m.Pos, m.Channel, m.Event, m.Data)
}

func describeAll(items []*stream.Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, describe(it))
	}
	return out
}

// offsets returns the offsets channel's history holds.
func offsets(t *testing.T, b channel.History, ch string) []uint64 {
	t.Helper()
	_, items := mustSince(t, b, ch, stream.Position{})
	var out []uint64
	for _, it := range items {
		out = append(out, it.Message.Pos.Offset)
	}
	return out
}

func mustAppend(t *testing.T, b channel.History, ch, event, data string) *stream.Item {
	t.Helper()
	it, err := b.Append(ch, event, json.RawMessage(data))
	if err != nil {
		t.Fatalf("Append %s: %v", ch, err)
	}
	return it
}

func mustSince(t *testing.T, b channel.History, ch string, after stream.Position) (stream.Position, []*stream.Item) {
	t.Helper()
	head, items, err := b.Since(ch, after)
	if err != nil {
		t.Fatalf("Since %s %v: %v", ch, after, err)
	}
	return head, items
}

func mustHead(t *testing.T, b channel.Broker, ch string) stream.Position {
	t.Helper()
	return must(t)(b.Head(ch))
}

func mustNext(t *testing.T, b channel.Broker, ch string) stream.Position {
	t.Helper()
	return must(t)(b.Next(ch))
}
