package client

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/wire"
)

func TestDialWelcome(t *testing.T) {
	n := startNode(t, baseConfig())
	c := dial(t, n)
	w := c.Welcome()
	if w.Version != 1 || w.Session == "" || w.Limits.MaxSubscriptions != 8 || w.Limits.MaxFrameBytes <= 0 {
		t.Errorf("welcome = %+v", w)
	}
	// The token is in force until its exp plus the server's leeway.
	if w.ExpiresIn < 59*time.Minute || w.ExpiresIn > time.Hour+auth.DefaultLeeway {
		t.Errorf("welcome expires_in = %v, want about 1h and %s", w.ExpiresIn, auth.DefaultLeeway)
	}
	if rtt, err := c.Ping(ctxFor(t, 5*time.Second)); err != nil || rtt <= 0 {
		t.Errorf("Ping = %v, %v", rtt, err)
	}
}

// TestPatternSubscription: a pattern spans channels, so subscribed has no position; the
// client accepts that, delivers each channel's messages, and keeps no position to resume from.
func TestPatternSubscription(t *testing.T) {
	n := startNode(t, baseConfig())
	c := dial(t, n)
	ctx := ctxFor(t, 5*time.Second)
	pos, err := c.Subscribe(ctx, Subscription{Sub: "rooms", Channel: "rooms/*"})
	if err != nil {
		t.Fatalf("Subscribe to a pattern: %v", err)
	}
	if !pos.IsZero() {
		t.Errorf("subscribed pos = %v, want none for a pattern", pos)
	}
	var pubs []Position
	for _, ch := range []string{"rooms/1", "rooms/2"} {
		p, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: ch, Data: json.RawMessage(`1`)})
		if err != nil {
			t.Fatalf("PublishHTTP %s: %v", ch, err)
		}
		pubs = append(pubs, p)
	}
	// Each channel is its own stream: the two may arrive in either order (PROTOCOL.md).
	want := map[string]Position{"rooms/1": pubs[0], "rooms/2": pubs[1]}
	for i := range 2 {
		f, _ := next(t, c)
		m, ok := f.(*Message)
		if !ok || m.Sub != "rooms" {
			t.Fatalf("frame %d = %#v, want a message of rooms", i, f)
		}
		if p, ok := want[m.Channel]; !ok || m.Pos != p {
			t.Errorf("frame %d = %#v, want one message on each of %v at its position", i, f, want)
		}
		delete(want, m.Channel)
	}
	if got, ok := c.Position("rooms"); !ok || !got.IsZero() {
		t.Errorf("Position = %v, %v; want zero, true: a pattern has no position to resume from", got, ok)
	}
}

func TestSubscribePublishReceive(t *testing.T) {
	n := startNode(t, baseConfig())
	c := dial(t, n)
	ctx := ctxFor(t, 5*time.Second)
	pos, err := c.Subscribe(ctx, Subscription{Sub: "chat", Channel: "rooms/1"})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if !pos.IsChannel() {
		t.Errorf("subscribed pos = %v, want a channel position", pos)
	}
	if got, ok := c.Position("chat"); !ok || got != pos {
		t.Errorf("Position before data = %v, %v; want %v", got, ok, pos)
	}

	// Through the HTTP API, as a backend publishes.
	pub, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: "rooms/1", Event: "chat", Data: json.RawMessage(`{"text": "hi"}`)})
	if err != nil {
		t.Fatalf("PublishHTTP: %v", err)
	}
	f, raw := next(t, c)
	want := &Message{Sub: "chat", Pos: pub, Channel: "rooms/1", Event: "chat", Data: json.RawMessage(`{"text":"hi"}`)}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("message (-want +got):\n%s", diff)
	}
	if !json.Valid(raw) || !strings.HasPrefix(string(raw), `{"type":"message","sub":"chat",`) {
		t.Errorf("raw = %s", raw)
	}
	if got, _ := c.Position("chat"); got != pub {
		t.Errorf("Position = %v, want %v", got, pub)
	}

	// Over the connection: a publisher subscribed to the channel receives its own publication.
	pub2, err := c.Publish(ctx, Publication{Channel: "rooms/1", Data: json.RawMessage(`[1,2]`)})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if pub2.Epoch != pub.Epoch || pub2.Offset != pub.Offset+1 {
		t.Errorf("second publication at %v, want offset %d of %s", pub2, pub.Offset+1, pub.Epoch)
	}
	f, _ = next(t, c)
	if m, ok := f.(*Message); !ok || m.Pos != pub2 || string(m.Data) != `[1,2]` {
		t.Errorf("second frame = %#v", f)
	}

	if err := c.Unsubscribe(ctx, "chat"); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	if _, ok := c.Position("chat"); ok {
		t.Error("Position still known after Unsubscribe")
	}
	if _, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: "rooms/1", Data: json.RawMessage(`3`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(ctx); err != nil { // the pong follows anything queued before it
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if f, _, err := c.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("after unsubscribe Next = %v, %v; want nothing", f, err)
	}
	// A Next whose context ended leaves the connection usable.
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("Ping after a timed-out Next: %v", err)
	}
}

