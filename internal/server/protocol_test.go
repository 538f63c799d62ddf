package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
)

func TestUpgradeWithoutSubprotocolIsRefused(t *testing.T) {
	r := start(t, baseConfig())
	req, _ := http.NewRequest(http.MethodGet, r.url+"/v1/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("status %d, want 426", resp.StatusCode)
	}
}

func TestConnectAndWelcome(t *testing.T) {
	r := start(t, baseConfig())
	_, w := connect(t, r)
	limits, _ := w["limits"].(map[string]any)
	if w["id"] != "c1" || w["v"] != float64(1) || w["session"] == "" || limits == nil || limits["max_subscriptions"] != float64(4) {
		t.Errorf("welcome = %v", w)
	}
	// The token is in force until its exp plus the leeway (30 s by default).
	if in, _ := w["expires_in"].(float64); in < 3500 || in > 3630 {
		t.Errorf("welcome expires_in = %v, want about 3630", w["expires_in"])
	}
}

func TestTokenInTheUpgradeRequest(t *testing.T) {
	r := start(t, baseConfig())
	tok := token(t, "user-1", time.Now().Add(time.Hour))
	t.Run("authorization header", func(t *testing.T) {
		c := dial(t, r, func(o *websocket.DialOptions) {
			o.HTTPHeader = http.Header{"Authorization": {"Bearer " + tok}}
		})
		c.send(`{"type":"connect","id":"1"}`)
		c.expect("welcome")
	})
	t.Run("access_token parameter", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(r.url, "http")+"/v1/ws?access_token="+tok,
			&websocket.DialOptions{Subprotocols: []string{"herald.v1"}})
		if err != nil {
			t.Fatal(err)
		}
		c := &client{t: t, c: conn}
		defer conn.CloseNow()
		c.send(`{"type":"connect","id":"1"}`)
		c.expect("welcome")
	})
}

func TestAuthFailures(t *testing.T) {
	r := start(t, baseConfig())
	tests := []struct {
		name, connect string
		code          string
		close         websocket.StatusCode
	}{
		{"bad signature", `{"type":"connect","id":"a","token":"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"}`, "unauthorized", 4101},
		{"expired", `{"type":"connect","id":"a","token":"` + token(t, "u", time.Now().Add(-time.Hour)) + `"}`, "token_expired", 4100},
		{"no token, anonymous not allowed", `{"type":"connect","id":"a"}`, "unauthorized", 4101},
		// Not valid yet is cured by a fresh token, like expired: the same code and close.
		{"nbf in the future", `{"type":"connect","id":"a","token":"` + tokenClaims(t, jwt.MapClaims{"sub": "u", "exp": time.Now().Add(2 * time.Hour).Unix(), "nbf": time.Now().Add(time.Hour).Unix()}) + `"}`, "token_expired", 4100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, r)
			c.send(tt.connect)
			c.expectError(tt.code, "a")
			c.expectClose(tt.close)
		})
	}
}

func TestAnonymousWhenAllowed(t *testing.T) {
	cfg := baseConfig()
	cfg.Auth.AllowAnonymous = true
	r := start(t, cfg)
	c := dial(t, r)
	c.send(`{"type":"connect","id":"a"}`)
	c.expect("welcome")
}

func TestFirstFrameMustBeConnect(t *testing.T) {
	r := start(t, baseConfig())
	c := dial(t, r)
	c.send(`{"type":"ping","id":"p"}`)
	c.expectError("bad_frame", "")
	c.expectClose(4500)
}

func TestConnectTimeout(t *testing.T) {
	cfg := baseConfig()
	cfg.ConnectTimeout = 200 * time.Millisecond
	r := start(t, cfg)
	c := dial(t, r)
	c.expectClose(4002)
}

func TestBinaryMessageIsAProtocolViolation(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageBinary, []byte(`{"type":"ping","id":"1"}`)); err != nil {
		t.Fatal(err)
	}
	c.expectError("bad_frame", "")
	c.expectClose(4500)
}

