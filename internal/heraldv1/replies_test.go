package heraldv1

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
)

// recordingTransport keeps every frame written, decoded.
type recordingTransport struct {
	mu     sync.Mutex
	frames []wire.Frame
}

func (r *recordingTransport) Write(_ time.Time, items []delivery.Item) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		f, err := wire.DecodeServer(append(append([]byte(nil), it.Head...), it.Body...), 1<<20)
		if err != nil {
			return err
		}
		r.frames = append(r.frames, f)
	}
	return nil
}

func (r *recordingTransport) Close(session.CloseReason, string) {}

// next waits for the n-th frame written (from 0).
func (r *recordingTransport) next(t *testing.T, n int) wire.Frame {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		if len(r.frames) > n {
			f := r.frames[n]
			r.mu.Unlock()
			return f
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("frame %d never came", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// verifier answers every token with ident, or err.
type verifier struct {
	ident auth.Identity
	err   error
}

func (v verifier) Verify(string) (auth.Identity, error) { return v.ident, v.err }

// publishingChannels places every publication at e:1.
type publishingChannels struct{ fakeChannels }

func (publishingChannels) Publish(string, string, json.RawMessage) (stream.Position, error) {
	return stream.ChannelPosition("e", 1), nil
}

// brokenChannels refuses every subscription with the hub's own refusal of a pattern.
type brokenChannels struct{ fakeChannels }

func (brokenChannels) Subscribe(stream.Receiver, string, string, string, stream.Position) (session.ChannelSubscription, error) {
	return session.ChannelSubscription{}, &channel.Error{Reason: channel.ReasonBadPattern, Value: "c", Detail: "no such pattern"}
}

// failingChannels fails every subscription with an error nobody named for the client.
type failingChannels struct{ fakeChannels }

func (failingChannels) Subscribe(stream.Receiver, string, string, string, stream.Position) (session.ChannelSubscription, error) {
	return session.ChannelSubscription{}, errors.New("disk on fire")
}

// noDurable binds nothing and knows no durable subscription.
type noDurable struct{}

func (noDurable) Bind(context.Context, stream.Receiver, string, session.SubscribeRequest, func(*fault.Error)) (session.DurableSubscription, error) {
	return session.DurableSubscription{}, &fault.Error{Code: fault.CodeUnavailable}
}
func (noDurable) Forget(context.Context, auth.Identity, string) error {
	return &fault.Error{Code: fault.CodeNotFound, Field: "sub"}
}

// TestReplies: each client frame is answered with the herald.v1 frame its outcome on the
// session core calls for, quoting the request's id: the core's typed results and refusals,
// the verifier's, and a producer's, each mapped to its code.
func TestReplies(t *testing.T) {
	tests := []struct {
		name   string
		cfg    session.Config
		deps   session.Deps
		before []wire.Frame // handled first, each answered by one frame
		frame  wire.Frame
		want   wire.Frame
	}{
		{name: "ping", frame: &wire.Ping{ID: "1"}, want: &wire.Pong{ID: "1"}},
		{name: "connect again", frame: &wire.Connect{ID: "1"},
			want: &wire.Error{ID: "1", Code: wire.CodeBadFrame, Field: "type"}},
		{name: "ack of no subscription", frame: &wire.Ack{ID: "1", Sub: "s", Pos: stream.ChannelPosition("e", 1)},
			want: &wire.Error{ID: "1", Code: wire.CodeNotFound, Field: "sub"}},
		{name: "ack of a broadcast subscription", deps: session.Deps{Channels: fakeChannels{}},
			before: []wire.Frame{&wire.Subscribe{ID: "0", Sub: "s", Channel: "c"}},
			frame:  &wire.Ack{ID: "1", Sub: "s", Pos: stream.ChannelPosition("e", 1)},
			want:   &wire.Error{ID: "1", Code: wire.CodeNotFound, Field: "sub"}},
		{name: "subscribe in mode single with none served", deps: session.Deps{Channels: fakeChannels{}},
			frame: &wire.Subscribe{ID: "1", Sub: "s", Channel: "c", Mode: wire.ModeSingle},
			want:  &wire.Error{ID: "1", Code: wire.CodeUnavailable, Field: "mode"}},
		{name: "durable subscribe to a table", deps: session.Deps{Channels: fakeChannels{}},
			frame: &wire.Subscribe{ID: "1", Sub: "s", Table: "public.t", Durable: true},
			want:  &wire.Error{ID: "1", Code: wire.CodeNotImplemented, Field: "mode"}},
		{name: "forget a subscription that is not durable", deps: session.Deps{Channels: fakeChannels{}, Durable: noDurable{}},
			before: []wire.Frame{&wire.Subscribe{ID: "0", Sub: "s", Channel: "c"}},
			frame:  &wire.Unsubscribe{ID: "1", Sub: "s", Forget: true},
			want:   &wire.Error{ID: "1", Code: wire.CodeBadFrame, Field: "forget"}},
		{name: "forget with none kept", frame: &wire.Unsubscribe{ID: "1", Sub: "s", Forget: true},
			want: &wire.Error{ID: "1", Code: wire.CodeNotFound, Field: "sub"}},
		{name: "subscribe to a channel", deps: session.Deps{Channels: fakeChannels{}},
			frame: &wire.Subscribe{ID: "1", Sub: "s", Channel: "c"}, want: &wire.Subscribed{ID: "1", Sub: "s"}},
		{name: "subscribe with no channels served", frame: &wire.Subscribe{ID: "1", Sub: "s", Channel: "c"},
			want: &wire.Error{ID: "1", Code: wire.CodeUnavailable}},
		{name: "subscribe to a table with none served", frame: &wire.Subscribe{ID: "1", Sub: "s", Table: "public.t"},
			want: &wire.Error{ID: "1", Code: wire.CodeUnknownTable, Field: "table"}},
		{name: "subscribe refused by the producer", deps: session.Deps{Channels: brokenChannels{}},
			frame: &wire.Subscribe{ID: "1", Sub: "s", Channel: "c"},
			want:  &wire.Error{ID: "1", Code: wire.CodeBadFrame, Field: "channel"}},
		{name: "subscribe failing in the producer", deps: session.Deps{Channels: failingChannels{}},
			frame: &wire.Subscribe{ID: "1", Sub: "s", Channel: "c"},
			want:  &wire.Error{ID: "1", Code: wire.CodeInternal}},
		{name: "subscribe twice", deps: session.Deps{Channels: fakeChannels{}},
			before: []wire.Frame{&wire.Subscribe{ID: "0", Sub: "s", Channel: "c"}},
			frame:  &wire.Subscribe{ID: "1", Sub: "s", Channel: "d"},
			want:   &wire.Error{ID: "1", Code: wire.CodeDuplicateSubscription, Field: "sub"}},
		{name: "subscribe past the limit", cfg: session.Config{MaxSubscriptions: 1}, deps: session.Deps{Channels: fakeChannels{}},
			before: []wire.Frame{&wire.Subscribe{ID: "0", Sub: "r", Channel: "c"}},
			frame:  &wire.Subscribe{ID: "1", Sub: "s", Channel: "c"},
			want:   &wire.Error{ID: "1", Code: wire.CodeTooManySubscriptions}},
		{name: "unsubscribe", deps: session.Deps{Channels: fakeChannels{}},
			before: []wire.Frame{&wire.Subscribe{ID: "0", Sub: "s", Channel: "c"}},
			frame:  &wire.Unsubscribe{ID: "1", Sub: "s"}, want: &wire.Unsubscribed{ID: "1", Sub: "s"}},
		{name: "unsubscribe from nothing", frame: &wire.Unsubscribe{ID: "1", Sub: "s"},
			want: &wire.Error{ID: "1", Code: wire.CodeNotFound, Field: "sub"}},
		{name: "publish not allowed", deps: session.Deps{Channels: fakeChannels{}},
			frame: &wire.Publish{ID: "1", Channel: "c", Data: json.RawMessage(`1`)},
			want:  &wire.Error{ID: "1", Code: wire.CodePublishNotAllowed}},
		{name: "publish", cfg: session.Config{ClientPublish: true}, deps: session.Deps{Channels: publishingChannels{}},
			frame: &wire.Publish{ID: "1", Channel: "c", Data: json.RawMessage(`1`)}, want: &wire.Published{ID: "1"}},
		{name: "refresh with no verifier", frame: &wire.Refresh{ID: "1", Token: "t"},
			want: &wire.Error{ID: "1", Code: wire.CodeUnauthorized}},
		{name: "refresh with an expired token", deps: session.Deps{Verifier: verifier{err: &auth.Error{Reason: auth.ReasonExpired, Detail: "the token expired"}}},
			frame: &wire.Refresh{ID: "1", Token: "t"}, want: &wire.Error{ID: "1", Code: wire.CodeTokenExpired, Field: "token"}},
		{name: "refresh with a bad token", deps: session.Deps{Verifier: verifier{err: &auth.Error{Reason: auth.ReasonInvalid, Detail: "the signature does not verify"}}},
			frame: &wire.Refresh{ID: "1", Token: "t"}, want: &wire.Error{ID: "1", Code: wire.CodeUnauthorized, Field: "token"}},
		{name: "refresh for another identity", deps: session.Deps{Verifier: verifier{ident: auth.Identity{Subject: "v"}}},
			frame: &wire.Refresh{ID: "1", Token: "t"}, want: &wire.Error{ID: "1", Code: wire.CodeForbidden, Field: "token"}},
		{name: "refresh", deps: session.Deps{Verifier: verifier{ident: auth.Identity{Subject: "u"}}},
			frame: &wire.Refresh{ID: "1", Token: "t"}, want: &wire.Refreshed{ID: "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingTransport{}
			tt.cfg.Codec = wire.Codec{}
			s, err := session.New(tt.cfg, tt.deps, rec, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			c := New(s)
			for _, f := range tt.before {
				c.Handle(ctx, f)
			}
			c.Handle(ctx, tt.frame)
			got := rec.next(t, len(tt.before))
			if ge, ok := got.(*wire.Error); ok {
				we, ok := tt.want.(*wire.Error)
				if !ok || ge.ID != we.ID || ge.Code != we.Code || ge.Field != we.Field || ge.Message == "" {
					t.Fatalf("got %+v, want %+v with a message", ge, tt.want)
				}
				return
			}
			var ok bool
			switch g := got.(type) {
			case *wire.Pong:
				w, is := tt.want.(*wire.Pong)
				ok = is && g.ID == w.ID
			case *wire.Subscribed:
				w, is := tt.want.(*wire.Subscribed)
				ok = is && g.ID == w.ID && g.Sub == w.Sub
			case *wire.Unsubscribed:
				w, is := tt.want.(*wire.Unsubscribed)
				ok = is && g.ID == w.ID && g.Sub == w.Sub
			case *wire.Published:
				w, is := tt.want.(*wire.Published)
				ok = is && g.ID == w.ID && g.Pos == stream.ChannelPosition("e", 1)
			case *wire.Refreshed:
				w, is := tt.want.(*wire.Refreshed)
				ok = is && g.ID == w.ID
			}
			if !ok {
				t.Fatalf("got %T %+v, want %T %+v", got, got, tt.want, tt.want)
			}
		})
	}
}

// snapshotTables attaches every table subscription; its snapshot fails, or sends one page of
// rows, then the hand-off's live.
type snapshotTables struct {
	rows []change.Row
	fail error // the snapshot's failure; nil: it goes live
}

func (t snapshotTables) Subscribe(_ context.Context, r stream.Receiver, req session.SubscribeRequest) (session.TableSubscription, error) {
	ts := session.TableSubscription{Key: []string{"id"}, Unsubscribe: func() {}}
	if req.Snapshot {
		ts.Snapshot = func(ctx context.Context, pages session.SnapshotPages) error {
			if t.fail != nil {
				return t.fail
			}
			if err := pages.Page(ctx, t.rows, stream.Progress{Rows: len(t.rows), Bytes: 8, Pages: 1}, true); err != nil {
				return err
			}
			r.Push(req.Sub, stream.NewLive(stream.TablePosition(0x16B374D848, 0)))
			return nil
		}
	}
	return ts, nil
}

// TestSnapshotProtocol: a subscribe with snapshot is refused on a channel, with from and in mode
// single, as bad_frame naming the field; otherwise it is answered subscribed with snapshot and
// no position, then rows, then live with its position; a snapshot that fails (too large, busy)
// ends it with an unprompted unsubscribed carrying its code.
func TestSnapshotProtocol(t *testing.T) {
	row := change.Row{{Name: "id", Value: json.RawMessage(`1`)}}
	refusals := []struct {
		name, frame, field string
	}{
		{"on a channel", `{"type":"subscribe","id":"1","sub":"s","channel":"rooms/1","snapshot":true}`, "snapshot"},
		{"with from", `{"type":"subscribe","id":"1","sub":"s","table":"public.t","from":"16/B374D848","snapshot":true}`, "snapshot"},
		{"in mode single", `{"type":"subscribe","id":"1","sub":"s","table":"public.t","mode":"single","snapshot":true}`, "snapshot"},
	}
	for _, tt := range refusals {
		t.Run("refused "+tt.name, func(t *testing.T) {
			rec := &recordingTransport{}
			s, err := session.New(session.Config{Codec: wire.Codec{}}, session.Deps{Tables: snapshotTables{}, Channels: fakeChannels{}}, rec, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			New(s).HandleFrame(ctx, []byte(tt.frame))
			got, ok := rec.next(t, 0).(*wire.Error)
			if !ok || got.ID != "1" || got.Code != wire.CodeBadFrame || got.Field != tt.field || got.Message == "" {
				t.Fatalf("got %+v, want bad_frame on %s with id 1 and a message", rec.next(t, 0), tt.field)
			}
		})
	}
	answers := []struct {
		name   string
		tables snapshotTables
		want   []wire.Frame
	}{
		{"live", snapshotTables{rows: []change.Row{row}}, []wire.Frame{
			&wire.Subscribed{ID: "1", Sub: "s", Key: []string{"id"}, Snapshot: true},
			&wire.Rows{Sub: "s", Rows: []change.Row{row}, Progress: stream.Progress{Rows: 1, Bytes: 8, Pages: 1}, Last: true},
			&wire.Live{Sub: "s", Pos: stream.TablePosition(0x16B374D848, 0)},
		}},
		{"too large", snapshotTables{fail: &fault.Error{Code: fault.CodeSnapshotTooLarge, Message: "more than 100000 rows match"}}, []wire.Frame{
			&wire.Subscribed{ID: "1", Sub: "s", Key: []string{"id"}, Snapshot: true},
			&wire.Unsubscribed{Sub: "s", Code: wire.CodeSnapshotTooLarge, Message: "more than 100000 rows match"},
		}},
		{"busy", snapshotTables{fail: &fault.Error{Code: fault.CodeSnapshotBusy, Message: "4 snapshots are being read"}}, []wire.Frame{
			&wire.Subscribed{ID: "1", Sub: "s", Key: []string{"id"}, Snapshot: true},
			&wire.Unsubscribed{Sub: "s", Code: wire.CodeSnapshotBusy, Message: "4 snapshots are being read"},
		}},
	}
	for _, tt := range answers {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingTransport{}
			s, err := session.New(session.Config{Codec: wire.Codec{}}, session.Deps{Tables: tt.tables}, rec, auth.Identity{Subject: "u"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			New(s).HandleFrame(ctx, []byte(`{"type":"subscribe","id":"1","sub":"s","table":"public.t","snapshot":true}`))
			// The unsubscribed is a control frame, which may overtake the rows in one batch;
			// compare each frame type's frames in order.
			var got []wire.Frame
			for i := range tt.want {
				got = append(got, rec.next(t, i))
			}
			byType := func(fs []wire.Frame) map[wire.FrameType][]string {
				m := map[wire.FrameType][]string{}
				for _, f := range fs {
					b, err := wire.AppendFrame(nil, f)
					if err != nil {
						t.Fatal(err)
					}
					m[f.Type()] = append(m[f.Type()], string(b))
				}
				return m
			}
			if diff := cmp.Diff(byType(tt.want), byType(got)); diff != "" {
				t.Errorf("frames (-want +got):\n%s", diff)
			}
			if got[0].Type() != wire.FrameSubscribed {
				t.Errorf("first frame %T, want subscribed", got[0])
			}
		})
	}
}
