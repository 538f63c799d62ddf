package heartbeat

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestBeats: each member is beaten every interval, from the tick it was added in, and not after
// it stopped.
func TestBeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(25 * time.Second) // 25 ticks of 1 s
		start := time.Now()
		var mu sync.Mutex
		beats := map[string][]time.Duration{}
		add := func(name string) *Member {
			return w.Add(func() {
				mu.Lock()
				defer mu.Unlock()
				beats[name] = append(beats[name], time.Since(start))
			})
		}
		a := add("a")
		time.Sleep(10*time.Second + 500*time.Millisecond)
		b := add("b")
		time.Sleep(30 * time.Second) // 40.5 s
		a.Stop()
		time.Sleep(39 * time.Second) // 79.5 s
		b.Stop()
		time.Sleep(60 * time.Second)

		want := map[string][]time.Duration{
			"a": {25 * time.Second},
			// Added 10.5 s in, after the tick at 10 s: first beaten with the tick 25 s after
			// that one, half a tick early.
			"b": {35 * time.Second, 60 * time.Second},
		}
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff(want, beats); diff != "" {
			t.Errorf("beats (-want +got):\n%s", diff)
		}
	})
}

// TestIdleWheelDisarms: a wheel whose last member stopped stops its timer, and the next Add
// arms it again.
func TestIdleWheelDisarms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(time.Second)
		var mu sync.Mutex
		beats := 0 // guarded by mu
		m := w.Add(func() { mu.Lock(); beats++; mu.Unlock() })
		time.Sleep(1500 * time.Millisecond)
		m.Stop()
		time.Sleep(time.Second) // one more tick finds the wheel empty
		w.mu.Lock()
		armed := w.armed
		w.mu.Unlock()
		if armed {
			t.Error("an empty wheel kept its timer armed")
		}
		m = w.Add(func() { mu.Lock(); beats++; mu.Unlock() })
		time.Sleep(1500 * time.Millisecond)
		m.Stop()
		mu.Lock()
		defer mu.Unlock()
		if beats != 2 {
			t.Errorf("%d beats, want 2: one before the wheel emptied, one after it was armed again", beats)
		}
	})
}

// TestStopWaitsForItsBeat: Stop returns only once a beat in progress has returned. In real
// time: synctest cannot wait on a goroutine blocked on a mutex.
func TestStopWaitsForItsBeat(t *testing.T) {
	w := New(25 * time.Millisecond)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m := w.Add(func() {
		once.Do(func() { close(entered) })
		<-release
	})
	<-entered
	stopped := make(chan struct{})
	go func() { m.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while its member's beat was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-stopped
	m.Stop() // twice is harmless
}

// TestManyMembers: members spread over the slots and removed in any order are each beaten once
// per interval, and the removals leave the others in place.
func TestManyMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(25 * time.Second)
		const n = 200
		var mu sync.Mutex
		counts := make([]int, n) // guarded by mu
		members := make([]*Member, n)
		for i := range n {
			members[i] = w.Add(func() { mu.Lock(); counts[i]++; mu.Unlock() })
			time.Sleep(250 * time.Millisecond) // four to a slot, over 50 s
		}
		for i := 0; i < n; i += 3 {
			members[i].Stop()
		}
		// Beats fall on whole seconds: a 75 s window from 50.5 s holds exactly three of each
		// remaining member's.
		time.Sleep(500 * time.Millisecond)
		mu.Lock()
		before := append([]int(nil), counts...)
		mu.Unlock()
		time.Sleep(75 * time.Second)
		mu.Lock()
		for i := range n {
			want := 3
			if i%3 == 0 {
				want = 0
			}
			if got := counts[i] - before[i]; got != want {
				t.Errorf("member %d beaten %d times in 75 s, want %d", i, got, want)
			}
		}
		mu.Unlock()
		for i := range n {
			members[i].Stop()
		}
	})
}