func TestPingPong(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	c.send(`{"type":"ping","id":"p1"}`)
	if m := c.expect("pong"); m["id"] != "p1" {
		t.Errorf("pong = %v", m)
	}
}

func TestMalformedFramesKeepTheConnection(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"s1"}`)
	c.expectError("bad_frame", "s1")
	c.send(`not json`)
	c.expectError("bad_frame", "")
	c.send(`{"type":"teleport","id":"t1"}`)
	c.expectError("unknown_type", "t1")
	c.send(`{"type":"subscribe","id":"s2","sub":"a","table":"public.items","mode":"single"}`)
	c.expectError("not_implemented", "s2")
	c.send(`{"type":"ack","id":"k1","sub":"a","pos":"e1:1"}`)
	c.expectError("not_found", "k1")
	c.send(`{"type":"subscribe","id":"s3","sub":"t","table":"public.items"}`)
	c.expectError("unknown_table", "s3")
	c.send(`{"type":"ping","id":"still-here"}`)
	c.expect("pong")
}

func TestOversizeFrame(t *testing.T) {
	cfg := baseConfig()
	cfg.Session.MaxFrameBytes = 1024
	r := start(t, cfg)
	c, _ := connect(t, r)
	c.send(`{"type":"publish","id":"big","channel":"x","data":"` + strings.Repeat("a", 2000) + `"}`)
	c.expectClose(websocket.StatusMessageTooBig)
}

func TestSubscribePublishAndUnsubscribe(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"s1","sub":"room","channel":"chat/room1"}`)
	if m := c.expect("subscribed"); m["id"] != "s1" || m["sub"] != "room" {
		t.Fatalf("subscribed = %v", m)
	}
	pub := publish(t, r, "chat/room1", `{"text":"hi"}`)
	m := c.expect("message")
	if m["sub"] != "room" || m["channel"] != "chat/room1" || fmt.Sprint(m["data"]) != "map[text:hi]" {
		t.Errorf("message = %v", m)
	}
	if fmt.Sprint(m["pos"]) != fmt.Sprint(pub["pos"]) {
		t.Errorf("message pos %v, published pos %v", m["pos"], pub["pos"])
	}
	c.send(`{"type":"unsubscribe","id":"u1","sub":"room"}`)
	if m := c.expect("unsubscribed"); m["id"] != "u1" || m["sub"] != "room" {
		t.Fatalf("unsubscribed = %v", m)
	}
	publish(t, r, "chat/room1", `{"text":"gone"}`)
	c.send(`{"type":"ping","id":"p"}`)
	c.expect("pong") // and no message before it
}

func TestSubscriptionLimitsAndNotFound(t *testing.T) {
	r := start(t, baseConfig()) // MaxSubscriptions: 4
	c, _ := connect(t, r)
	for i := 0; i < 4; i++ {
		c.send(fmt.Sprintf(`{"type":"subscribe","id":"s%d","sub":"sub%d","channel":"c/%d"}`, i, i, i))
		c.expect("subscribed")
	}
	c.send(`{"type":"subscribe","id":"dup","sub":"sub0","channel":"c/9"}`)
	c.expectError("duplicate_subscription", "dup")
	c.send(`{"type":"subscribe","id":"over","sub":"sub9","channel":"c/9"}`)
	m := c.expectError("too_many_subscriptions", "over")
	if m["status"] != float64(429) {
		t.Errorf("status %v, want 429", m["status"])
	}
	// Another connection's subscription id is not_found, exactly like an unknown one.
	other, _ := connect(t, r)
	other.send(`{"type":"unsubscribe","id":"x","sub":"sub0"}`)
	theirs := other.expectError("not_found", "x")
	other.send(`{"type":"unsubscribe","id":"x","sub":"never"}`)
	unknown := other.expectError("not_found", "x")
	if strings.ReplaceAll(fmt.Sprint(theirs["message"]), "sub0", "X") != strings.ReplaceAll(fmt.Sprint(unknown["message"]), "never", "X") {
		t.Errorf("messages differ: %v vs %v", theirs, unknown)
	}
	// And the owner's subscription is untouched.
	publish(t, r, "c/0", `1`)
	if m := c.expect("message"); m["sub"] != "sub0" {
		t.Errorf("message = %v", m)
	}
}

