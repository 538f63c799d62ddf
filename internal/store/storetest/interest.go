package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/interest"
)

// NewInterest returns a fresh store with cfg, sharing nothing with other subtests' stores.
type NewInterest func(t *testing.T, cfg interest.Config) interest.Store

// suiteTTL is the sockets' TTL in the subtests about liveness: short enough to wait out, long
// enough that a refresh every suiteTTL/4 on a loaded machine is never late.
const suiteTTL = 800 * time.Millisecond

func row(token, socket, sub, identity string) interest.Row {
	return interest.Row{Token: token, Socket: socket, Sub: sub, Identity: identity, Node: "node-" + socket, Data: []byte(`{"p":"` + token + `"}`)}
}

type kit struct {
	t   *testing.T
	s   interest.Store
	ctx context.Context
}

func (k kit) add(owner string, r interest.Row) uint64 {
	k.t.Helper()
	g, err := k.s.Add(k.ctx, owner, r)
	if err != nil {
		k.t.Fatalf("Add(%s, %s/%s under %q): %v", owner, r.Socket, r.Sub, r.Token, err)
	}
	return g
}

func (k kit) watched(owner string, tokens ...string) []bool {
	k.t.Helper()
	w, err := k.s.Watched(k.ctx, owner, tokens)
	if err != nil {
		k.t.Fatalf("Watched(%s, %q): %v", owner, tokens, err)
	}
	return w
}

// rows returns "socket/sub@token" for each live row under tokens, sorted.
func (k kit) rows(owner string, tokens ...string) []string {
	k.t.Helper()
	rs, err := k.s.Rows(k.ctx, owner, tokens)
	if err != nil {
		k.t.Fatalf("Rows(%s, %q): %v", owner, tokens, err)
	}
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Socket+"/"+r.Sub+"@"+r.Token)
	}
	sort.Strings(out)
	return out
}

func (k kit) gen(owner string) uint64 {
	k.t.Helper()
	g, err := k.s.Generation(k.ctx, owner)
	if err != nil {
		k.t.Fatalf("Generation(%s): %v", owner, err)
	}
	return g
}