func TestResyncOnResume(t *testing.T) {
	// The channel's history holds its last publication only.
	cfg := baseConfig()
	cfg.Fanout.History = channel.HistoryConfig{Size: 1}
	n := startNode(t, cfg)
	c := dial(t, n)
	ctx := ctxFor(t, 5*time.Second)
	// A keeper holds the channel's stream while the test publishes.
	keeper := dial(t, n)
	if _, err := keeper.Subscribe(ctx, Subscription{Sub: "keep", Channel: "feed"}); err != nil {
		t.Fatal(err)
	}
	var last Position
	for i := 0; i < 3; i++ {
		p, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: "feed", Data: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		last = p
	}
	tests := []struct {
		name string
		sub  string
		from Position
		want Frame
	}{
		{"replayed from the history", "r", wire.ChannelPosition(last.Epoch, 2),
			&Message{Sub: "r", Pos: last, Channel: "feed", Data: json.RawMessage(`{}`)}},
		{"history expired", "a", wire.ChannelPosition(last.Epoch, 1),
			&Resync{Sub: "a", First: wire.ChannelPosition(last.Epoch, 2), Last: last, Lost: 2, Reason: wire.ResyncHistoryExpired}},
		{"stream reset", "b", wire.ChannelPosition("another-epoch", 7),
			&Resync{Sub: "b", Last: last, Reason: wire.ResyncStreamReset}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pos, err := c.Subscribe(ctx, Subscription{Sub: tt.sub, Channel: "feed", From: tt.from})
			if err != nil {
				t.Fatal(err)
			}
			if pos != tt.from {
				t.Errorf("subscribed pos = %v, want the from %v", pos, tt.from)
			}
			f, raw := next(t, c)
			if diff := cmp.Diff(tt.want, f); diff != "" {
				t.Errorf("first frame (-want +got):\n%s\nraw %s", diff, raw)
			}
			if got, _ := c.Position(tt.sub); got != last {
				t.Errorf("Position after it = %v, want its last %v", got, last)
			}
		})
	}
}

func TestRequestErrors(t *testing.T) {
	n := startNode(t, baseConfig())
	c := dial(t, n)
	ctx := ctxFor(t, 5*time.Second)
	if _, err := c.Subscribe(ctx, Subscription{Sub: "dup", Channel: "a"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		do    func() error
		code  Code
		field string
		temp  bool
	}{
		{"duplicate subscription", func() error {
			_, err := c.Subscribe(ctx, Subscription{Sub: "dup", Channel: "b"})
			return err
		}, wire.CodeDuplicateSubscription, "sub", false},
		{"unknown table", func() error {
			_, err := c.Subscribe(ctx, Subscription{Sub: "t", Table: "public.nope"})
			return err
		}, wire.CodeUnknownTable, "table", false},
		{"bad channel", func() error {
			_, err := c.Subscribe(ctx, Subscription{Sub: "x", Channel: "a//b"})
			return err
		}, wire.CodeBadFrame, "channel", false},
		{"bad sub id", func() error {
			_, err := c.Subscribe(ctx, Subscription{Sub: "has space", Channel: "a"})
			return err
		}, wire.CodeBadFrame, "sub", false},
		{"unsubscribe unknown", func() error { return c.Unsubscribe(ctx, "never") }, wire.CodeNotFound, "sub", false},
		{"publish a pattern", func() error {
			_, err := c.Publish(ctx, Publication{Channel: "a/**", Data: json.RawMessage(`1`)})
			return err
		}, wire.CodeBadFrame, "channel", false},
		{"API key wrong", func() error {
			_, err := PublishHTTP(ctx, nil, n.http, "wrong-key-0123456789", Publication{Channel: "a", Data: json.RawMessage(`1`)})
			return err
		}, wire.CodeUnauthorized, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want an *Error", err, err)
			}
			if e.Code != tt.code || e.Field != tt.field || e.Status != tt.code.Status() || e.Temporary() != tt.temp {
				t.Errorf("err = %+v, want code %s field %q status %d temporary %v", e, tt.code, tt.field, tt.code.Status(), tt.temp)
			}
			if e.Message == "" || e.Hint() == "" || !strings.Contains(e.Error(), string(tt.code)) {
				t.Errorf("err %q: message %q hint %q", e.Error(), e.Message, e.Hint())
			}
		})
	}
	// The connection survives refusals.
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("Ping after refusals: %v", err)
	}
}

