package channel

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/heraldrt/herald/internal/bus"
	"github.com/heraldrt/herald/internal/stream"
)

// TestPropertyAgainstBruteForce runs random programs of subscribes, unsubscribes and publishes
// over a small alphabet, so that names and patterns collide often, and checks each publication
// against a model:
//
//   - it reaches exactly the live subscriptions bruteMatch accepts;
//   - its position follows the channel's last one, or starts a new epoch at 1 when the hub
//     held no state;
//   - a channel that some live subscription has subscribed to exactly or received a match from
//     is still held, in the same epoch;
//   - a channel that no live pattern matches is forgotten after its publication.
//
// With a history (of propertyHistory publications), a channel once published to keeps its
// epoch whoever holds it (the test runs well within the history's age), and a subscription
// that resumes from any position of it is replayed exactly the publications after it that its
// event filter passes when the history holds them all, or else is given one gap for them.
func TestPropertyAgainstBruteForce(t *testing.T) {
	for _, withHistory := range []bool{false, true} {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("history=%v/seed=%d", withHistory, seed), func(t *testing.T) {
				runProgram(t, rand.New(rand.NewPCG(seed, 0x5eed)), 2500, withHistory)
			})
		}
	}
}

// propertyHistory is the history's size in the property test: small, so that resumes reach
// past it often.
const propertyHistory = 8

type modelSub struct {
	glob, event string
	unsub       func()
}

