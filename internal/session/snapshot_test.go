package session

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// snapTables attaches every table subscription, with run as its snapshot: run is handed the
// session to push the hand-off's items to, as the router's hand-off would.
type snapTables struct {
	run func(ctx context.Context, r stream.Receiver, sub string, pages SnapshotPages) error
	// noSnapshot: the producer does not read snapshots.
	noSnapshot bool

	mu           sync.Mutex
	unsubscribed int // guarded by mu
}

func (t *snapTables) Subscribe(_ context.Context, r stream.Receiver, req SubscribeRequest) (TableSubscription, error) {
	ts := TableSubscription{Key: []string{"id"}, Unsubscribe: func() {
		t.mu.Lock()
		t.unsubscribed++
		t.mu.Unlock()
	}}
	if req.Snapshot && !t.noSnapshot {
		ts.Snapshot = func(ctx context.Context, pages SnapshotPages) error { return t.run(ctx, r, req.Sub, pages) }
	} else {
		ts.Head = stream.TablePosition(0x10, 0)
	}
	return ts, nil
}

func (t *snapTables) unsubscribes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unsubscribed
}

func rowsOf(ids ...int) []change.Row {
	out := make([]change.Row, len(ids))
	for i, id := range ids {
		out[i] = change.Row{{Name: "id", Value: json.RawMessage(fmt.Sprint(id))}}
	}
	return out
}

func insertItem(lsn change.LSN, id int) *stream.Item {
	return stream.NewChange(&stream.Change{LSN: lsn, Idx: 1, Op: stream.OpInsert, Table: "public.t",
		Row: change.Row{{Name: "id", Value: json.RawMessage(fmt.Sprint(id))}}})
}

