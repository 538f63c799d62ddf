package delivery

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A script drives one Lanes from a single goroutine and records what the writer would write.
// Each batch the writer takes is recorded item by item, then "--".
type script struct {
	t   *testing.T
	l   *Lanes
	out []string
	b   Batch
}

type op func(s *script)

// push pushes a data frame of wire size 1 and checks whether it was admitted.
func push(key string, pos int, want bool) op { return pushN(key, pos, 1, want) }

// pushN pushes a data frame of the given wire size and checks whether it was admitted.
func pushN(key string, pos, size int, want bool) op {
	return func(s *script) {
		s.t.Helper()
		if got := s.l.PushData(frame(key, strconv.Itoa(pos), size)); got != want {
			s.t.Fatalf("PushData(%s@%d, %d bytes) = %v, want %v", key, pos, size, got, want)
		}
	}
}

// pushMany pushes positions from..to (inclusive) for key and checks each admission.
func pushMany(key string, from, to int, want bool) op {
	return func(s *script) {
		for p := from; p <= to; p++ {
			push(key, p, want)(s)
		}
	}
}

func ctl(body string) op {
	return func(s *script) {
		s.t.Helper()
		if err := s.l.PushControl([]byte(body)); err != nil {
			s.t.Fatalf("PushControl(%q): %v", body, err)
		}
	}
}

// next takes one batch, which must exist.
func next() op {
	return func(s *script) {
		s.t.Helper()
		if !s.l.TryNext(&s.b) {
			s.t.Fatalf("TryNext found nothing, want a batch")
		}
		s.record()
	}
}

// drain takes batches until there are none.
func drain() op {
	return func(s *script) {
		for s.l.TryNext(&s.b) {
			s.record()
		}
	}
}

func forget(key string) op { return func(s *script) { s.l.Forget(key) } }

func (s *script) record() {
	s.t.Helper()
	for _, it := range s.b.Items {
		if it.Kind == KindMarker {
			if got, want := string(it.Body), string(encodeMarker(nil, *it.Marker)); got != want {
				s.t.Fatalf("marker body %q does not encode its Marker field (%q)", got, want)
			}
		}
		s.out = append(s.out, render(it))
	}
	s.out = append(s.out, "--")
}

func run(t *testing.T, cfg Config, ops []op) []string {
	t.Helper()
	s := &script{t: t, l: newLanes(t, cfg)}
	for _, o := range ops {
		o(s)
	}
	return s.out
}

