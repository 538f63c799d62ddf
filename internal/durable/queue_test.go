package durable

import (
	"fmt"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/stream"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func msg(off uint64) Entry {
	return Entry{Msg: &stream.Message{Pos: stream.ChannelPosition(epoch, off), Channel: "jobs", Data: []byte(`1`)}}
}

// got lists an outcome's deliveries as "conn:offset#attempt" and "conn:gap(first-last,lost,reason)".
func got(o Outcome) []string {
	var out []string
	for _, d := range o.Deliveries {
		for _, e := range d.Entries {
			if g := e.Gap; g != nil {
				out = append(out, fmt.Sprintf("%s:gap(%d-%d,%d,%s)", d.Conn.ID, g.First.Offset, g.Last.Offset, g.Lost, g.Reason))
				continue
			}
			out = append(out, fmt.Sprintf("%s:%d#%d", d.Conn.ID, e.Msg.Pos.Offset, e.Attempt))
		}
	}
	return out
}

func want(t *testing.T, step string, o Outcome, w ...string) {
	t.Helper()
	g := got(o)
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Fatalf("%s: delivered %v, want %v", step, g, w)
	}
}

// TestSingleRetryOrder: an item goes to the most recently bound connection; when its lease
// ends without an ack it goes to the next most recent not yet tried; once all were tried a new
// round starts; after MaxAttempts it is parked and a marker goes to every connection.
func TestSingleRetryOrder(t *testing.T) {
	q := NewQueue(Def{Channel: "jobs", Mode: Single}, Limits{Lease: time.Second, MaxAttempts: 4, MaxInFlight: 1}, t0)
	want(t, "bind a", q.Bind(Conn{ID: "a"}, t0))
	want(t, "bind b", q.Bind(Conn{ID: "b"}, t0))
	want(t, "bind c", q.Bind(Conn{ID: "c"}, t0))
	want(t, "publish", q.Append([]Entry{msg(1)}, t0), "c:1#1")
	now := t0.Add(time.Second)
	want(t, "expire 1", q.Expire(now), "b:1#2")
	want(t, "unbind b", q.Unbind("b", now), "a:1#3")
	// c and a were tried, b is gone: a new round, most recent first.
	now = now.Add(time.Second)
	want(t, "expire 2", q.Expire(now), "c:1#4")
	now = now.Add(time.Second)
	o := q.Expire(now)
	want(t, "expire 3", o, "c:gap(1-1,1,parked)", "a:gap(1-1,1,parked)")
	if o.Parked != 1 || o.Depth != 0 {
		t.Fatalf("parked %d, depth %d; want 1, 0", o.Parked, o.Depth)
	}
}

// TestSingleAcks: the holder's ack settles; sent again it is still a success; another
// connection's ack, a broadcast position or an unknown one is NotFound; a late ack from the
// last holder whose lease expired, before anyone else has it, still settles.
func TestSingleAcks(t *testing.T) {
	q := NewQueue(Def{Channel: "jobs", Mode: Single}, Limits{Lease: time.Second, MaxInFlight: 1}, t0)
	q.Bind(Conn{ID: "a"}, t0)
	q.Bind(Conn{ID: "b"}, t0)
	want(t, "publish", q.Append([]Entry{msg(1), msg(2), msg(3)}, t0), "b:1#1", "a:2#1")
	p := func(off uint64) stream.Position { return stream.ChannelPosition(epoch, off) }
	for _, tt := range []struct {
		conn string
		off  uint64
		want AckResult
	}{
		{"a", 1, NotFound},     // b's
		{"b", 1, Acked},        // then 3 goes to b
		{"b", 1, AlreadyAcked}, // again
		{"a", 1, NotFound},     // b settled it
		{"a", 9, NotFound},     // never queued
	} {
		if r, _ := q.Ack(tt.conn, p(tt.off), t0); r != tt.want {
			t.Fatalf("ack %d by %s: %s, want %s", tt.off, tt.conn, r, tt.want)
		}
	}
	if r, _ := q.Ack("b", p(3), t0); r != Acked {
		t.Fatalf("ack 3 by b: %s", r)
	}

	// A late ack: b's lease on 4 expires while a, untried, is full (it holds 2): 4 waits, and
	// b, the last to have it, may still settle it.
	want(t, "publish 4", q.Append([]Entry{msg(4)}, t0), "b:4#1")
	now := t0.Add(time.Second)
	q.Ack("a", p(2), now.Add(-time.Millisecond))
	want(t, "publish 5", q.Append([]Entry{msg(5)}, now.Add(-time.Millisecond)), "a:5#1")
	want(t, "expire", q.Expire(now))
	if r, _ := q.Ack("a", p(4), now); r != NotFound {
		t.Fatalf("ack 4 by a, which never had it: %s", r)
	}
	if r, _ := q.Ack("b", p(4), now); r != Acked {
		t.Fatalf("late ack 4 by b: %s, want acked", r)
	}
}

// TestOverflowKeepsLeased: a full queue sheds its oldest items that no connection holds, a
// queue_full marker in their place, one marker growing while the overflow goes on.
func TestOverflowKeepsLeased(t *testing.T) {
	q := NewQueue(Def{Channel: "jobs", Mode: Single}, Limits{MaxItems: 3, MaxInFlight: 1}, t0)
	q.Bind(Conn{ID: "a"}, t0)
	want(t, "publish 1", q.Append([]Entry{msg(1)}, t0), "a:1#1")
	q.Unbind("a", t0)
	// 1 waits again (not leased): it is the oldest and goes first.
	o := q.Append([]Entry{msg(2), msg(3), msg(4), msg(5)}, t0)
	if o.Dropped != 2 || o.Depth != 3 {
		t.Fatalf("dropped %d, depth %d; want 2, 3", o.Dropped, o.Depth)
	}
	want(t, "bind b", q.Bind(Conn{ID: "b"}, t0), "b:gap(1-2,2,queue_full)", "b:3#1")
}

// TestBroadcastWaitsForAConnection: items published while no connection is bound wait, and go
// to every connection bound when one binds.
func TestBroadcastWaitsForAConnection(t *testing.T) {
	q := NewQueue(Def{Channel: "feed", Mode: Broadcast}, Limits{}, t0)
	want(t, "publish", q.Append([]Entry{msg(1), msg(2)}, t0))
	want(t, "bind", q.Bind(Conn{ID: "a"}, t0), "a:1#0", "a:2#0")
	q.Bind(Conn{ID: "b"}, t0)
	want(t, "publish 3", q.Append([]Entry{msg(3), msg(3)}, t0), "b:3#0", "a:3#0")
	if q.Idle(t0.Add(48 * time.Hour)) {
		t.Fatal("idle with connections bound")
	}
	q.Unbind("a", t0)
	q.Unbind("b", t0)
	if q.Idle(t0.Add(DefaultIdleTTL-time.Second)) || !q.Idle(t0.Add(DefaultIdleTTL)) {
		t.Fatal("want idle exactly IdleTTL after the last connection went")
	}
}
