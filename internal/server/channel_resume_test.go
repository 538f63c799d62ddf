package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/channel"
)

// historyConfig is a single node keeping size publications per channel.
func historyConfig(size int) Config {
	cfg := baseConfig()
	cfg.Fanout.History = channel.HistoryConfig{Size: size}
	return cfg
}

// frameText renders a frame of a channel subscription for comparison: "message e:4 chat",
// "resync e:2..e:3 lost 2 history_expired", "subscribed e:3".
func frameText(m map[string]any) string {
	pos := func(v any) string {
		switch p := v.(type) {
		case map[string]any:
			return fmt.Sprintf("%v:%v", p["epoch"], p["offset"])
		case nil:
			return ""
		}
		return fmt.Sprint(v)
	}
	switch m["type"] {
	case "message":
		s := "message " + pos(m["pos"])
		if e, ok := m["event"]; ok {
			s += " " + fmt.Sprint(e)
		}
		return s
	case "resync":
		s := fmt.Sprintf("resync %s..%s", pos(m["first"]), pos(m["last"]))
		if l, ok := m["lost"]; ok {
			s += fmt.Sprintf(" lost %v", l)
		}
		return s + " " + fmt.Sprint(m["reason"])
	case "subscribed":
		return "subscribed " + pos(m["pos"])
	}
	return fmt.Sprint(m)
}

// frames reads n frames from c, rendered with frameText.
func frames(t *testing.T, c *client, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		m, err := c.read(10 * time.Second)
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		out = append(out, frameText(m))
	}
	return out
}