// TestMarkerContract has one subtest per rule of the package contract.
func TestMarkerContract(t *testing.T) {
	small := Config{MaxDataFrames: 2, MaxBatchFrames: 8}
	tests := []struct {
		name string
		cfg  Config
		ops  []op
		want []string
	}{
		{
			name: "frames within bounds are admitted in order",
			cfg:  small,
			ops:  []op{push("a", 1, true), push("b", 1, true), drain()},
			want: []string{"d:a@1", "d:b@1", "--"},
		},
		{
			name: "first loss opens a marker after the data admitted before it",
			cfg:  small,
			ops:  []op{push("a", 1, true), push("a", 2, true), push("a", 3, false), drain()},
			want: []string{"d:a@1", "d:a@2", "--", "m:a lane_full 3..3 1", "--"},
		},
		{
			name: "later losses extend the range, first stays and last wins",
			cfg:  small,
			ops:  []op{push("a", 1, true), push("a", 2, true), pushMany("a", 3, 7, false), drain()},
			want: []string{"d:a@1", "d:a@2", "--", "m:a lane_full 3..7 5", "--"},
		},
		{
			name: "a key with an unsent marker loses frames even when the lane has room",
			cfg:  Config{MaxDataFrames: 2, MaxBatchFrames: 1},
			ops: []op{
				push("a", 1, true), push("b", 1, true), push("a", 2, false),
				next(),              // takes a@1: the lane has room again
				push("a", 3, false), // but a's gap is open
				push("b", 2, true),  // while b is unaffected
				drain(),
			},
			want: []string{"d:a@1", "--", "d:b@1", "--", "m:a lane_full 2..3 2", "--", "d:b@2", "--"},
		},
		{
			name: "marker waits for every frame admitted before the loss",
			cfg:  Config{MaxDataFrames: 3, MaxBatchFrames: 1},
			ops: []op{
				push("a", 1, true), push("b", 1, true), push("c", 1, true), push("a", 2, false),
				next(), next(), // a@1 and b@1 taken, c@1 still queued: not ready
				push("d", 1, true), push("d", 2, true), // admitted after the loss: no barrier for a
				next(), // c@1: barrier reached
				next(), // the marker now comes before d's later data
				drain(),
			},
			want: []string{
				"d:a@1", "--", "d:b@1", "--", "d:c@1", "--", "m:a lane_full 2..2 1", "--",
				"d:d@1", "--", "d:d@2", "--",
			},
		},
		{
			name: "after its marker is written a key is admitted again",
			cfg:  small,
			ops: []op{
				push("a", 1, true), push("a", 2, true), push("a", 3, false),
				drain(), push("a", 4, true), drain(),
			},
			want: []string{"d:a@1", "d:a@2", "--", "m:a lane_full 3..3 1", "--", "d:a@4", "--"},
		},
		{
			name: "a new loss after the marker was written opens a new marker",
			cfg:  small,
			ops: []op{
				push("a", 1, true), push("a", 2, true), push("a", 3, false), drain(),
				push("a", 4, true), push("a", 5, true), push("a", 6, false), push("a", 7, false), drain(),
			},
			want: []string{
				"d:a@1", "d:a@2", "--", "m:a lane_full 3..3 1", "--",
				"d:a@4", "d:a@5", "--", "m:a lane_full 6..7 2", "--",
			},
		},
		{
			name: "one key's marker never suppresses another's",
			cfg:  small,
			ops: []op{
				push("a", 1, true), push("b", 1, true),
				push("a", 2, false), push("b", 2, false), push("c", 1, false), push("a", 3, false),
				drain(),
			},
			want: []string{
				"d:a@1", "d:b@1", "--",
				"m:a lane_full 2..3 2", "m:b lane_full 2..2 1", "m:c lane_full 1..1 1", "--",
			},
		},
		{
			name: "outstanding markers take no data-lane capacity",
			cfg:  Config{MaxDataFrames: 2, MaxBatchFrames: 2},
			ops: []op{
				push("a", 1, true), push("a", 2, true), push("b", 1, false), push("c", 1, false),
				next(),                                 // a's frames; the markers are not ready yet
				push("d", 1, true), push("d", 2, true), // the whole lane, beside two open markers
				push("d", 3, false),
				drain(),
			},
			want: []string{
				"d:a@1", "d:a@2", "--", "m:b lane_full 1..1 1", "m:c lane_full 1..1 1", "--",
				"d:d@1", "d:d@2", "--", "m:d lane_full 3..3 1", "--",
			},
		},
		{
			name: "byte bound: a frame that does not fit the free bytes is lost",
			cfg:  Config{MaxDataBytes: 10},
			ops:  []op{pushN("a", 1, 6, true), pushN("a", 2, 5, false), pushN("b", 1, 4, true), drain()},
			want: []string{"d:a@1", "d:b@1", "--", "m:a lane_full 2..2 1", "--"},
		},
		{
			name: "a frame exactly the lane's bytes is admitted",
			cfg:  Config{MaxDataBytes: 10},
			ops:  []op{pushN("a", 1, 10, true), drain()},
			want: []string{"d:a@1", "--"},
		},
		{
			name: "a frame larger than the whole lane is lost as too large, ready at once",
			cfg:  Config{MaxDataBytes: 10},
			ops:  []op{pushN("a", 1, 11, false), drain(), pushN("a", 2, 3, true), drain()},
			want: []string{"m:a too_large 1..1 1", "--", "d:a@2", "--"},
		},
		{
			name: "the reason stays the one that opened the gap",
			cfg:  Config{MaxDataFrames: 1, MaxDataBytes: 10},
			ops:  []op{pushN("b", 1, 1, true), pushN("a", 1, 11, false), pushN("a", 2, 1, false), drain()},
			want: []string{"d:b@1", "--", "m:a too_large 1..2 2", "--"},
		},
		{
			name: "a batch is control, then ready markers, then data",
			cfg:  Config{MaxDataFrames: 2},
			ops: []op{
				push("a", 1, true), push("a", 2, true), push("a", 3, false),
				ctl("x"), next(), // marker not ready: its barrier is a@2
				push("b", 1, true), ctl("y"), next(),
			},
			want: []string{"c:x", "d:a@1", "d:a@2", "--", "c:y", "m:a lane_full 3..3 1", "d:b@1", "--"},
		},
		{
			name: "a ready marker that does not fit the batch waits, still extending",
			cfg:  Config{MaxDataFrames: 1, MaxBatchFrames: 2},
			ops: []op{
				push("a", 1, true), push("a", 2, false), next(), // barrier reached
				ctl("x"), ctl("y"), next(), // control fills the batch: the marker waits
				push("a", 3, false), // and extends: the encoding is current at write time
				next(),
			},
			want: []string{"d:a@1", "--", "c:x", "c:y", "--", "m:a lane_full 2..3 2", "--"},
		},
		{
			name: "a ready marker waits for the batch byte budget too",
			cfg:  Config{MaxDataFrames: 1, MaxBatchBytes: 8},
			ops: []op{
				push("a", 1, true), push("a", 2, false), next(),
				ctl("12345678"), next(),
				next(),
			},
			want: []string{"d:a@1", "--", "c:12345678", "--", "m:a lane_full 2..2 1", "--"},
		},
		{
			name: "forget drops the pending marker and the key is admitted again",
			cfg:  small,
			ops: []op{
				push("a", 1, true), push("a", 2, true), push("a", 3, false), push("b", 1, false),
				forget("a"), drain(), push("a", 9, true), drain(),
			},
			want: []string{"d:a@1", "d:a@2", "--", "m:b lane_full 1..1 1", "--", "d:a@9", "--"},
		},
		{
			name: "forget of a key without a marker is a no-op",
			cfg:  small,
			ops:  []op{push("a", 1, true), forget("a"), forget("zz"), drain()},
			want: []string{"d:a@1", "--"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, tt.cfg, tt.ops)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("written (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBatchBudget(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ops  []op
		want []string
	}{
		{
			name: "frames",
			cfg:  Config{MaxBatchFrames: 2},
			ops:  []op{ctl("x"), push("a", 1, true), push("a", 2, true), drain()},
			want: []string{"c:x", "d:a@1", "--", "d:a@2", "--"},
		},
		{
			name: "bytes",
			cfg:  Config{MaxBatchBytes: 10},
			ops:  []op{pushN("a", 1, 6, true), pushN("a", 2, 4, true), pushN("a", 3, 1, true), drain()},
			want: []string{"d:a@1", "d:a@2", "--", "d:a@3", "--"},
		},
		{
			name: "a frame larger than the budget goes alone",
			cfg:  Config{MaxBatchBytes: 10},
			ops:  []op{pushN("a", 1, 3, true), pushN("a", 2, 30, true), pushN("a", 3, 3, true), drain()},
			want: []string{"d:a@1", "--", "d:a@2", "--", "d:a@3", "--"},
		},
		{
			name: "a control frame larger than the budget goes alone",
			cfg:  Config{MaxBatchBytes: 4},
			ops:  []op{ctl("123456"), ctl("1"), drain()},
			want: []string{"c:123456", "--", "c:1", "--"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, tt.cfg, tt.ops)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("written (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPushControl(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		queued  []string
		push    string
		wantErr *ControlFullError
	}{
		{name: "admits", cfg: Config{MaxControlFrames: 2, MaxControlBytes: 8}, queued: []string{"abc"}, push: "defgh"},
		{
			name: "frame bound", cfg: Config{MaxControlFrames: 2, MaxControlBytes: 100},
			queued: []string{"a", "b"}, push: "c",
			wantErr: &ControlFullError{Size: 1, Frames: 2, Bytes: 2, MaxFrames: 2, MaxBytes: 100},
		},
		{
			name: "byte bound", cfg: Config{MaxControlFrames: 10, MaxControlBytes: 8},
			queued: []string{"abcde"}, push: "fghi",
			wantErr: &ControlFullError{Size: 4, Frames: 1, Bytes: 5, MaxFrames: 10, MaxBytes: 8},
		},
		{
			name: "larger than the lane", cfg: Config{MaxControlBytes: 8},
			push:    "123456789",
			wantErr: &ControlFullError{Size: 9, MaxFrames: DefaultMaxControlFrames, MaxBytes: 8},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLanes(t, tt.cfg)
			for _, q := range tt.queued {
				if err := l.PushControl([]byte(q)); err != nil {
					t.Fatalf("PushControl(%q): %v", q, err)
				}
			}
			err := l.PushControl([]byte(tt.push))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("PushControl(%q) = %v, want nil", tt.push, err)
				}
				return
			}
			var full *ControlFullError
			if !errors.As(err, &full) || !errors.Is(err, ErrControlFull) {
				t.Fatalf("PushControl(%q) = %v, want a *ControlFullError", tt.push, err)
			}
			if diff := cmp.Diff(tt.wantErr, full); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if got := l.Stats().ControlRefused; got != 1 {
				t.Errorf("ControlRefused = %d, want 1", got)
			}
		})
	}
}

func TestControlRoom(t *testing.T) {
	tests := []struct {
		name          string
		queued        []string
		frames, bytes int
		want          bool
	}{
		{"empty", nil, 2, 8, true},
		{"exactly the room left", []string{"ab"}, 3, 6, true},
		{"too few frames left", []string{"a", "b"}, 3, 1, false},
		{"too few bytes left", []string{"abcde"}, 1, 4, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLanes(t, Config{MaxControlFrames: 4, MaxControlBytes: 8})
			for _, q := range tt.queued {
				if err := l.PushControl([]byte(q)); err != nil {
					t.Fatalf("PushControl(%q): %v", q, err)
				}
			}
			ok, wait := l.ControlRoom(tt.frames, tt.bytes)
			if ok != tt.want || (wait == nil) != ok {
				t.Fatalf("ControlRoom(%d, %d) = %v, %v; want %v with a channel only when false", tt.frames, tt.bytes, ok, wait, tt.want)
			}
		})
	}

	t.Run("the writer taking control frames ends the wait", func(t *testing.T) {
		l := newLanes(t, Config{MaxControlFrames: 1})
		if err := l.PushControl([]byte("a")); err != nil {
			t.Fatal(err)
		}
		ok, wait := l.ControlRoom(1, 1)
		if ok {
			t.Fatal("ControlRoom reports room in a full lane")
		}
		// Data alone does not end it: only control frames leaving the lane make room.
		l.PushData(frame("k", "1", 1))
		select {
		case <-wait:
			t.Fatal("the wait ended before any control frame left the lane")
		default:
		}
		var b Batch
		if !l.TryNext(&b) {
			t.Fatal("TryNext found nothing")
		}
		select {
		case <-wait:
		default:
			t.Fatal("the wait did not end when the writer took the control frame")
		}
		if ok, _ := l.ControlRoom(1, 1); !ok {
			t.Error("no room after the writer emptied the lane")
		}
	})

	t.Run("close ends the wait", func(t *testing.T) {
		l := newLanes(t, Config{MaxControlFrames: 1})
		if err := l.PushControl([]byte("a")); err != nil {
			t.Fatal(err)
		}
		_, wait := l.ControlRoom(1, 1)
		l.Close()
		select {
		case <-wait:
		default:
			t.Fatal("Close did not end the wait")
		}
		if ok, _ := l.ControlRoom(1, 1); !ok {
			t.Error("closed lanes report no room: a waiter would wait forever")
		}
	})
}

