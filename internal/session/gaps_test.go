package session

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// recordingTransport keeps every frame written.
type recordingTransport struct {
	mu     sync.Mutex
	frames []map[string]any
}

func (r *recordingTransport) Write(_ time.Time, items []delivery.Item) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		var m map[string]any
		if err := json.Unmarshal(append(append([]byte(nil), it.Head...), it.Body...), &m); err != nil {
			return err
		}
		r.frames = append(r.frames, m)
	}
	return nil
}

func (r *recordingTransport) Close(CloseReason, string) {}

// written is every frame written so far.
func (r *recordingTransport) written() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.frames...)
}

func (r *recordingTransport) resyncs() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, f := range r.frames {
		if f["type"] == "resync" {
			out = append(out, f)
		}
	}
	return out
}

// headChannels answers every exact subscription with head e:9, and a resume with the gap a
// channel without history gives (channel.Hub.SubscribeFrom): what is after from is lost.
type headChannels struct{ fakeChannels }

func (headChannels) Subscribe(_ stream.Receiver, _, pattern, _ string, from wire.Position) (ChannelSubscription, error) {
	if strings.Contains(pattern, "*") {
		return ChannelSubscription{Unsubscribe: func() {}}, nil
	}
	head := wire.ChannelPosition("e", 9)
	cs := ChannelSubscription{Head: head, Unsubscribe: func() {}}
	switch {
	case from.IsZero():
	case from.Epoch != head.Epoch:
		cs.Replay = []*stream.Item{stream.NewGap(&stream.Gap{Last: head, Reason: stream.ReasonStreamReset})}
	case from.Offset < head.Offset:
		cs.Replay = []*stream.Item{stream.NewGap(&stream.Gap{First: wire.ChannelPosition("e", from.Offset+1), Last: head,
			Lost: head.Offset - from.Offset, Reason: stream.ReasonHistoryExpired})}
	}
	return cs, nil
}

func msg(offset uint64, data string) *stream.Item {
	return stream.NewMessage(&stream.Message{Pos: stream.ChannelPosition("e", offset), Channel: "c", Data: json.RawMessage(data)})
}

func gapItem(reason stream.Reason) *stream.Item {
	return stream.NewGap(&stream.Gap{First: stream.ChannelPosition("e", 10), Last: stream.ChannelPosition("e", 12), Reason: reason})
}

// TestEveryGapTakesOnePath enumerates the sources of a gap: the lanes' own (a full lane, an
// item too large for the lane), the producers' (a transaction too large to hold, a change
// whose effect could not be told, a rule that failed, a hop upstream that lost items, a durable
// subscription's queue that overflowed or parked an item) and a
// resume the history cannot serve. Each ends as exactly one marker of the lanes (the path
// delivery.Lanes.Gap documents), written as one resync with its reason.
func TestEveryGapTakesOnePath(t *testing.T) {
	tests := []struct {
		reason stream.Reason
		lanes  delivery.Config
		from   wire.Position // for a resume
		push   []*stream.Item
	}{
		{reason: stream.ReasonLaneFull, lanes: delivery.Config{MaxDataFrames: 1}, push: []*stream.Item{msg(10, "1"), msg(11, "1"), msg(12, "1")}},
		{reason: stream.ReasonTooLarge, lanes: delivery.Config{MaxDataBytes: 256}, push: []*stream.Item{msg(10, `"`+strings.Repeat("x", 512)+`"`)}},
		{reason: stream.ReasonTransactionTooLarge, push: []*stream.Item{gapItem(stream.ReasonTransactionTooLarge)}},
		{reason: stream.ReasonIncompleteImage, push: []*stream.Item{gapItem(stream.ReasonIncompleteImage)}},
		{reason: stream.ReasonPolicyError, push: []*stream.Item{gapItem(stream.ReasonPolicyError)}},
		{reason: stream.ReasonUpstreamGap, push: []*stream.Item{gapItem(stream.ReasonUpstreamGap)}},
		// A durable subscription's markers reach its connections as the producer's gaps.
		{reason: stream.ReasonQueueFull, push: []*stream.Item{gapItem(stream.ReasonQueueFull)}},
		{reason: stream.ReasonParked, push: []*stream.Item{gapItem(stream.ReasonParked)}},
		{reason: stream.ReasonHistoryExpired, from: wire.ChannelPosition("e", 4)},
		{reason: stream.ReasonStreamReset, from: wire.ChannelPosition("old", 4)},
	}
	covered := map[stream.Reason]bool{}
	for _, tt := range tests {
		covered[tt.reason] = true
		t.Run(string(tt.reason), func(t *testing.T) {
			rec := &recordingTransport{}
			s, err := New(Config{Lanes: tt.lanes, Codec: wire.Codec{}}, Deps{Channels: headChannels{}}, rec, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Channel: "c", From: tt.from}); err != nil {
				t.Fatal(err)
			}
			for _, it := range tt.push {
				s.Push("s", it)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			deadline := time.Now().Add(5 * time.Second)
			for len(rec.resyncs()) == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			got := rec.resyncs()
			if len(got) != 1 || got[0]["reason"] != string(tt.reason) || got[0]["sub"] != "s" {
				t.Fatalf("resyncs %v, want one for s with reason %s", got, tt.reason)
			}
			if st := s.Stats(); st.MarkersEmitted != 1 {
				t.Errorf("markers emitted %d, want 1: the gap did not take the lanes' path", st.MarkersEmitted)
			}
		})
	}
	for _, r := range stream.Reasons() {
		if !covered[r] {
			t.Errorf("gap reason %s has no source in this test", r)
		}
	}
}

