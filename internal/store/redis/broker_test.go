package redis

import (
	"strconv"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/stream"
)

// TestBrokerAcrossNodes: nodes share one stream per channel, and it ends only when the last
// node holding it forgets it.
func TestBrokerAcrossNodes(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		a, err := NewBroker(c, BrokerConfig{Node: "a"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBroker(c, BrokerConfig{Node: "b"})
		if err != nil {
			t.Fatal(err)
		}
		ha, err := a.Head("room")
		if err != nil {
			t.Fatal(err)
		}
		hb, err := b.Head("room")
		if err != nil || hb != ha {
			t.Fatalf("b's Head = %v, %v; want a's %v: one stream per channel across nodes", hb, err, ha)
		}
		for i, br := range []*Broker{a, b, a} {
			p, err := br.Next("room")
			if err != nil || p.Epoch != ha.Epoch || p.Offset != uint64(i+1) {
				t.Fatalf("Next #%d on node %s = %v, %v; want %s:%d", i+1, br.node, p, err, ha.Epoch, i+1)
			}
		}
		a.Forget("room")
		if p, err := b.Head("room"); err != nil || p.Epoch != ha.Epoch || p.Offset != 3 {
			t.Fatalf("after a forgot: b's Head = %v, %v; want %s:3, the stream b still holds", p, err, ha.Epoch)
		}
		b.Forget("room")
		if p, err := a.Head("room"); err != nil || p.Epoch == ha.Epoch || p.Offset != 0 {
			t.Fatalf("after both forgot: Head = %v, %v; want a new epoch at 0", p, err)
		}
	})
}

// TestHistoryAcrossNodes: the history is one per channel, whichever node appends or reads it,
// and it keeps the stream's epoch after every node forgot the channel, while it lives.
func TestHistoryAcrossNodes(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		a, err := NewBroker(c, BrokerConfig{Node: "a"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBroker(c, BrokerConfig{Node: "b"})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i, br := range []*Broker{a, b, a} {
			it, err := br.Append("room", "", []byte(strconv.Itoa(i)))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, it.Message.Pos.String()+" "+string(it.Message.Data))
		}
		a.Forget("room")
		b.Forget("room")
		head, items, err := b.Since("room", stream.ChannelPosition("old", 9))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range items {
			got = append(got, it.Message.Pos.String()+" "+string(it.Message.Data))
		}
		if head.Offset != 3 || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("after both forgot: Since = %v, %q; want offset 3 and %q, the history keeping the stream", head, got, want)
		}
	})
}

func TestBrokerConfig(t *testing.T) {
	if _, err := NewBroker(&Client{}, BrokerConfig{}); err == nil {
		t.Fatal("NewBroker without a node id: no error")
	}
}