func TestPublishNotAllowed(t *testing.T) {
	cfg := baseConfig()
	cfg.Session.ClientPublish = false
	n := startNode(t, cfg)
	c := dial(t, n)
	_, err := c.Publish(ctxFor(t, 5*time.Second), Publication{Channel: "a", Data: json.RawMessage(`1`)})
	var e *Error
	if !errors.As(err, &e) || e.Code != wire.CodePublishNotAllowed || e.Op != "publish" {
		t.Errorf("Publish = %v, want publish_not_allowed", err)
	}
}

func TestDialRefused(t *testing.T) {
	n := startNode(t, baseConfig())
	tests := []struct {
		name     string
		token    string
		code     CloseCode
		reaction Reaction
		cause    Code
	}{
		{"no token", "", wire.CloseAuthFailed, Reauthenticate, wire.CodeUnauthorized},
		{"bad token", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl", wire.CloseAuthFailed, Reauthenticate, wire.CodeUnauthorized},
		{"expired", token(t, "u", time.Now().Add(-time.Hour)), wire.CloseTokenExpired, Reauthenticate, wire.CodeTokenExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Dial(ctxFor(t, 5*time.Second), n.url, Options{Token: tt.token})
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			var ce *CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v (%T), want a *CloseError", err, err)
			}
			if ce.Code != tt.code || ce.Reaction() != tt.reaction {
				t.Errorf("close %d %s (%s), want %d (%s)", ce.Code, ce.Code, ce.Reaction(), tt.code, tt.reaction)
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != tt.cause || e.Op != "connect" {
				t.Errorf("cause = %v, want %s", e, tt.cause)
			}
			if ce.Hint() == "" || !strings.Contains(err.Error(), tt.code.String()) {
				t.Errorf("error %q, hint %q", err, ce.Hint())
			}
		})
	}
	t.Run("not a Herald endpoint", func(t *testing.T) {
		_, err := Dial(ctxFor(t, 5*time.Second), n.http+"/healthz", Options{})
		if err == nil {
			t.Fatal("Dial succeeded")
		}
	})
}