// TestTryPushData: a frame that fits is queued; one that does not is neither queued nor lost
// into a marker, and the caller is handed a wait that ends when the writer takes data frames
// (not control frames) or at Close; a frame larger than the lane is refused; one for a key with
// an open gap joins the gap, as PushData's does.
func TestTryPushData(t *testing.T) {
	t.Run("fits, then waits for the writer", func(t *testing.T) {
		l := newLanes(t, Config{MaxDataFrames: 2, MaxDataBytes: 10})
		for i, f := range []Frame{frame("k", "1", 4), frame("k", "2", 4)} {
			if wait, err := l.TryPushData(f); wait != nil || err != nil {
				t.Fatalf("frame %d: TryPushData = %v, %v; want it queued", i, wait, err)
			}
		}
		wait, err := l.TryPushData(frame("k", "3", 4))
		if wait == nil || err != nil {
			t.Fatalf("TryPushData into a full lane = %v, %v; want a wait", wait, err)
		}
		if st := l.Stats(); st.Markers != 0 || st.Lost(ReasonLaneFull) != 0 {
			t.Errorf("a frame that waits was lost: %+v", st)
		}
		if err := l.PushControl([]byte("c")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wait:
			t.Fatal("the wait ended before any data frame left the lane")
		default:
		}
		var b Batch
		if !l.TryNext(&b) {
			t.Fatal("TryNext found nothing")
		}
		select {
		case <-wait:
		default:
			t.Fatal("the wait did not end when the writer took data frames")
		}
		if wait, err := l.TryPushData(frame("k", "3", 4)); wait != nil || err != nil {
			t.Fatalf("TryPushData after the writer drained = %v, %v; want it queued", wait, err)
		}
		var got []string
		for l.TryNext(&b) {
			for _, it := range b.Items {
				got = append(got, render(it))
			}
		}
		if want := []string{"d:k@3"}; !slices.Equal(got, want) {
			t.Errorf("written %v, want %v", got, want)
		}
	})
	t.Run("too large", func(t *testing.T) {
		l := newLanes(t, Config{MaxDataBytes: 10})
		if wait, err := l.TryPushData(frame("k", "1", 11)); wait != nil || !errors.Is(err, ErrDataTooLarge) {
			t.Fatalf("TryPushData of a frame larger than the lane = %v, %v; want ErrDataTooLarge", wait, err)
		}
	})
	t.Run("an open gap takes it", func(t *testing.T) {
		l := newLanes(t, Config{})
		l.Gap("k", "1", "2", 2, ReasonLaneFull)
		if wait, err := l.TryPushData(frame("k", "3", 4)); wait != nil || err != nil {
			t.Fatalf("TryPushData = %v, %v", wait, err)
		}
		var b Batch
		l.TryNext(&b)
		if len(b.Items) != 1 || render(b.Items[0]) != "m:k lane_full 1..3 3" {
			t.Errorf("batch %v, want the marker widened to 3", b.Items)
		}
	})
	t.Run("close ends the wait", func(t *testing.T) {
		l := newLanes(t, Config{MaxDataFrames: 1})
		l.PushData(frame("k", "1", 1))
		wait, _ := l.TryPushData(frame("k", "2", 1))
		l.Close()
		select {
		case <-wait:
		default:
			t.Fatal("Close did not end the wait")
		}
		if _, err := l.TryPushData(frame("k", "2", 1)); !errors.Is(err, ErrClosed) {
			t.Errorf("TryPushData after Close: %v, want ErrClosed", err)
		}
	})
}