// runSession starts a session over tr with tables, and stops it when the test ends.
func runSession(t *testing.T, cfg Config, tables Tables, tr Transport) *Session {
	t.Helper()
	cfg.Codec = wire.Codec{}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, Deps{Tables: tables}, tr, auth.Identity{Subject: "u"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// waitFor polls the frames written until ok says they are complete.
func waitFor(t *testing.T, rec *recordingTransport, what string, ok func([]map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		frames := rec.written()
		if ok(frames) {
			return frames
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came; frames: %v", what, frames)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// describe renders frames as "type" or "type:detail" for comparison.
func describe(frames []map[string]any) string {
	var out []string
	for _, f := range frames {
		d := fmt.Sprint(f["type"])
		switch f["type"] {
		case "subscribed":
			d += fmt.Sprintf(":pos=%v,snapshot=%v,key=%v", f["pos"], f["snapshot"], f["key"])
		case "rows":
			d += fmt.Sprintf(":%d,last=%v", len(f["rows"].([]any)), f["last"])
		case "change":
			d += fmt.Sprintf(":%v", f["pos"])
		case "live":
			d += fmt.Sprintf(":%v", f["pos"])
		case "unsubscribed":
			d += fmt.Sprintf(":%v", f["code"])
		}
		out = append(out, d)
	}
	return strings.Join(out, " ")
}

// TestSnapshotFrames: a snapshot subscription is answered subscribed (snapshot, no position,
// the key), then its pages in order, then what its hand-off delivers: the changes the rows do
// not hold, then live with its position, then later changes.
func TestSnapshotFrames(t *testing.T) {
	rec := &recordingTransport{}
	tables := &snapTables{run: func(ctx context.Context, r stream.Receiver, sub string, pages SnapshotPages) error {
		if err := pages.Page(ctx, rowsOf(1, 2), stream.Progress{Rows: 2, Bytes: 16, Pages: 1}, false); err != nil {
			return err
		}
		if err := pages.Page(ctx, rowsOf(3), stream.Progress{Rows: 3, Bytes: 24, Pages: 2}, true); err != nil {
			return err
		}
		r.Push(sub, insertItem(0x20, 4))
		r.Push(sub, stream.NewLive(stream.TablePosition(0x20, 0)))
		r.Push(sub, insertItem(0x30, 5))
		return nil
	}}
	s := runSession(t, Config{}, tables, rec)
	if err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Table: "public.t", Snapshot: true}); err != nil {
		t.Fatal(err)
	}
	frames := waitFor(t, rec, "the change after live", func(f []map[string]any) bool { return len(f) >= 6 })
	want := "subscribed:pos=<nil>,snapshot=true,key=[id] rows:2,last=<nil> rows:1,last=true change:0/20 live:0/20 change:0/30"
	if got := describe(frames); got != want {
		t.Errorf("frames\n%s\nwant\n%s", got, want)
	}
}

// TestSnapshotFailureEndsTheSubscription: a snapshot that fails ends its subscription with an
// unprompted unsubscribed carrying the failure's code, and lets go of it; nothing of it
// follows. An error that is not a client-facing one is told as internal.
func TestSnapshotFailureEndsTheSubscription(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		code string
	}{
		{"too large", &fault.Error{Code: fault.CodeSnapshotTooLarge, Message: "more than 10 rows match"}, "snapshot_too_large"},
		{"busy", &fault.Error{Code: fault.CodeSnapshotBusy, Message: "4 snapshots are being read"}, "snapshot_busy"},
		{"not a client's error", fmt.Errorf("disk on fire"), "internal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingTransport{}
			release := make(chan struct{})
			tables := &snapTables{run: func(ctx context.Context, r stream.Receiver, sub string, pages SnapshotPages) error {
				if err := pages.Page(ctx, rowsOf(1), stream.Progress{Rows: 1, Bytes: 8, Pages: 1}, false); err != nil {
					return err
				}
				return tt.err
			}}
			s := runSession(t, Config{}, tables, rec)
			if err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Table: "public.t", Snapshot: true}); err != nil {
				t.Fatal(err)
			}
			frames := waitFor(t, rec, "unsubscribed", func(f []map[string]any) bool {
				return len(f) > 0 && f[len(f)-1]["type"] == "unsubscribed"
			})
			last := frames[len(frames)-1]
			if last["code"] != tt.code || last["sub"] != "s" || last["id"] != nil || last["message"] == "" {
				t.Errorf("the subscription ended with %v, want an unprompted unsubscribed with code %s and a message", last, tt.code)
			}
			// Pushes after the end reach nobody.
			s.Push("s", insertItem(0x40, 9))
			close(release)
			if err := s.Unsubscribe("s"); err == nil {
				t.Error("the ended subscription can still be unsubscribed")
			}
			if n := tables.unsubscribes(); n != 1 {
				t.Errorf("the producer's subscription was let go %d times, want once", n)
			}
			time.Sleep(20 * time.Millisecond)
			for _, f := range rec.written()[len(frames):] {
				t.Errorf("frame after the end: %v", f)
			}
		})
	}
}

// TestSnapshotPagesWait: pages wait for room on the data lane rather than being lost into a
// gap: with a lane of two frames and a client that does not read, the third page waits until
// the writer takes frames, and every page arrives, with no resync. (What the hand-off delivers
// after the pages is pushed as any item, under the lanes' overflow rule.)
func TestSnapshotPagesWait(t *testing.T) {
	g := newGated()
	const pages = 6
	paged := make(chan int, pages)
	tables := &snapTables{run: func(ctx context.Context, r stream.Receiver, sub string, p SnapshotPages) error {
		for i := range pages {
			if err := p.Page(ctx, rowsOf(i), stream.Progress{Rows: i + 1, Bytes: int64(8 * (i + 1)), Pages: i + 1}, i == pages-1); err != nil {
				return err
			}
			paged <- i
		}
		return nil
	}}
	s := runSession(t, Config{SlowTimeout: time.Hour, Lanes: delivery.Config{MaxDataFrames: 2}}, tables, g)
	if err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Table: "public.t", Snapshot: true}); err != nil {
		t.Fatal(err)
	}
	<-g.started // the writer holds its first batch (subscribed, perhaps a page)
	// The lane fills, and the read waits: not every page was queued.
	deadline := time.After(100 * time.Millisecond)
	queued := 0