func TestClientPublish(t *testing.T) {
	t.Run("not allowed", func(t *testing.T) {
		r := start(t, baseConfig())
		c, _ := connect(t, r)
		c.send(`{"type":"publish","id":"p1","channel":"x","data":1}`)
		c.expectError("publish_not_allowed", "p1")
	})
	t.Run("allowed", func(t *testing.T) {
		cfg := baseConfig()
		cfg.Session.ClientPublish = true
		r := start(t, cfg)
		c, _ := connect(t, r)
		c.send(`{"type":"subscribe","id":"s","sub":"a","channel":"x/**"}`)
		c.expect("subscribed")
		c.send(`{"type":"publish","id":"p1","channel":"x/y","event":"e","data":{"n":1}}`)
		// The published reply and the message may come in either order: control first.
		got := map[string]bool{}
		for i := 0; i < 2; i++ {
			m, err := c.read(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got[fmt.Sprint(m["type"])] = true
		}
		if !got["published"] || !got["message"] {
			t.Errorf("got %v, want published and message", got)
		}
	})
}

func TestPublishAPI(t *testing.T) {
	r := start(t, baseConfig())
	if code, m := postJSON(t, r.url+"/v1/publish", "", `{"channel":"x","data":1}`); code != 401 || m["code"] != "unauthorized" {
		t.Errorf("no key: %d %v", code, m)
	}
	if code, m := postJSON(t, r.url+"/v1/publish", "wrong-key-0123456789", `{"channel":"x","data":1}`); code != 401 {
		t.Errorf("wrong key: %d %v", code, m)
	}
	if code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"x"}`); code != 400 || m["code"] != "bad_frame" {
		t.Errorf("no data: %d %v", code, m)
	}
	if code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"a//b","data":1}`); code != 400 {
		t.Errorf("bad channel: %d %v", code, m)
	}
	if code, m := postJSON(t, r.url+"/v1/publish", testAPIKey, `{"channel":"x","data":"`+strings.Repeat("a", 70000)+`"}`); code != 413 {
		t.Errorf("oversize: %d %v", code, m)
	}
}

func TestRefreshAndExpiry(t *testing.T) {
	cfg := baseConfig()
	cfg.Session.ExpiryWarning = 500 * time.Millisecond
	cfg.Auth.Leeway = -1 // none: the token is in force until its exp
	r := start(t, cfg)
	c := dial(t, r)
	c.send(`{"type":"connect","id":"c","token":"` + token(t, "user-1", time.Now().Add(2*time.Second)) + `"}`)
	c.expect("welcome")
	c.send(`{"type":"subscribe","id":"s","sub":"a","channel":"x"}`)
	c.expect("subscribed")
	c.send(`{"type":"refresh","id":"r1","token":"` + token(t, "someone-else", time.Now().Add(time.Hour)) + `"}`)
	c.expectError("forbidden", "r1")
	c.send(`{"type":"refresh","id":"r2","token":"` + token(t, "user-1", time.Now().Add(3*time.Second)) + `"}`)
	c.expect("refreshed")
	// The subscription survived the refresh.
	publish(t, r, "x", `1`)
	c.expect("message")
	// Then the new token runs out: a warning first, then the close.
	c.expect("expiring")
	c.expectError("token_expired", "")
	c.expectClose(4100)
}