func TestStalled(t *testing.T) {
	c := newClock()
	stalls := 0 // OnStall calls: one as each stall begins, none while it lasts
	l := newLanes(t, Config{MaxDataFrames: 2, MaxDataBytes: 10, MaxBatchFrames: 1, Now: c.Now, OnStall: func() { stalls++ }})
	var b Batch
	start := c.Now()
	check := func(step string, wantSince time.Time, wantOK bool, wantStalls int) {
		t.Helper()
		since, ok := l.Stalled()
		if ok != wantOK || !since.Equal(wantSince) {
			t.Fatalf("%s: Stalled() = %v, %v; want %v, %v", step, since, ok, wantSince, wantOK)
		}
		if stalls != wantStalls {
			t.Fatalf("%s: OnStall called %d times, want %d", step, stalls, wantStalls)
		}
	}

	check("new", time.Time{}, false, 0)
	l.PushData(frame("a", "1", 11))
	check("a too-large loss says nothing about speed", time.Time{}, false, 0)

	l.PushData(frame("b", "1", 1))
	l.PushData(frame("c", "1", 1))
	c.Advance(time.Second)
	l.PushData(frame("d", "1", 1))
	check("first lane_full loss", start.Add(time.Second), true, 1)

	c.Advance(time.Second)
	l.PushData(frame("d", "2", 1))
	l.PushData(frame("e", "1", 1))
	check("later losses keep the start", start.Add(time.Second), true, 1)

	l.TryNext(&b) // a's too-large marker
	l.TryNext(&b) // b@1
	check("a partial drain keeps the stall", start.Add(time.Second), true, 1)
	l.TryNext(&b) // c@1
	check("a drain that empties the data lane ends it", time.Time{}, false, 1)
	for l.TryNext(&b) { // the markers of d and e
	}

	l.PushData(frame("f", "1", 1))
	l.PushData(frame("f", "2", 1))
	c.Advance(time.Second)
	l.PushData(frame("f", "3", 1))
	check("a new overflow starts a new stall", start.Add(3*time.Second), true, 2)
	l.Close()
	check("closed", time.Time{}, false, 2)
}