wait:
	for {
		select {
		case <-paged:
			queued++
		case <-deadline:
			break wait
		}
	}
	if queued >= pages {
		t.Fatalf("all %d pages were queued on a lane of 2 frames that nobody read", queued)
	}
	close(g.gate)
	for queued < pages {
		select {
		case <-paged:
			queued++
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d pages were queued once the client read", queued, pages)
		}
	}
	deadline2 := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		frames := append([]string(nil), g.frames...)
		g.mu.Unlock()
		if n := len(frames); n > 0 && strings.Contains(frames[n-1], `"last":true`) {
			rows := 0
			for _, f := range frames {
				if strings.Contains(f, `"type":"resync"`) {
					t.Errorf("a page was lost into a gap: %s", f)
				}
				if strings.Contains(f, `"type":"rows"`) {
					rows++
				}
			}
			if rows != pages {
				t.Errorf("%d rows frames, want %d", rows, pages)
			}
			return
		}
		if time.Now().After(deadline2) {
			t.Fatalf("the last page never came: %q", frames)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSnapshotPageTooLarge: a page larger than the whole data lane could never be queued; it is
// refused with snapshot_too_large, which ends the subscription with that code.
func TestSnapshotPageTooLarge(t *testing.T) {
	rec := &recordingTransport{}
	tables := &snapTables{run: func(ctx context.Context, r stream.Receiver, sub string, p SnapshotPages) error {
		return p.Page(ctx, rowsOf(make([]int, 100)...), stream.Progress{Rows: 100, Bytes: 800, Pages: 1}, true)
	}}
	s := runSession(t, Config{Lanes: delivery.Config{MaxDataBytes: 256}}, tables, rec)
	if err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Table: "public.t", Snapshot: true}); err != nil {
		t.Fatal(err)
	}
	frames := waitFor(t, rec, "unsubscribed", func(f []map[string]any) bool {
		return len(f) > 0 && f[len(f)-1]["type"] == "unsubscribed"
	})
	if got := frames[len(frames)-1]["code"]; got != "snapshot_too_large" {
		t.Errorf("ended with %v, want snapshot_too_large", got)
	}
}

// TestSnapshotStopsWithItsSubscription: unsubscribing, or closing the session, while a snapshot
// is being read ends the read (its context), and the session's end waits for it; nothing is
// told of a failure after that.
func TestSnapshotStopsWithItsSubscription(t *testing.T) {
	for _, how := range []string{"unsubscribe", "close"} {
		t.Run(how, func(t *testing.T) {
			rec := &recordingTransport{}
			started, stopped := make(chan struct{}), make(chan struct{})
			tables := &snapTables{run: func(ctx context.Context, r stream.Receiver, sub string, p SnapshotPages) error {
				close(started)
				<-ctx.Done()
				close(stopped)
				return &fault.Error{Code: fault.CodeSnapshotTimeout, Message: "cut short"}
			}}
			cfg := Config{Codec: wire.Codec{}}
			s, err := New(cfg, Deps{Tables: tables}, rec, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { s.Run(context.Background()); close(done) }()
			if err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Table: "public.t", Snapshot: true}); err != nil {
				t.Fatal(err)
			}
			<-started
			if how == "unsubscribe" {
				if err := s.Unsubscribe("s"); err != nil {
					t.Fatal(err)
				}
				<-stopped
			}
			s.Close(CloseNormal, "")
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the session did not end")
			}
			select {
			case <-stopped:
			default:
				t.Fatal("the session ended before its snapshot's read did")
			}
			for _, f := range rec.written() {
				if f["type"] == "unsubscribed" {
					t.Errorf("a read stopped by its subscription's end was told: %v", f)
				}
			}
		})
	}
}

// TestSnapshotNotServed: a producer that does not read snapshots refuses a snapshot
// subscription, rather than answer it as an ordinary one.
func TestSnapshotNotServed(t *testing.T) {
	tables := &snapTables{noSnapshot: true}
	s := runSession(t, Config{}, tables, &recordingTransport{})
	err := s.Subscribe(context.Background(), SubscribeRequest{Ref: "1", Sub: "s", Table: "public.t", Snapshot: true})
	if fe, ok := fault.As(err); !ok || fe.Code != fault.CodeUnavailable {
		t.Fatalf("Subscribe = %v, want unavailable", err)
	}
	if n := tables.unsubscribes(); n != 1 {
		t.Errorf("the producer's subscription was let go %d times, want once", n)
	}
}