func runProgram(t *testing.T, rng *rand.Rand, steps int, withHistory bool) {
	h := testHub(t, counterEpochs(), 0)
	if withHistory {
		var err error
		h, err = New(Config{Bus: bus.NewMemory(), Broker: NewMemoryBroker(MemoryBrokerConfig{NewEpoch: counterEpochs(),
			History: HistoryConfig{Size: propertyHistory}})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
	}
	published := map[string][]got{} // with history: each channel's publications, in order
	r := &recorder{}
	live := map[string]*modelSub{}
	heldBy := map[string]map[string]bool{} // channel -> live subs that hold it
	lastEpoch := map[string]string{}       // channel -> epoch of its last publication or exact subscribe
	epochsSeen := map[string]bool{}
	next := 0

	for step := range steps {
		switch op := rng.IntN(10); {
		case op == 9 && withHistory: // resume
			name := randomName(rng)
			pubs := published[name]
			if len(pubs) == 0 {
				continue
			}
			event := randomEvent(rng)
			k := rng.IntN(len(pubs) + 1)
			from := stream.ChannelPosition(pubs[0].Pos.Epoch, 0)
			if k > 0 {
				from = pubs[k-1].Pos
			}
			rr := &anyRecorder{}
			start, unsub, err := h.SubscribeFrom(rr, "resume", mustPattern(t, name, event), from)
			if err != nil {
				t.Fatal(err)
			}
			unsub()
			head := pubs[len(pubs)-1].Pos
			var want []string
			if k < len(pubs)-propertyHistory {
				lost := 0
				if event == "" {
					lost = len(pubs) - k
				}
				want = append(want, fmt.Sprintf("gap %s:%d..%s lost %d history_expired", head.Epoch, k+1, head, lost))
			} else {
				for _, p := range pubs[k:] {
					if event == "" || p.Event == event {
						want = append(want, p.Pos.String())
					}
				}
			}
			for _, it := range start.Replay {
				rr.Push("resume", it)
			}
			if got := rr.take(); start.Pos != head || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: resume %s %q from %v: start %v, replay %q; want start %v, replay %q", step, name, event, from, start.Pos, got, head, want)
			}
		case op < 3: // subscribe
			glob, event := randomPattern(rng), randomEvent(rng)
			id := "s" + strconv.Itoa(next)
			next++
			pos, unsub, _ := h.Subscribe(r, id, mustPattern(t, glob, event))
			live[id] = &modelSub{glob, event, unsub}
			if !strings.Contains(glob, "*") {
				if e, ok := lastEpoch[glob]; ok && len(heldBy[glob]) > 0 && pos.Epoch != e {
					t.Fatalf("step %d: subscribe to held %s at %v, want epoch %s", step, glob, pos, e)
				}
				lastEpoch[glob] = pos.Epoch
				epochsSeen[pos.Epoch] = true
				hold(heldBy, glob, id)
			} else if !pos.IsZero() {
				t.Fatalf("step %d: pattern subscribe returned %v, want zero", step, pos)
			}
		case op < 5: // unsubscribe
			if len(live) == 0 {
				continue
			}
			id := pickKey(rng, live)
			live[id].unsub()
			delete(live, id)
			for _, subs := range heldBy {
				delete(subs, id)
			}
		default: // publish
			name, event := randomName(rng), randomEvent(rng)
			before, held := h.Head(name)
			if len(heldBy[name]) > 0 && (!held || before.Epoch != lastEpoch[name]) {
				t.Fatalf("step %d: %s is held by %v but Head = %v, %v; want epoch %s", step, name, heldBy[name], before, held, lastEpoch[name])
			}
			pos := mustPublish(t, h, name, event, "1")
			pubs := published[name]
			switch {
			case held && (pos.Epoch != before.Epoch || pos.Offset != before.Offset+1):
				t.Fatalf("step %d: publish to %s at %v after head %v", step, name, pos, before)
			case !held && len(pubs) > 0:
				// Only with history: the epoch outlived the hub's state.
				if last := pubs[len(pubs)-1].Pos; pos.Epoch != last.Epoch || pos.Offset != last.Offset+1 {
					t.Fatalf("step %d: publish to unheld %s at %v, want it after %v: its history keeps the epoch", step, name, pos, last)
				}
			case !held && (pos.Offset != 1 || epochsSeen[pos.Epoch]):
				t.Fatalf("step %d: publish to unheld %s at %v, want a new epoch at 1", step, name, pos)
			}
			if withHistory {
				published[name] = append(pubs, got{Channel: name, Event: event, Pos: pos})
			}
			epochsSeen[pos.Epoch] = true
			lastEpoch[name] = pos.Epoch

			var want, gotSubs []string
			anyMatch := false
			for id, s := range live {
				if bruteMatch(s.glob, "", name, "") {
					anyMatch = true
					hold(heldBy, name, id)
				}
				if bruteMatch(s.glob, s.event, name, event) {
					want = append(want, id)
				}
			}
			for _, g := range r.take() {
				gotSubs = append(gotSubs, g.Sub)
				if g.Pos != pos || g.Channel != name || g.Event != event {
					t.Fatalf("step %d: %s got %+v, want %s %q at %v", step, g.Sub, g, name, event, pos)
				}
			}
			if diff := cmp.Diff(sortedCopy(want), sortedCopy(gotSubs)); diff != "" {
				t.Fatalf("step %d: publish to %s %q reached (-want +got):\n%s", step, name, event, diff)
			}
			if _, stillHeld := h.Head(name); !anyMatch && stillHeld {
				t.Fatalf("step %d: %s is still held though no live pattern matches it", step, name)
			}
		}
	}
	for _, s := range live {
		s.unsub()
	}
	if s := h.Stats(); s.Channels != 0 || s.Tokens != 0 || s.Subscriptions != 0 {
		t.Errorf("stats %+v after every unsubscribe, want everything gone", s)
	}
}

func hold(heldBy map[string]map[string]bool, channel, id string) {
	if heldBy[channel] == nil {
		heldBy[channel] = map[string]bool{}
	}
	heldBy[channel][id] = true
}

func pickKey(rng *rand.Rand, m map[string]*modelSub) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return sortedCopy(keys)[rng.IntN(len(keys))]
}

var alphabet = []string{"a", "b", "c"}

func randomName(rng *rand.Rand) string {
	segs := make([]string, 1+rng.IntN(4))
	for i := range segs {
		segs[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return strings.Join(segs, "/")
}

func randomPattern(rng *rand.Rand) string {
	segs := make([]string, 1+rng.IntN(4))
	for i := range segs {
		switch {
		case i == len(segs)-1 && rng.IntN(4) == 0:
			segs[i] = "**"
		case rng.IntN(4) == 0:
			segs[i] = "*"
		default:
			segs[i] = alphabet[rng.IntN(len(alphabet))]
		}
	}
	return strings.Join(segs, "/")
}

func randomEvent(rng *rand.Rand) string {
	return []string{"", "", "x", "y"}[rng.IntN(4)]
}