func TestAnonymous(t *testing.T) {
	cfg := baseConfig()
	cfg.Auth.AllowAnonymous = true
	n := startNode(t, cfg)
	c, err := Dial(ctxFor(t, 5*time.Second), n.http, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Welcome().ExpiresAt.IsZero() {
		t.Errorf("anonymous welcome expires at %v", c.Welcome().ExpiresAt)
	}
}

func TestServerShutdownIsACloseToReconnect(t *testing.T) {
	n := startNode(t, baseConfig())
	c := dial(t, n)
	ctx := ctxFor(t, 10*time.Second)
	if _, err := c.Subscribe(ctx, Subscription{Sub: "s", Channel: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: "a", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	// A publish is answered before its fan-out, so even a pong may overtake the message: wait
	// until the reader has queued it for Next.
	for len(c.data) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the published message never reached the client")
		}
		time.Sleep(time.Millisecond)
	}
	n.halt(t)

	// What was queued still comes first; then the close.
	if f, _, err := c.Next(ctx); err != nil || f.Type() != wire.FrameMessage {
		t.Fatalf("Next = %v, %v; want the queued message", f, err)
	}
	_, _, err := c.Next(ctx)
	var ce *CloseError
	if !errors.As(err, &ce) || ce.Code != wire.CloseShuttingDown || ce.Reaction() != Reconnect {
		t.Fatalf("Next = %v, want close 1012 shutting_down (reconnect)", err)
	}
	if !strings.HasPrefix(ce.Reason, "shutting_down") {
		t.Errorf("reason %q", ce.Reason)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed")
	}
	if !errors.As(c.Err(), &ce) {
		t.Errorf("Err = %v", c.Err())
	}
	if _, err := c.Ping(ctx); !errors.As(err, &ce) {
		t.Errorf("Ping after the close = %v, want the *CloseError", err)
	}
}

func TestClose(t *testing.T) {
	n := startNode(t, baseConfig())
	c := dial(t, n)
	ctx := ctxFor(t, 5*time.Second)
	if _, err := c.Subscribe(ctx, Subscription{Sub: "s", Channel: "a"}); err != nil {
		t.Fatal(err)
	}
	// A Next waiting when Close is called returns.
	got := make(chan error, 1)
	go func() {
		_, _, err := c.Next(ctx)
		got <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Errorf("waiting Next = %v, want ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, err := c.Subscribe(ctx, Subscription{Sub: "t", Channel: "a"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Close = %v", err)
	}
	// The server saw a normal close.
	deadline := time.Now().Add(5 * time.Second)
	for n.srv.Closes()[wire.CloseNormal] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("server closes = %v, want one normal", n.srv.Closes())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseWithAFullQueue closes a connection whose reader waits on a full queue.
func TestCloseWithAFullQueue(t *testing.T) {
	n := startNode(t, baseConfig())
	c, err := Dial(ctxFor(t, 5*time.Second), n.url, Options{Token: token(t, "u", time.Now().Add(time.Hour)), Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 5*time.Second)
	if _, err := c.Subscribe(ctx, Subscription{Sub: "s", Channel: "a"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: "a", Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // let the reader block on the queue
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

func TestEndpoint(t *testing.T) {
	tests := []struct{ in, ws, http string }{
		{"ws://127.0.0.1:8080", "ws://127.0.0.1:8080/v1/ws", "http://127.0.0.1:8080/v1/publish"},
		{"http://h:1/", "ws://h:1/v1/ws", "http://h:1/v1/publish"},
		{"https://h", "wss://h/v1/ws", "https://h/v1/publish"},
		{"wss://h/v1/ws", "wss://h/v1/ws", "https://h/v1/publish"},
		{"h:8080", "ws://h:8080/v1/ws", "http://h:8080/v1/publish"},
		{"ws://h/herald/v1/ws?x=1", "ws://h/herald/v1/ws?x=1", "http://h/v1/publish"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			ws, err := Endpoint(tt.in, "/v1/ws")
			if err != nil || ws != tt.ws {
				t.Errorf("Endpoint = %q, %v; want %q", ws, err, tt.ws)
			}
			h, err := httpEndpoint(tt.in, "/v1/publish")
			if err != nil || h != tt.http {
				t.Errorf("httpEndpoint = %q, %v; want %q", h, err, tt.http)
			}
		})
	}
	for _, bad := range []string{"ftp://h", "ws://", "://"} {
		if _, err := Endpoint(bad, "/v1/ws"); err == nil {
			t.Errorf("Endpoint(%q) succeeded", bad)
		}
	}
}

func TestCloseErrorText(t *testing.T) {
	tests := []struct {
		err  *CloseError
		want string
	}{
		{&CloseError{Code: 4000, Reason: "too_slow: queue full"}, "connection closed: 4000 too_slow (reconnect): too_slow: queue full"},
		{&CloseError{Code: 4101, Cause: &Error{Op: "connect", Code: "unauthorized", Status: 401, Message: "bad signature"}},
			"connection closed: 4101 auth_failed (reauthenticate); connect: unauthorized (401): bad signature"},
		{&CloseError{Code: 4999}, "connection closed: 4999 close_4999 (stop)"},
		{&CloseError{Code: 1006, Err: errors.New("EOF")}, "connection closed: 1006 dropped (reconnect): EOF"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	if h := (&Error{Code: "brand_new", Status: 503}).Hint(); h != "retry with backoff" {
		t.Errorf("hint for an unknown 5xx = %q", h)
	}
}

// TestSingleAck: a Single subscription's message goes to one of the identity's connections,
// most recently bound first; Ack settles it, a repeated Ack is harmless, and another
// connection's Ack of it comes back through Next as not_found.
func TestSingleAck(t *testing.T) {
	n := startNode(t, baseConfig())
	ctx := ctxFor(t, 10*time.Second)
	older, newer := dial(t, n), dial(t, n)
	for _, c := range []*Conn{older, newer} {
		if _, err := c.Subscribe(ctx, Subscription{Sub: "jobs", Channel: "jobs", Single: true}); err != nil {
			t.Fatalf("Subscribe single: %v", err)
		}
	}
	pub, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: "jobs", Data: json.RawMessage(`{"job":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := next(t, newer)
	m, ok := f.(*Message)
	if !ok || m.Pos != pub {
		t.Fatalf("the most recently bound connection got %#v, want the message at %v", f, pub)
	}
	for range 2 {
		if err := newer.Ack(ctx, "jobs", m.Pos); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	if err := older.Ack(ctx, "jobs", m.Pos); err != nil {
		t.Fatalf("Ack of another's message: %v", err)
	}
	f, _ = next(t, older)
	if e, ok := f.(*ErrorFrame); !ok || e.Code != "not_found" {
		t.Errorf("another connection's Ack: %#v, want an error frame not_found", f)
	}
	// Nothing else reached either connection: the repeated Ack was a success, and a settled
	// message is not offered again.
	for _, c := range []*Conn{older, newer} {
		if _, err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if f, _, err := c.Next(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("after the acks Next = %#v, %v; want nothing", f, err)
		}
		cancel()
	}
}

// TestPresence: a presence subscription gets the roster, then a join as another connection
// tracks (again when it replaces its meta) and a leave as it untracks; a track past the meta
// limit is refused.
func TestPresence(t *testing.T) {
	n := startNode(t, baseConfig())
	ctx := ctxFor(t, 10*time.Second)
	watcher, member := dial(t, n), dial(t, n)
	if _, err := watcher.Subscribe(ctx, Subscription{Sub: "room", Channel: "rooms/1", Presence: true}); err != nil {
		t.Fatalf("Subscribe with presence: %v", err)
	}
	f, _ := next(t, watcher)
	if r, ok := f.(*Roster); !ok || r.Sub != "room" || r.Channel != "rooms/1" || len(r.Members) != 0 {
		t.Fatalf("first frame %#v, want an empty roster of rooms/1", f)
	}

	id, err := member.Track(ctx, "rooms/1", json.RawMessage(`{"name":"ann"}`))
	if err != nil || id == "" {
		t.Fatalf("Track = %q, %v", id, err)
	}
	f, _ = next(t, watcher)
	if j, ok := f.(*Join); !ok || j.Member.ID != id || j.Member.Subject != "user-1" || string(j.Member.Meta) != `{"name":"ann"}` {
		t.Fatalf("after Track: %#v, want the join of %s", f, id)
	}
	if again, err := member.Track(ctx, "rooms/1", json.RawMessage(`{"name":"ann","away":true}`)); err != nil || again != id {
		t.Fatalf("Track again = %q, %v; want the same member %q", again, err, id)
	}
	f, _ = next(t, watcher)
	if j, ok := f.(*Join); !ok || string(j.Member.Meta) != `{"name":"ann","away":true}` {
		t.Fatalf("after a new meta: %#v, want a join with it", f)
	}
	if err := member.Untrack(ctx, "rooms/1"); err != nil {
		t.Fatalf("Untrack: %v", err)
	}
	f, _ = next(t, watcher)
	if l, ok := f.(*Leave); !ok || l.Member.ID != id {
		t.Fatalf("after Untrack: %#v, want the leave of %s", f, id)
	}

	big := json.RawMessage(`"` + strings.Repeat("x", 1024) + `"`)
	var e *Error
	if _, err := member.Track(ctx, "rooms/1", big); !errors.As(err, &e) || e.Code != "frame_too_large" {
		t.Errorf("Track with a meta past the limit = %v, want an *Error frame_too_large", err)
	}
}

// TestForget: Forget deletes the identity's durable subscription, queue and all: a message
// published meanwhile is not delivered when the name is bound again.
func TestForget(t *testing.T) {
	n := startNode(t, baseConfig())
	ctx := ctxFor(t, 10*time.Second)
	c := dial(t, n)
	if _, err := c.Subscribe(ctx, Subscription{Sub: "jobs", Channel: "jobs", Single: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Unsubscribe(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	// Unbound, the durable subscription keeps what is published to it...
	if _, err := PublishHTTP(ctx, nil, n.http, testAPIKey, Publication{Channel: "jobs", Data: json.RawMessage(`{"job":1}`)}); err != nil {
		t.Fatal(err)
	}
	// ...until it is forgotten.
	if err := c.Forget(ctx, "jobs"); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	var e *Error
	if err := c.Forget(ctx, "jobs"); !errors.As(err, &e) || e.Code != "not_found" {
		t.Errorf("Forget again = %v, want an *Error not_found", err)
	}
	if _, err := c.Subscribe(ctx, Subscription{Sub: "jobs", Channel: "jobs", Single: true}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if f, _, err := c.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("bound again after Forget: %#v, %v; want nothing (the queue went with it)", f, err)
	}
}