func TestNextBlocksUntilWork(t *testing.T) {
	l := newLanes(t, Config{})
	done := make(chan error, 1)
	var b Batch
	go func() { done <- l.Next(context.Background(), &b) }()
	waitParked(t, l)
	if !l.PushData(frame("a", "1", 1)) {
		t.Fatal("PushData refused on an empty lane")
	}
	if err := <-done; err != nil {
		t.Fatalf("Next = %v, want nil", err)
	}
	if got, want := render(b.Items[0]), "d:a@1"; len(b.Items) != 1 || got != want {
		t.Fatalf("batch = %v, want [%s]", b.Items, want)
	}
}

// A deferred push leaves the writer parked until Wake, reports the wake-up once however many
// pushes follow, and the writer then takes them all in one batch.
func TestPushDataDeferredWakesAtWake(t *testing.T) {
	l := newLanes(t, Config{})
	done := make(chan error, 1)
	var b Batch
	go func() { done <- l.Next(context.Background(), &b) }()
	waitParked(t, l)
	ok, wake := l.PushDataDeferred(frame("a", "1", 1))
	if !ok || !wake {
		t.Fatalf("first deferred push = %v, %v; want admitted and the wake-up claimed", ok, wake)
	}
	ok, wake = l.PushDataDeferred(frame("b", "1", 1))
	if !ok || wake {
		t.Fatalf("second deferred push = %v, %v; want admitted and no second wake-up", ok, wake)
	}
	if l.PushData(frame("a", "2", 1)) != true {
		t.Fatal("PushData refused on a lane with room")
	}
	select {
	case err := <-done:
		t.Fatalf("Next returned (%v) before Wake: a deferred wake-up was made by a push", err)
	case <-time.After(50 * time.Millisecond):
	}
	l.Wake()
	if err := <-done; err != nil {
		t.Fatalf("Next = %v, want nil", err)
	}
	var got []string
	for _, it := range b.Items {
		got = append(got, render(it))
	}
	if want := "d:a@1 d:b@1 d:a@2"; strings.Join(got, " ") != want {
		t.Fatalf("batch = %v, want %s", got, want)
	}
	// With the writer not parked, nothing is claimed.
	if _, wake := l.PushDataDeferred(frame("a", "3", 1)); wake {
		t.Error("a deferred push to a writer that is not parked claimed a wake-up")
	}
}

