package redis

import (
	"context"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/durable"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/interest"
	"github.com/heraldrt/herald/internal/presence"
	"github.com/heraldrt/herald/internal/stream"
)

// hashTag returns the part of key Redis Cluster hashes: the text between the first "{" and the
// first "}" after it, when that is not empty; the whole key otherwise.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// TestKeyLayout writes through every store and checks each key it left: that it has the shape
// the package documentation gives, and that every key of one owner, and of one channel, shares
// one hash tag (on the Cluster, one slot as Redis counts it): a presence channel's keys share
// the tag of its shard's index, and the node registry's keys one tag of their own.
func TestKeyLayout(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		in, err := NewInterest(c, interest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		owners := []string{"t:public.orders", "ch:docs", "odd}owner", "}lead"}
		for _, o := range owners {
			for _, r := range []interest.Row{
				{Token: "a", Socket: "s1", Sub: "1", Identity: "alice", Node: "n1"},
				{Token: "", Socket: "s2", Sub: "1", Identity: "bob", Node: "n2"},
				{Token: "a/b", Socket: "s2", Sub: "2", Identity: "bob", Node: "n2"},
			} {
				if _, err := in.Add(ctx, o, r); err != nil {
					t.Fatalf("Add under %q: %v", o, err)
				}
			}
			if _, _, err := in.Stamp(ctx, o, 42, []string{"a"}); err != nil {
				t.Fatalf("Stamp under %q: %v", o, err)
			}
		}
		hist, err := NewHistory(c, history.Config{})
		if err != nil {
			t.Fatal(err)
		}
		// A table's history is in its interest owner's slot (owner "t:public.orders").
		if err := hist.Append(ctx, []history.Entry{{Table: "public.orders", LSN: 10, Prev: 9, Data: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}

		br, err := NewBroker(c, BrokerConfig{Node: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		channels := []string{"docs/alice/inbox", "x"}
		for _, ch := range channels {
			if _, err := br.Append(ch, "ev", []byte(`{"a":1}`)); err != nil {
				t.Fatal(err)
			}
		}

		pr := NewPresence(c)
		rooms := []string{"docs/alice/inbox", "x", "odd}room", "{lead", ""}
		shards := map[string]bool{}
		for _, ch := range rooms {
			if _, err := pr.Track(ctx, ch, presence.Member{ID: "a", Meta: []byte(`{}`)}, time.Now(), time.Minute, 4); err != nil {
				t.Fatalf("Track in %q: %v", ch, err)
			}
			if _, err := pr.Sweep(ctx, ch, "n1", time.Now(), time.Minute); err != nil {
				t.Fatalf("Sweep of %q: %v", ch, err)
			}
			shards[pr.channelKeys(ch)[0]] = true
		}

		registry := map[string]bool{}
		for _, node := range []string{"node-a", "node-b"} {
			nd, err := NewNodes(c, NodesConfig{Node: node, URL: "http://" + node + ":8080"})
			if err != nil {
				t.Fatal(err)
			}
			if err := nd.Register(ctx); err != nil {
				t.Fatal(err)
			}
			for _, k := range nd.keys() {
				registry[k] = true
			}
		}

		ds := NewDurable(c, durable.Limits{})
		holders := []durable.Key{{Subject: "alice", App: "web", Name: "jobs"}, {Subject: "odd}sub", Name: "x:y"}}
		durableKeys := map[string]string{} // key -> its holder
		for _, k := range holders {
			if _, err := ds.Bind(ctx, k, durable.Def{Channel: "jobs", Mode: durable.Single}, durable.Conn{ID: "c1", Node: "n1"}, time.Now()); err != nil {
				t.Fatal(err)
			}
			ents := []durable.Entry{{Msg: &stream.Message{Pos: stream.ChannelPosition("e", 1), Channel: "jobs", Data: []byte("1")}},
				{Msg: &stream.Message{Pos: stream.ChannelPosition("e", 2), Channel: "jobs", Data: []byte("2")}}}
			if _, err := ds.Append(ctx, k, ents, time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, _, err := ds.Ack(ctx, k, "c1", stream.ChannelPosition("e", 1), time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, _, err := ds.Claim(ctx, k, "n1", time.Now(), time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, key := range ds.keys(k) {
				durableKeys[key] = k.Subject
			}
		}

		p := regexp.QuoteMeta(c.Prefix())
		shapes := []*regexp.Regexp{
			regexp.MustCompile(`^` + p + `:[wnlgmy]:\{o:.*\}$`),
			regexp.MustCompile(`^` + p + `:[ts]:\{o:.*\}:.*$`),
			regexp.MustCompile(`^` + p + `:[che]:\{c:[^}]*\}$`),
			regexp.MustCompile(`^` + p + `:i:\{p:[0-9]+\}$`),
			regexp.MustCompile(`^` + p + `:[dma]:\{p:[0-9]+\}:.*$`),
			regexp.MustCompile(`^` + p + `:[vu]:\{r:nodes\}$`),
			regexp.MustCompile(`^` + p + `:jh:\{j:[0-9]+:.*\}$`),
			regexp.MustCompile(`^` + p + `:j[scqelpkro]:\{j:[0-9]+:.*\}:.*$`),
		}
		keys := keysUnder(t, ctx, c)
		tags := map[string]map[string]bool{} // owner or channel -> tags of its keys
		for _, k := range keys {
			ok := false
			for _, s := range shapes {
				ok = ok || s.MatchString(k)
			}
			if !ok {
				t.Errorf("key %q has none of the documented shapes", k)
			}
			var who string
			for _, o := range owners {
				if strings.HasPrefix(k[len(c.Prefix())+3:], "{o:"+o+"}") {
					who = "owner " + o
				}
			}
			for _, ch := range channels {
				if strings.HasPrefix(k[len(c.Prefix())+3:], "{c:"+ch+"}") {
					who = "channel " + ch
				}
			}
			for _, ch := range rooms {
				if keys := pr.channelKeys(ch); k == keys[1] || k == keys[2] || k == pr.leaseKey(ch) {
					who = "presence channel " + ch
				}
			}
			if registry[k] {
				who = "the node registry"
			}
			if h, ok := durableKeys[k]; ok {
				who = "durable holder " + h
			}
			if shards[k] {
				continue // a presence shard's index: its channels' keys are checked against it below
			}
			if who == "" {
				t.Errorf("key %q belongs to no owner or channel the test wrote", k)
				continue
			}
			if tags[who] == nil {
				tags[who] = map[string]bool{}
			}
			tags[who][hashTag(k)] = true
		}
		// Per owner: w n l g m, t for tokens "a" "" "a/b", s for s1 s2; and y, the history, for
		// the table's. Per channel: c h e. Per presence channel: d m a, and an index per shard
		// they fall in. The node registry: v u. Per durable holder: jh, and its one subscription's
		// js jc jq je jl jp jk jr jo.
		if want := 4*(5+3+2) + 1 + 2*3 + 3*len(rooms) + len(shards) + 2 + 10*len(holders); len(keys) != want {
			t.Errorf("%d keys, want %d: %q", len(keys), want, keys)
		}
		for _, ch := range rooms {
			who := "presence channel " + ch
			if idx := hashTag(pr.channelKeys(ch)[0]); !tags[who][idx] {
				t.Errorf("%s: keys hash on %v, not on its shard index's tag %q", who, tags[who], idx)
			}
		}
		for who, ts := range tags {
			if len(ts) != 1 {
				t.Errorf("%s: keys hash on %d tags %v, want one", who, len(ts), ts)
			}
		}
		// On a Cluster every script above would have failed with CROSSSLOT had the tags
		// differed; ask Redis for the slots too.
		slots := map[string]map[int64]bool{}
		for _, k := range keys {
			n, err := c.rc.Do(ctx, c.rc.B().ClusterKeyslot().Key(k).Build()).AsInt64()
			if err != nil {
				if _, ok := rueidis.IsRedisErr(err); ok {
					return // not a Cluster
				}
				t.Fatal(err)
			}
			tag := hashTag(k)
			if slots[tag] == nil {
				slots[tag] = map[int64]bool{}
			}
			slots[tag][n] = true
		}
		for tag, s := range slots {
			if len(s) != 1 {
				t.Errorf("tag %q spans slots %v", tag, s)
			}
		}
	})
}

// counting counts the commands a store sends.
type counting struct {
	rueidis.Client
	n atomic.Int64
}

func (c *counting) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *counting) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

// TestHotPathIsOneCommand: "which of these tokens does anyone watch" is one command whatever
// the number of tokens, and a warm write is one script call.
func TestHotPathIsOneCommand(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		cc := &counting{Client: c.rc}
		in, err := NewInterest(&Client{rc: cc, prefix: c.prefix, timeout: c.timeout}, interest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []interest.Row{
			{Token: "a", Socket: "s1", Sub: "1", Identity: "i", Node: "n"},
			{Token: "a/b", Socket: "s1", Sub: "2", Identity: "i", Node: "n"},
		} {
			if _, err := in.Add(ctx, "ch:a", r); err != nil {
				t.Fatal(err)
			}
		}
		cc.n.Store(0)
		w, err := in.Watched(ctx, "ch:a", []string{"", "a", "a/b", "a/b/c", "a/b/c/d"})
		if err != nil {
			t.Fatal(err)
		}
		if got := cc.n.Load(); got != 1 {
			t.Errorf("Watched sent %d commands, want 1", got)
		}
		if want := []bool{false, true, true, false, false}; !equalBools(w, want) {
			t.Errorf("Watched = %v, want %v", w, want)
		}
		cc.n.Store(0)
		if _, err := in.Add(ctx, "ch:a", interest.Row{Token: "a/b/c", Socket: "s1", Sub: "3", Identity: "i", Node: "n"}); err != nil {
			t.Fatal(err)
		}
		if got := cc.n.Load(); got != 1 {
			t.Errorf("a warm Add sent %d commands, want 1 (one script)", got)
		}
	})
}

// TestHistoryAppendIsOnePipeline: a transaction's entries, whatever the number of its tables,
// go in one pipeline, one script per table.
func TestHistoryAppendIsOnePipeline(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := dial(t, url)
		cc := &pipelines{Client: c.rc}
		h, err := NewHistory(&Client{rc: cc, prefix: c.prefix, timeout: c.timeout}, history.Config{})
		if err != nil {
			t.Fatal(err)
		}
		entries := []history.Entry{
			{Table: "public.a", LSN: 10, Prev: 9, Data: []byte(`{}`)},
			{Table: "public.b", LSN: 10, Prev: 9, Data: []byte(`{}`)},
			{Table: "public.c", LSN: 10, Prev: 9, Data: []byte(`{}`)},
		}
		for _, round := range []string{"first", "warm"} {
			cc.calls.Store(0)
			cc.n.Store(0)
			if err := h.Append(ctx, entries); err != nil {
				t.Fatal(err)
			}
			// A first call may find the script unknown (EVAL after EVALSHA): two pipelines then.
			if calls, n := cc.calls.Load(), cc.n.Load(); calls > 2 || round == "warm" && (calls != 1 || n != 3) {
				t.Errorf("%s Append: %d pipelines of %d commands, want one of 3", round, calls, n)
			}
			for i := range entries {
				entries[i].LSN += 10
			}
		}
	})
}

// pipelines counts the pipelines (Do and DoMulti calls) a store sends, and their commands.
type pipelines struct {
	rueidis.Client
	calls, n atomic.Int64
}

func (c *pipelines) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.calls.Add(1)
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *pipelines) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.calls.Add(1)
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