// replayChannels answers a resume with a replay of e:5..e:9, and, before it returns, delivers
// e:10 and e:11 live, as publications arriving while the subscribe is answered are.
type replayChannels struct{ fakeChannels }

func (replayChannels) Subscribe(r stream.Receiver, sub, _, _ string, from wire.Position) (ChannelSubscription, error) {
	r.Push(sub, msg(10, "10"))
	r.Push(sub, msg(11, "11"))
	cs := ChannelSubscription{Head: wire.ChannelPosition("e", 9), Unsubscribe: func() {}}
	for off := from.Offset + 1; off <= 9; off++ {
		cs.Replay = append(cs.Replay, msg(off, fmt.Sprint(off)))
	}
	return cs, nil
}

// TestReplayComesBetweenTheReplyAndTheLiveItems: a resumed channel subscription's replay is
// queued right after its subscribed reply, and the items delivered while the subscribe was
// being answered after it, so the client sees each position once, in order.
func TestReplayComesBetweenTheReplyAndTheLiveItems(t *testing.T) {
	rec := &recordingTransport{}
	s, err := New(Config{Codec: wire.Codec{}}, Deps{Channels: replayChannels{}}, rec, auth.Identity{Subject: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Channel: "c", From: wire.ChannelPosition("e", 6)}); err != nil {
		t.Fatal(err)
	}
	s.Push("s", msg(12, "12"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	want := []string{"subscribed e:6", "message e:7", "message e:8", "message e:9", "message e:10", "message e:11", "message e:12"}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got = got[:0]
		for _, f := range rec.written() {
			p, _ := f["pos"].(map[string]any)
			got = append(got, fmt.Sprintf("%v %v:%v", f["type"], p["epoch"], p["offset"]))
		}
		if len(got) >= len(want) {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
}

// TestPendingBufferIsBounded: items delivered while a subscribe is still being answered wait
// for its reply, but at most the data lane's bounds of them, in frames and in bytes; the rest
// become one gap after them, never unbounded memory.
func TestPendingBufferIsBounded(t *testing.T) {
	codec := wire.Codec{}
	// The frame of one of the first nine messages: they are all this long.
	frame := len(codec.Head("s", false)) + len(msg(1, "1").Encoded(codec))
	tests := []struct {
		name  string
		lanes delivery.Config
		want  int // items buffered; the rest of 100 are the gap
	}{
		{"by frames", delivery.Config{MaxDataFrames: 4}, 4},
		{"by bytes", delivery.Config{MaxDataFrames: 1000, MaxDataBytes: 3*frame + frame/2}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingTransport{}
			s, err := New(Config{Lanes: tt.lanes, Codec: codec}, Deps{}, rec, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Abort()
			s.mu.Lock()
			su := &subscription{sub: "s", key: "s\x001", head: s.cfg.Codec.Head("s", false), pending: true, unsubscribe: func() {}}
			s.subs["s"] = su
			s.mu.Unlock()
			for i := range 100 {
				s.Push("s", msg(uint64(i+1), "1"))
			}
			s.mu.Lock()
			buffered, bytes, overflow := len(su.buffered), su.bufferedBytes, su.overflow
			s.mu.Unlock()
			first := fmt.Sprintf("e:%d", tt.want+1)
			if buffered != tt.want || bytes != tt.want*frame || overflow == nil || overflow.first != first || overflow.last != "e:100" || overflow.count != uint64(100-tt.want) {
				t.Fatalf("buffered %d (%d bytes), overflow %+v; want %d buffered (%d bytes) and a gap %s..e:100 of %d",
					buffered, bytes, overflow, tt.want, tt.want*frame, first, 100-tt.want)
			}
		})
	}
}