// TestTokenWithinTheLeewayIsWarnedThenClosed: a token that expired a moment ago but within
// auth.leeway verifies, so it stays in force until its exp plus the leeway: welcome says so,
// and an expiring warning comes before the close.
func TestTokenWithinTheLeewayIsWarnedThenClosed(t *testing.T) {
	cfg := baseConfig()
	cfg.Auth.Leeway = 8 * time.Second
	cfg.Session.ExpiryWarning = time.Minute
	r := start(t, cfg)
	c := dial(t, r)
	exp := time.Now().Add(-5 * time.Second)
	c.send(`{"type":"connect","id":"c","token":"` + token(t, "user-1", exp) + `"}`)
	w := c.expect("welcome")
	if in, _ := w["expires_in"].(float64); in <= 0 {
		t.Errorf("welcome %v: expires_in %v, want the seconds left until exp plus the leeway", w, w["expires_in"])
	}
	e := c.expect("expiring")
	if in, _ := e["expires_in"].(float64); in <= 0 {
		t.Errorf("expiring %v: expires_in %v, want the seconds left", e, e["expires_in"])
	}
	c.expectError("token_expired", "")
	c.expectClose(4100)
}

// TestRefreshWithATokenNotValidYet: the refresh is refused as token_expired and the old token
// stays in force.
func TestRefreshWithATokenNotValidYet(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	c.send(`{"type":"refresh","id":"r","token":"` + tokenClaims(t, jwt.MapClaims{"sub": "user-1", "exp": time.Now().Add(2 * time.Hour).Unix(), "nbf": time.Now().Add(time.Hour).Unix()}) + `"}`)
	c.expectError("token_expired", "r")
	c.send(`{"type":"ping","id":"p"}`)
	c.expect("pong")
}

func TestConnectionLimit(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxConnections = 1
	r := start(t, cfg)
	connect(t, r)
	c := dial(t, r)
	c.expectError("too_many_connections", "")
	c.expectClose(4001)
}

func TestGracefulShutdownTellsClientsToReconnect(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	go r.stop()
	c.expectClose(4000 - 2988) // 1012
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		r.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
	// Stopped accepting.
	if _, err := http.Get(r.url + "/healthz"); err == nil {
		t.Error("the server still accepts after shutdown")
	}
}

func TestHealthAndReady(t *testing.T) {
	cfg := baseConfig()
	var ready atomic.Bool
	cfg.Ready = func() error {
		if ready.Load() {
			return nil
		}
		return fmt.Errorf("replication stream ended: slot lost")
	}
	r := start(t, cfg)
	resp, err := http.Get(r.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(r.url + "/readyz")
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("readyz while not ready: %v %v", resp, err)
	}
	resp.Body.Close()
	ready.Store(true)
	resp, err = http.Get(r.url + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz when ready: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestChannelFromThatCannotBeHonoured(t *testing.T) {
	r := start(t, baseConfig())
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"k","sub":"k","channel":"room"}`)
	head := c.expect("subscribed")["pos"].(map[string]any)
	epoch := head["epoch"].(string)
	c.send(`{"type":"subscribe","id":"p","sub":"p","channel":"room/**","from":"` + epoch + `:1"}`)
	c.expectError("bad_position", "p")
	c.send(`{"type":"subscribe","id":"f","sub":"f","channel":"room","from":"` + epoch + `:99"}`)
	c.expectError("bad_position", "f")
	// Neither refusal left a subscription behind: the sub ids are free again.
	c.send(`{"type":"subscribe","id":"f2","sub":"f","channel":"room"}`)
	c.expect("subscribed")
}

func TestMetrics(t *testing.T) {
	r := start(t, slowConfig())
	c, _ := connect(t, r)
	c.send(`{"type":"subscribe","id":"a","sub":"a","channel":"m/a"}`)
	c.expect("subscribed")
	for i := 0; i < 300; i++ {
		publish(t, r, "m/a", `"`+strings.Repeat("x", 1000)+`"`)
	}
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	for _, want := range []string{`herald_sessions{transport="ws"} 1`, `herald_connections{transport="ws"} 1`, `herald_subscriptions{kind="channel",transport="ws"} 1`, "herald_channel_publications_total 300", `herald_frames_lost_total{reason="lane_full"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