func TestNextWakesForReadyTooLargeMarker(t *testing.T) {
	l := newLanes(t, Config{MaxDataBytes: 4})
	done := make(chan error, 1)
	var b Batch
	go func() { done <- l.Next(context.Background(), &b) }()
	waitParked(t, l)
	l.PushData(frame("a", "1", 5))
	if err := <-done; err != nil {
		t.Fatalf("Next = %v, want nil", err)
	}
	if got, want := render(b.Items[0]), "m:a too_large 1..1 1"; got != want {
		t.Fatalf("item = %s, want %s", got, want)
	}
}

func TestNextHonoursContext(t *testing.T) {
	l := newLanes(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var b Batch
	go func() { done <- l.Next(ctx, &b) }()
	waitParked(t, l)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want context.Canceled", err)
	}
	// The lanes still work after a cancelled wait.
	l.PushData(frame("a", "1", 1))
	if err := l.Next(context.Background(), &b); err != nil || len(b.Items) != 1 {
		t.Fatalf("Next after cancel = %v with %d items, want one item", err, len(b.Items))
	}
}

func TestClose(t *testing.T) {
	l := newLanes(t, Config{MaxDataFrames: 2})
	l.PushData(frame("a", "1", 3))
	l.PushData(frame("a", "2", 3))
	l.PushData(frame("a", "3", 3)) // opens a marker
	if err := l.PushControl([]byte("x")); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		var b Batch
		for {
			if err := l.Next(context.Background(), &b); err != nil {
				done <- err
				return
			}
		}
	}()
	waitParked(t, l)
	l.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close = %v, want ErrClosed", err)
	}
	l.Close() // idempotent

	if l.PushData(frame("a", "4", 1)) {
		t.Error("PushData after Close = true, want false")
	}
	if err := l.PushControl([]byte("y")); !errors.Is(err, ErrClosed) {
		t.Errorf("PushControl after Close = %v, want ErrClosed", err)
	}
	var b Batch
	if l.TryNext(&b) {
		t.Error("TryNext after Close = true, want false")
	}
	want := Stats{
		DataAdmitted: 2, DataWritten: 2, LostLaneFull: 1, ControlAdmitted: 1, ControlWritten: 1,
		MarkersEmitted: 1, Discarded: 2, // a@4 and y, pushed after Close
	}
	if diff := cmp.Diff(want, l.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestCloseDiscardsQueued(t *testing.T) {
	l := newLanes(t, Config{MaxDataFrames: 1})
	l.PushData(frame("a", "1", 3))
	l.PushData(frame("a", "2", 3))
	l.PushControl([]byte("x"))
	l.Close()
	want := Stats{DataAdmitted: 1, LostLaneFull: 1, ControlAdmitted: 1, MarkersForgotten: 1, Discarded: 2}
	if diff := cmp.Diff(want, l.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestStats(t *testing.T) {
	l := newLanes(t, Config{MaxDataFrames: 2, MaxDataBytes: 10, MaxBatchFrames: 2})
	l.PushData(frame("a", "1", 4))
	l.PushData(frame("b", "1", 5))
	l.PushData(frame("a", "2", 1))  // lane_full
	l.PushData(frame("a", "3", 1))  // joins a's lane_full marker
	l.PushData(frame("c", "1", 11)) // too_large
	l.PushData(frame("d", "1", 11)) // too_large
	l.Forget("d")
	l.PushControl([]byte("xyz"))
	want := Stats{
		DataAdmitted: 2, LostLaneFull: 2, LostTooLarge: 2, ControlAdmitted: 1, MarkersForgotten: 1,
		DataFrames: 2, DataBytes: 9, ControlFrames: 1, ControlBytes: 3, Markers: 2,
	}
	if diff := cmp.Diff(want, l.Stats()); diff != "" {
		t.Errorf("Stats after pushes (-want +got):\n%s", diff)
	}
	if got := l.Stats().QueuedBytes(); got != 12 {
		t.Errorf("QueuedBytes = %d, want 12", got)
	}
	var b Batch
	for l.TryNext(&b) {
	}
	want.DataWritten, want.ControlWritten, want.MarkersEmitted = 2, 1, 2
	want.DataFrames, want.DataBytes, want.ControlFrames, want.ControlBytes, want.Markers = 0, 0, 0, 0, 0
	if diff := cmp.Diff(want, l.Stats()); diff != "" {
		t.Errorf("Stats after drain (-want +got):\n%s", diff)
	}
	for _, r := range Reasons() {
		if got := l.Stats().Lost(r); got != 2 {
			t.Errorf("Lost(%s) = %d, want 2", r, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none means valid
	}{
		{name: "zero value but the encoder is valid", cfg: Config{EncodeMarker: encodeMarker}},
		{name: "encoder required", cfg: Config{}, want: []string{"EncodeMarker is nil"}},
		{
			name: "negative bounds",
			cfg:  Config{EncodeMarker: encodeMarker, MaxDataFrames: -1, MaxBatchBytes: -2},
			want: []string{"MaxDataFrames is -1", "MaxBatchBytes is -2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error mentioning %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want it to mention %q", err, w)
				}
			}
			if _, err := New(tt.cfg); err == nil {
				t.Errorf("New accepted a config Validate refuses")
			}
		})
	}
}

func TestRingWrapsAndGrows(t *testing.T) {
	var r ring[int]
	next, want := 0, 0
	for round := range 50 {
		for range round%7 + 1 {
			if r.len() == 40 {
				break
			}
			r.push(next, 40)
			next++
		}
		for range round % 5 {
			if r.len() == 0 {
				break
			}
			if got := r.pop(); got != want {
				t.Fatalf("pop = %d, want %d", got, want)
			}
			want++
		}
	}
	for r.len() > 0 {
		if got := r.pop(); got != want {
			t.Fatalf("pop = %d, want %d", got, want)
		}
		want++
	}
	if want != next {
		t.Fatalf("popped %d, pushed %d", want, next)
	}
	if len(r.buf) != 40 {
		t.Fatalf("ring grew to %d, want its limit 40", len(r.buf))
	}
}

// waitParked polls, with a deadline, until the writer is parked in Next.
func waitParked(t *testing.T, l *Lanes) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		parked := l.parked
		l.mu.Unlock()
		if parked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writer did not park in Next within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
