package session

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/wire"
)

// exclusiveTransport counts what is written and fails a test that sees two writes at once.
type exclusiveTransport struct {
	t       *testing.T
	writing atomic.Int32
	frames  atomic.Int64
	closed  atomic.Int32
}

func (e *exclusiveTransport) Write(_ time.Time, items []delivery.Item) error {
	if n := e.writing.Add(1); n != 1 {
		e.t.Errorf("%d writes at once: more than one writer", n)
	}
	e.frames.Add(int64(len(items)))
	e.writing.Add(-1)
	return nil
}

func (e *exclusiveTransport) Close(CloseReason, string) { e.closed.Add(1) }

// TestWriterOnDemandLosesNoWakeUp: frames pushed from many goroutines while the writer keeps
// ending and being started again are all written, by one writer at a time, and the session
// ends with no writer left. Run under -race, it also checks the hand-over between writers.
func TestWriterOnDemandLosesNoWakeUp(t *testing.T) {
	const (
		pushers = 8
		each    = 500
	)
	for round := range 20 {
		tr := &exclusiveTransport{t: t}
		s, err := New(Config{Codec: wire.Codec{}, Lanes: delivery.Config{MaxControlFrames: pushers * each, MaxControlBytes: 1 << 20}},
			Deps{}, tr, auth.Identity{Subject: "u"})
		if err != nil {
			t.Fatal(err)
		}
		s.Start(context.Background())
		var wg sync.WaitGroup
		for p := range pushers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					s.Send(fmt.Appendf(nil, `{"type":"pong","id":"%d-%d"}`, p, i))
					if i%50 == 0 {
						time.Sleep(time.Microsecond) // let the writer drain and end now and then
					}
				}
			}()
		}
		wg.Wait()
		// Every frame is written without anything more being pushed: none waits for a wake-up
		// that was lost.
		deadline := time.Now().Add(10 * time.Second)
		for tr.frames.Load() != pushers*each {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d frames written; the rest wait for a writer", round, tr.frames.Load(), pushers*each)
			}
			time.Sleep(time.Millisecond)
		}
		s.Close(CloseNormal, "")
		s.Wait()
		if tr.closed.Load() == 0 {
			t.Fatalf("round %d: the transport was not closed", round)
		}
	}
}

// TestCloseWaitsForTheWriter: a session whose writer is blocked in a write is not finished
// (Done, Wait) until that write has ended, and the close then writes what explains it.
func TestCloseWaitsForTheWriter(t *testing.T) {
	g := newGated()
	s, err := New(Config{CloseGrace: time.Hour, Codec: wire.Codec{}}, Deps{}, g, auth.Identity{Subject: "u"})
	if err != nil {
		t.Fatal(err)
	}
	s.Send([]byte(`{"type":"pong","id":"1"}`))
	s.Start(context.Background())
	<-g.started // the writer is in its write
	s.Send([]byte(`{"type":"error","code":"internal","message":"ending"}`))
	s.Close(CloseInternal, "ending")
	waited := make(chan struct{})
	go func() { s.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while the writer was still writing")
	case <-s.Done():
		t.Fatal("the session finished while its writer was still writing")
	case <-time.After(50 * time.Millisecond):
	}
	close(g.gate)
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait never returned")
	}
	if got := s.CloseReason(); got != CloseInternal {
		t.Errorf("close reason %s, want %s", got, CloseInternal)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := len(g.frames); n != 2 {
		t.Fatalf("wrote %d frames, want the pong and the error: %q", n, g.frames)
	}
}

// TestCloseOfAnIdleSessionStartsAWriter: a session whose writer has ended is finished by its
// close all the same (a writer is started for it), and a shutdown of its context closes it.
func TestCloseOfAnIdleSessionStartsAWriter(t *testing.T) {
	for _, how := range []string{"close", "context"} {
		t.Run(how, func(t *testing.T) {
			tr := &recordingTransport{}
			s, err := New(Config{Codec: wire.Codec{}}, Deps{}, tr, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s.Send([]byte(`{"type":"pong","id":"1"}`))
			s.Start(ctx)
			for deadline := time.Now().Add(5 * time.Second); sessionGoroutines() != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the writer never ended")
				}
			}
			want := CloseShuttingDown
			if how == "close" {
				s.Send([]byte(`{"type":"error","code":"internal","message":"ending"}`))
				s.Close(CloseInternal, "ending")
				want = CloseInternal
			} else {
				cancel()
			}
			select {
			case <-s.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the idle session never finished")
			}
			s.Wait()
			if got := s.CloseReason(); got != want {
				t.Errorf("close reason %s, want %s", got, want)
			}
			if how == "close" {
				if f := tr.written(); len(f) != 2 || f[1]["type"] != "error" {
					t.Errorf("frames %v, want the pong and the error", f)
				}
			}
		})
	}
}