func publishEvent(t *testing.T, r *running, channel, event, data string) string {
	t.Helper()
	code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"`+channel+`","event":"`+event+`","data":`+data+`}`)
	if code != 200 {
		t.Fatalf("publish to %s: %d %v", channel, code, m)
	}
	p := m["pos"].(map[string]any)
	return fmt.Sprintf("%v:%v", p["epoch"], p["offset"])
}

// TestChannelResume: a client that received some of a channel's messages and went away
// subscribes again from the last one. Within the history it is replayed exactly what it
// missed, then gets live messages; beyond it, one resync says what it missed. Its channel kept
// its epoch while nobody subscribed to it.
func TestChannelResume(t *testing.T) {
	r := start(t, historyConfig(5))
	a, _ := connect(t, r)
	a.send(`{"type":"subscribe","id":"1","sub":"s","channel":"room"}`)
	epoch, _ := channelPos(t, frames(t, a, 1)[0][len("subscribed "):])
	var pos []string // pos[i] is the (i+1)th publication's
	for i := 1; i <= 3; i++ {
		pos = append(pos, publishEvent(t, r, "room", []string{"chat", "mention"}[i%2], fmt.Sprint(i)))
	}
	if got := frames(t, a, 3); fmt.Sprint(got) != fmt.Sprintf("[message %s mention message %s chat message %s mention]", pos[0], pos[1], pos[2]) {
		t.Fatalf("live: %q", got)
	}
	_ = a.c.CloseNow() // the channel has no subscriber now
	for i := 4; i <= 7; i++ {
		pos = append(pos, publishEvent(t, r, "room", []string{"chat", "mention"}[i%2], fmt.Sprint(i)))
	}
	if e, off := channelPos(t, pos[6]); e != epoch || off != 7 {
		t.Fatalf("the 7th publication at %s, want %s:7: the history keeps the channel's epoch", pos[6], epoch)
	}

	tests := []struct {
		name, from, event string
		want              []string
	}{
		{"within the history", pos[2], "", []string{"subscribed " + pos[2], "message " + pos[3] + " chat", "message " + pos[4] + " mention",
			"message " + pos[5] + " chat", "message " + pos[6] + " mention"}},
		{"with an event filter", pos[2], "chat", []string{"subscribed " + pos[2], "message " + pos[3] + " chat", "message " + pos[5] + " chat"}},
		// The history holds 3..7: from 1, the second is gone, so all of it is one resync.
		{"beyond the history", pos[0], "", []string{"subscribed " + pos[0], fmt.Sprintf("resync %s:2..%s lost 6 history_expired", epoch, pos[6])}},
		{"beyond the history with an event filter", pos[0], "chat", []string{"subscribed " + pos[0], fmt.Sprintf("resync %s:2..%s history_expired", epoch, pos[6])}},
		{"another epoch", "gone:3", "", []string{"subscribed gone:3", fmt.Sprintf("resync ..%s stream_reset", pos[6])}},
		{"at the head", pos[6], "", []string{"subscribed " + pos[6]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := connect(t, r)
			event := ""
			if tt.event != "" {
				event = `,"event":"` + tt.event + `"`
			}
			c.send(`{"type":"subscribe","id":"1","sub":"s","channel":"room","from":"` + tt.from + `"` + event + `}`)
			if got := frames(t, c, len(tt.want)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("got %q\nwant %q", got, tt.want)
			}
			// Nothing more: the pong follows anything queued before it.
			c.send(`{"type":"ping","id":"p"}`)
			c.expect("pong")
		})
	}
	t.Run("then live", func(t *testing.T) {
		c, _ := connect(t, r)
		c.send(`{"type":"subscribe","id":"1","sub":"s","channel":"room","from":"` + pos[5] + `"}`)
		live := publishEvent(t, r, "room", "chat", "8")
		want := []string{"subscribed " + pos[5], "message " + pos[6] + " mention", "message " + live + " chat"}
		if got := frames(t, c, 3); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	})
}

// TestChannelResumeWhilePublishing: a client resumes while the channel is published to
// without pause. It gets every offset after its from once, in order, replay then live.
func TestChannelResumeWhilePublishing(t *testing.T) {
	r := start(t, historyConfig(1000))
	const total = 300
	var (
		mu   sync.Mutex
		last string
	)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= total; i++ {
			p := publishEvent(t, r, "busy", "", fmt.Sprint(i))
			mu.Lock()
			last = p
			mu.Unlock()
		}
	}()
	// Resume from somewhere in the middle of the stream once it has begun.
	var from string
	for deadline := time.Now().Add(10 * time.Second); from == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		if e, off := channelPosOr(last); off >= 20 {
			from = fmt.Sprintf("%s:%d", e, off/2)
		}
		mu.Unlock()
	}
	if from == "" {
		t.Fatal("no publication within 10s")
	}
	epoch, off := channelPos(t, from)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"1","sub":"s","channel":"busy","from":"` + from + `"}`)
	var want []string
	want = append(want, "subscribed "+from)
	for o := off + 1; o <= total; o++ {
		want = append(want, fmt.Sprintf("message %s:%d", epoch, o))
	}
	got := frames(t, c, len(want))
	wg.Wait()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("resumed from %s: got %d frames, want %d, every offset once in order:\n got %q\nwant %q", from, len(got), len(want), got, want)
	}
}

// channelPosOr parses a position, or returns offset 0.
func channelPosOr(pos string) (string, int) {
	var e string
	var off int
	for i := len(pos) - 1; i >= 0; i-- {
		if pos[i] == ':' {
			e = pos[:i]
			fmt.Sscan(pos[i+1:], &off)
			break
		}
	}
	return e, off
}

// TestChannelResumeWithoutHistory: with channels.history_size 0 every resume is a resync,
// as before channels kept a history.
func TestChannelResumeWithoutHistory(t *testing.T) {
	r := start(t, historyConfig(-1))
	keeper, _ := connect(t, r)
	keeper.send(`{"type":"subscribe","id":"k","sub":"k","channel":"room"}`)
	keeper.expect("subscribed")
	first := publishEvent(t, r, "room", "", "1")
	publishEvent(t, r, "room", "", "2")
	last := publishEvent(t, r, "room", "", "3")
	epoch, _ := channelPos(t, first)
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"1","sub":"s","channel":"room","from":"` + first + `"}`)
	want := []string{"subscribed " + first, fmt.Sprintf("resync %s:2..%s lost 2 history_expired", epoch, last)}
	if got := frames(t, c, 2); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