func wantCode(t *testing.T, what string, err error, code fault.Code) {
	t.Helper()
	fe, ok := fault.As(err)
	if !ok || fe.Code != code {
		t.Fatalf("%s: err = %v, want a fault.Error with code %s", what, err, code)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RunInterest runs the interest.Store suite.
func RunInterest(t *testing.T, newStore NewInterest) {
	ctx := context.Background()
	mk := func(t *testing.T, cfg interest.Config) kit { return kit{t: t, s: newStore(t, cfg), ctx: ctx} }

	t.Run("a row is watched and readable; every change moves the generation", func(t *testing.T) {
		k := mk(t, interest.Config{})
		if g := k.gen("o"); g != 0 {
			t.Fatalf("generation of a new owner = %d, want 0", g)
		}
		g1 := k.add("o", row("a/b", "s1", "x", "alice"))
		g2 := k.add("o", row("a", "s1", "y", "alice"))
		if g1 == 0 || g2 <= g1 || k.gen("o") != g2 {
			t.Fatalf("generations %d, %d, now %d: want rising, and Generation the last", g1, g2, k.gen("o"))
		}
		if got, want := k.watched("o", "", "a", "a/b", "a/b/c"), []bool{false, true, true, false}; !cmp.Equal(got, want) {
			t.Fatalf("Watched = %v, want %v", got, want)
		}
		rs, err := k.s.Rows(ctx, "o", []string{"a/b", "a/b", "nobody"})
		if err != nil {
			t.Fatal(err)
		}
		want := row("a/b", "s1", "x", "alice")
		if len(rs) != 1 || rs[0].Token != want.Token || rs[0].Socket != want.Socket || rs[0].Sub != want.Sub ||
			rs[0].Identity != want.Identity || rs[0].Node != want.Node || string(rs[0].Data) != string(want.Data) {
			t.Fatalf("Rows = %+v, want exactly %+v (a token asked twice reads once)", rs, want)
		}
		if got := k.watched("other", "a"); got[0] {
			t.Fatal("another owner sees the token as watched")
		}
		if w := k.watched("o"); len(w) != 0 {
			t.Fatalf("Watched of no tokens = %v, want empty", w)
		}
	})

	t.Run("data and odd tokens survive the round trip", func(t *testing.T) {
		k := mk(t, interest.Config{})
		odd := []string{"", "with space", "a|b", "}{", "é/ü", strings.Repeat("x", 300)}
		for i, tok := range odd {
			r := row(tok, "s", fmt.Sprint(i), "id")
			r.Data = []byte("bin\x00ary\xff")
			k.add("owner}with{braces", r)
		}
		for _, w := range k.watched("owner}with{braces", odd...) {
			if !w {
				t.Fatalf("Watched(%q) = %v, want all true", odd, k.watched("owner}with{braces", odd...))
			}
		}
		rs, err := k.s.Rows(ctx, "owner}with{braces", odd)
		if err != nil || len(rs) != len(odd) {
			t.Fatalf("Rows = %d rows, %v; want %d", len(rs), err, len(odd))
		}
		for _, r := range rs {
			if string(r.Data) != "bin\x00ary\xff" {
				t.Fatalf("row %q data %q, want it byte for byte", r.Token, r.Data)
			}
		}
	})

	t.Run("a token leaves the watched set only when its last row goes", func(t *testing.T) {
		k := mk(t, interest.Config{})
		k.add("o", row("t", "s1", "a", "alice"))
		k.add("o", row("t", "s2", "a", "bob"))
		if _, err := k.s.Remove(ctx, "o", "s1", "a"); err != nil {
			t.Fatal(err)
		}
		if !k.watched("o", "t")[0] {
			t.Fatal("one socket's unsubscribe silenced another's subscription on the same token")
		}
		if got := k.rows("o", "t"); !cmp.Equal(got, []string{"s2/a@t"}) {
			t.Fatalf("Rows = %v, want s2's only", got)
		}
		if _, err := k.s.Remove(ctx, "o", "s2", "a"); err != nil {
			t.Fatal(err)
		}
		if k.watched("o", "t")[0] {
			t.Fatal("a token with no rows is still watched")
		}
	})

	t.Run("removing another socket's subscription is not_found and changes nothing", func(t *testing.T) {
		k := mk(t, interest.Config{})
		g := k.add("o", row("t", "s1", "a", "alice"))
		_, err := k.s.Remove(ctx, "o", "s2", "a")
		wantCode(t, "Remove of s1's sub by s2", err, fault.CodeNotFound)
		_, err = k.s.Remove(ctx, "o", "s1", "nope")
		wantCode(t, "Remove of an unknown sub", err, fault.CodeNotFound)
		_, err = k.s.Remove(ctx, "elsewhere", "s1", "a")
		wantCode(t, "Remove under another owner", err, fault.CodeNotFound)
		if got := k.rows("o", "t"); !cmp.Equal(got, []string{"s1/a@t"}) || k.gen("o") != g {
			t.Fatalf("after refused removes: rows %v, generation %d (was %d); want both unchanged", got, k.gen("o"), g)
		}
	})

	t.Run("a subscription id held twice by one socket is refused", func(t *testing.T) {
		k := mk(t, interest.Config{})
		k.add("o", row("t", "s1", "a", "alice"))
		_, err := k.s.Add(ctx, "o", row("u", "s1", "a", "alice"))
		wantCode(t, "second Add of s1/a", err, fault.CodeDuplicateSubscription)
		if k.watched("o", "u")[0] {
			t.Fatal("a refused Add left its token watched")
		}
		k.add("o", row("t", "s2", "a", "alice")) // the same id on another socket is another subscription
	})

	t.Run("the limit per identity answers a stable code and frees on remove and reap", func(t *testing.T) {
		k := mk(t, interest.Config{MaxPerIdentity: 3})
		k.add("o", row("t1", "s1", "a", "alice"))
		k.add("o", row("t2", "s1", "b", "alice"))
		k.add("o", row("t3", "s2", "a", "alice")) // the limit spans alice's sockets
		_, err := k.s.Add(ctx, "o", row("t4", "s3", "a", "alice"))
		wantCode(t, "alice's fourth Add", err, fault.CodeTooManySubscriptions)
		if fe, _ := fault.As(err); fe.Code.Status() != 429 {
			t.Fatalf("limit status %d, want 429", fe.Code.Status())
		}
		if k.watched("o", "t4")[0] {
			t.Fatal("a refused Add left its token watched")
		}
		k.add("o", row("t4", "s3", "a", "bob")) // bob has his own count
		k.add("p", row("t4", "s3", "a", "alice"))
		if _, err := k.s.Remove(ctx, "o", "s1", "a"); err != nil {
			t.Fatal(err)
		}
		k.add("o", row("t5", "s1", "c", "alice"))
		if _, err := k.s.Reap(ctx, "o", "s1"); err != nil {
			t.Fatal(err)
		}
		k.add("o", row("t6", "s4", "a", "alice"))
		k.add("o", row("t7", "s4", "b", "alice"))
		_, err = k.s.Add(ctx, "o", row("t8", "s4", "c", "alice"))
		wantCode(t, "alice's Add after reap filled the limit again", err, fault.CodeTooManySubscriptions)
	})

	t.Run("reap drops a socket's rows, and only its rows", func(t *testing.T) {
		k := mk(t, interest.Config{})
		k.add("o", row("a", "s1", "1", "alice"))
		k.add("o", row("b", "s1", "2", "alice"))
		k.add("o", row("b", "s2", "1", "bob"))
		g := k.gen("o")
		g2, err := k.s.Reap(ctx, "o", "s1")
		if err != nil || g2 <= g {
			t.Fatalf("Reap = %d, %v; want a generation above %d", g2, err, g)
		}
		if got, want := k.watched("o", "a", "b"), []bool{false, true}; !cmp.Equal(got, want) {
			t.Fatalf("Watched = %v, want %v", got, want)
		}
		if got := k.rows("o", "a", "b"); !cmp.Equal(got, []string{"s2/1@b"}) {
			t.Fatalf("Rows = %v, want s2's only", got)
		}
		g3, err := k.s.Reap(ctx, "o", "s1")
		if err != nil || g3 != g2 {
			t.Fatalf("second Reap = %d, %v; want the generation unchanged at %d", g3, err, g2)
		}
		if g, err := k.s.Reap(ctx, "nobody", "s1"); err != nil || g != 0 {
			t.Fatalf("Reap under an unknown owner = %d, %v; want 0, nil", g, err)
		}
	})

	t.Run("a row is readable whenever its token is watched, under concurrent writers", func(t *testing.T) {
		k := mk(t, interest.Config{})
		const writers, each = 4, 30
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var bad error
		var badOnce sync.Once
		// Each writer files rows under fresh tokens; readers check each token it is about to
		// file: whenever Watched says yes, Rows must find a row.
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if _, err := k.s.Add(ctx, "o", row(fmt.Sprintf("w%d/%d", w, i), fmt.Sprintf("s%d", w), fmt.Sprint(i), fmt.Sprintf("id%d", w))); err != nil {
						badOnce.Do(func() { bad = err })
						return
					}
				}
			}()
		}
		var rg sync.WaitGroup
		for w := range writers {
			rg.Add(1)
			go func() {
				defer rg.Done()
				for i := 0; ; i = (i + 1) % each {
					select {
					case <-stop:
						return
					default:
					}
					tok := fmt.Sprintf("w%d/%d", w, i)
					ws, err := k.s.Watched(ctx, "o", []string{tok})
					if err != nil {
						badOnce.Do(func() { bad = err })
						return
					}
					if ws[0] {
						rs, err := k.s.Rows(ctx, "o", []string{tok})
						if err == nil && len(rs) == 0 {
							err = fmt.Errorf("token %s is watched but has no rows", tok)
						}
						if err != nil {
							badOnce.Do(func() { bad = err })
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		rg.Wait()
		if bad != nil {
			t.Fatal(bad)
		}
	})

	t.Run("a live socket keeps its rows; a dead one's expire", func(t *testing.T) {
		k := mk(t, interest.Config{TTL: suiteTTL})
		k.add("o", row("shared", "live", "1", "alice"))
		k.add("o", row("shared", "dead", "1", "bob"))
		k.add("o", row("only-dead", "dead", "2", "bob"))
		// "live" refreshes as a live node would; "dead" never does.
		refreshCtx, stopRefresh := context.WithCancel(ctx)
		done := make(chan struct{})
		var held []int
		var heldMu sync.Mutex
		go func() {
			defer close(done)
			tick := time.NewTicker(suiteTTL / 4)
			defer tick.Stop()
			for {
				select {
				case <-refreshCtx.Done():
					return
				case <-tick.C:
					n, err := k.s.Refresh(ctx, "o", "live")
					heldMu.Lock()
					if err != nil {
						n = -1
					}
					held = append(held, n)
					heldMu.Unlock()
				}
			}
		}()
		defer func() { stopRefresh(); <-done }()

		eventually(t, 5*suiteTTL, "the dead socket's row under the shared token is still read", func() bool {
			return cmp.Equal(k.rows("o", "shared", "only-dead"), []string{"live/1@shared"})
		})
		eventually(t, 5*suiteTTL, "the dead socket's own token is still watched after the live socket's refreshes", func() bool {
			return !k.watched("o", "only-dead")[0]
		})
		// Well past the TTL, the live socket's row is still there.
		time.Sleep(2 * suiteTTL)
		if got := k.rows("o", "shared"); !cmp.Equal(got, []string{"live/1@shared"}) {
			t.Fatalf("after %v of refreshes Rows = %v, want the live socket's", 2*suiteTTL, got)
		}
		stopRefresh()
		<-done
		heldMu.Lock()
		for _, n := range held {
			if n != 1 {
				t.Fatalf("Refresh answers %v, want 1 each time (the live socket holds one row)", held)
			}
		}
		heldMu.Unlock()
		if n, err := k.s.Refresh(ctx, "o", "dead"); err != nil || n != 0 {
			t.Fatalf("Refresh of the reaped socket = %d, %v; want 0: its rows must be added again", n, err)
		}
		// bob's count went with his rows.
		k2 := mk(t, interest.Config{TTL: suiteTTL, MaxPerIdentity: 1})
		k2.add("o", row("t", "gone", "1", "carol"))
		eventually(t, 5*suiteTTL, "carol's expired row still counts against her limit", func() bool {
			_, err := k2.s.Add(ctx, "o", row("t", "new", "1", "carol"))
			return err == nil
		})
	})

	t.Run("rows past their socket's deadline are gone to readers before any write reaps them", func(t *testing.T) {
		k := mk(t, interest.Config{TTL: suiteTTL})
		k.add("quiet", row("t", "dead", "1", "bob"))
		// Nobody writes under "quiet" again, so nothing reaps the row; only the deadline can
		// hide it. The keys' own TTL (twice suiteTTL on Redis) has not run out when Rows asks.
		time.Sleep(suiteTTL + suiteTTL/4)
		if got := k.rows("quiet", "t"); len(got) != 0 {
			t.Fatalf("Rows past the deadline = %v, want none", got)
		}
	})

	t.Run("the generation outlives the rows", func(t *testing.T) {
		k := mk(t, interest.Config{TTL: suiteTTL / 2, GenerationTTL: time.Hour})
		k.add("o", row("t", "s", "1", "alice"))
		g := k.add("o", row("t", "s", "2", "alice"))
		eventually(t, 10*suiteTTL, "the rows did not expire", func() bool { return len(k.rows("o", "t")) == 0 })
		// Let the keys' own TTL pass too (twice the sockets' TTL on Redis).
		time.Sleep(suiteTTL + 100*time.Millisecond)
		if got := k.gen("o"); got < g {
			t.Fatalf("generation after the rows expired = %d, want at least %d", got, g)
		}
		if g2 := k.add("o", row("t", "s2", "1", "alice")); g2 <= g {
			t.Fatalf("generation of the next Add = %d, want above %d: a cache tagged %d must not look current", g2, g, g)
		}
	})

	t.Run("a probe answers the generation and which tokens are watched; a stamp only raises the mark", func(t *testing.T) {
		k := mk(t, interest.Config{})
		ctx := context.Background()
		if g, w, err := k.s.Probe(ctx, "o", []string{"a", "b"}); err != nil || g != 0 || fmt.Sprint(w) != "[false false]" {
			t.Fatalf("Probe of an owner with no state = %d, %v, %v; want 0, [false false]", g, w, err)
		}
		if m, err := k.s.Mark(ctx, "o"); err != nil || m != 0 {
			t.Fatalf("Mark before any stamp = %d, %v; want 0", m, err)
		}
		g := k.add("o", row("a", "s", "1", "alice"))
		if got, w, err := k.s.Probe(ctx, "o", []string{"b", "a", ""}); err != nil || got != g || fmt.Sprint(w) != "[false true false]" {
			t.Fatalf("Probe = %d, %v, %v; want %d, [false true false]", got, w, err, g)
		}
		for _, st := range []struct{ stamp, want uint64 }{{0x10, 0x10}, {0x0f, 0x10}, {1 << 40, 1 << 40}, {0xffff_ffff_ffff_fff0, 0xffff_ffff_ffff_fff0}} {
			got, w, err := k.s.Stamp(ctx, "o", st.stamp, []string{"a"})
			if err != nil || got != g || fmt.Sprint(w) != "[true]" {
				t.Fatalf("Stamp(%#x) = %d, %v, %v; want the generation %d, [true]", st.stamp, got, w, err, g)
			}
			if m, err := k.s.Mark(ctx, "o"); err != nil || m != st.want {
				t.Fatalf("Mark after Stamp(%#x) = %#x, %v; want %#x", st.stamp, m, err, st.want)
			}
		}
		if g2 := k.add("o", row("b", "s", "2", "alice")); g2 == g {
			t.Fatal("Add after stamps did not move the generation")
		}
		if _, _, err := k.s.Probe(ctx, "o", []string{"x\x00y"}); !errors.Is(err, interest.ErrBadArgument) {
			t.Fatalf("Probe of a token with NUL = %v, want ErrBadArgument", err)
		}
	})

	t.Run("sockets lists the live holders of an owner", func(t *testing.T) {
		k := mk(t, interest.Config{TTL: suiteTTL})
		ctx := context.Background()
		k.add("o", row("a", "s1", "1", "alice"))
		k.add("o", row("b", "s2", "1", "bob"))
		k.add("o", row("b", "s2", "2", "bob"))
		k.add("other", row("a", "s3", "1", "carol"))
		got, err := k.s.Sockets(ctx, "o")
		slices.Sort(got)
		if err != nil || !slices.Equal(got, []string{"s1", "s2"}) {
			t.Fatalf("Sockets = %v, %v; want [s1 s2]", got, err)
		}
		if _, err := k.s.Reap(ctx, "o", "s1"); err != nil {
			t.Fatal(err)
		}
		if got, err := k.s.Sockets(ctx, "o"); err != nil || !slices.Equal(got, []string{"s2"}) {
			t.Fatalf("Sockets after reaping s1 = %v, %v; want [s2]", got, err)
		}
		eventually(t, 10*suiteTTL, "a socket past its deadline is still listed", func() bool {
			got, err := k.s.Sockets(ctx, "o")
			return err == nil && len(got) == 0
		})
	})

	t.Run("bad arguments are refused", func(t *testing.T) {
		k := mk(t, interest.Config{})
		for name, r := range map[string]interest.Row{
			"empty socket":   {Token: "t", Sub: "a", Identity: "i", Node: "n"},
			"empty sub":      {Token: "t", Socket: "s", Identity: "i", Node: "n"},
			"empty identity": {Token: "t", Socket: "s", Sub: "a", Node: "n"},
			"empty node":     {Token: "t", Socket: "s", Sub: "a", Identity: "i"},
			"NUL in token":   {Token: "t\x00", Socket: "s", Sub: "a", Identity: "i", Node: "n"},
			"NUL in sub":     {Token: "t", Socket: "s", Sub: "a\x00b", Identity: "i", Node: "n"},
		} {
			if _, err := k.s.Add(ctx, "o", r); !errors.Is(err, interest.ErrBadArgument) {
				t.Errorf("%s: Add err = %v, want ErrBadArgument", name, err)
			}
		}
		if _, err := k.s.Add(ctx, "", row("t", "s", "a", "i")); !errors.Is(err, interest.ErrBadArgument) {
			t.Errorf("empty owner: Add err = %v, want ErrBadArgument", err)
		}
		if k.watched("o", "t")[0] {
			t.Error("a refused Add left its token watched")
		}
	})
}
