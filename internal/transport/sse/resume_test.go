package sse

import (
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/wire"
)

// TestKept: an ended stream is kept for the window, taken once and only by its identity, and
// at most max are kept, the oldest let go first; a stream kept again replaces its entry.
func TestKept(t *testing.T) {
	now := time.Unix(1000, 0)
	k := newKept(time.Minute, 2)
	k.now = func() time.Time { return now }
	defs := []*wire.Subscribe{{Sub: "a", Channel: "a"}}

	k.keep("s1", "u", defs)
	if k.take("s1", "mallory") != nil || k.take("s1", ownerOf(auth.Identity{Anonymous: true})) != nil {
		t.Fatal("another identity took the stream")
	}
	if ks := k.take("s1", "u"); ks == nil || ks.def("a") == nil || ks.def("b") != nil {
		t.Fatalf("take = %+v", ks)
	}
	if k.take("s1", "u") != nil {
		t.Fatal("a stream was taken twice")
	}

	k.keep("s2", "u", defs)
	now = now.Add(30 * time.Second)
	k.keep("s3", "u", defs)
	k.keep("s4", "u", defs) // over max: s2 goes
	if k.take("s2", "u") != nil || k.len() != 2 {
		t.Fatalf("past max the oldest stays: %d kept", k.len())
	}
	now = now.Add(31 * time.Second) // s3 and s4 are 31 s old
	if k.take("s3", "u") == nil {
		t.Fatal("s3 expired within its window")
	}
	now = now.Add(30 * time.Second)
	if k.take("s4", "u") != nil || k.len() != 0 {
		t.Fatal("s4 outlived its window")
	}
	k.keep("s5", "u", nil)
	if k.len() != 0 {
		t.Fatal("a stream with no subscriptions was kept")
	}
	var off *kept = newKept(0, 0)
	off.keep("s6", "u", defs)
	if off.take("s6", "u") != nil {
		t.Fatal("a zero window kept a stream")
	}
}

// TestEventIDs: ids name every live subscription's last position, in the short form while
// the URL subscription is the only one, and only the URL subscription's frames carry ids when
// no stream is kept.
func TestEventIDs(t *testing.T) {
	id := func(e *eventIDs) string { return string(e.appendID(nil)) }
	e := &eventIDs{session: "n.S", urlSub: "feed"}
	e.set("feed", "1/0")
	if got := id(e); got != "id: feed 1/0\n" {
		t.Errorf("URL subscription alone: %q", got)
	}
	e.set("inbox", "k:1")
	e.set("feed", "2/0")
	if got := id(e); got != "id: @n.S feed 2/0 inbox k:1\n" {
		t.Errorf("two: %q", got)
	}
	e.end("feed")
	if got := id(e); got != "id: @n.S inbox k:1\n" {
		t.Errorf("after the URL subscription ended: %q", got)
	}
	e.end("inbox")
	if got := id(e); got != "id: @n.S\n" {
		t.Errorf("none live: %q", got)
	}
	plain := &eventIDs{urlSub: "feed"}
	if plain.tracked("inbox") || !plain.tracked("feed") || plain.tracked("") {
		t.Error("without a kept stream only the URL subscription is tracked")
	}
}
