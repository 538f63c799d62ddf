package server

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/presence"
)

// memberIDs returns the ids of a roster's members, in order.
func memberIDs(t *testing.T, m map[string]any) []string {
	t.Helper()
	ms, ok := m["members"].([]any)
	if !ok {
		t.Fatalf("roster %v has no members array", m)
	}
	var ids []string
	for _, x := range ms {
		ids = append(ids, x.(map[string]any)["id"].(string))
	}
	return ids
}

func memberOf(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	mem, ok := m["member"].(map[string]any)
	if !ok {
		t.Fatalf("%v has no member object", m)
	}
	return mem
}

// Over real WebSockets: one client tracks, another subscribed with presence sees the roster
// right after subscribed, then the join, a meta update, and the leave when the first client
// disconnects; untrack sends a leave too.
func TestPresenceOverWebSocket(t *testing.T) {
	cfg := baseConfig()
	cfg.Policy = policy.Rules{Channels: map[string]policy.ChannelRules{
		"rooms/*": {Subscribe: "true", Presence: "true"},
		"quiet/*": {Subscribe: "true", Presence: "false"},
	}}
	r := start(t, cfg)

	alice := connectAs(t, r, "alice", nil)
	alice.send(`{"type":"track","id":"t1","channel":"rooms/1","meta":{ "name" : "Ada" }}`)
	tracked := alice.expect("tracked")
	aliceID, _ := tracked["member"].(string)
	if tracked["id"] != "t1" || tracked["channel"] != "rooms/1" || !strings.HasPrefix(aliceID, "alice/") {
		t.Fatalf("tracked = %v; want id t1, channel rooms/1, a member id of alice", tracked)
	}

	bob := connectAs(t, r, "bob", nil)
	bob.send(`{"type":"subscribe","id":"s1","sub":"room","channel":"rooms/1","presence":true}`)
	bob.expect("subscribed")
	roster := bob.expect("roster")
	if ids := memberIDs(t, roster); roster["sub"] != "room" || roster["channel"] != "rooms/1" || len(ids) != 1 || ids[0] != aliceID {
		t.Fatalf("roster = %v; want alice's member alone", roster)
	}
	if meta := roster["members"].([]any)[0].(map[string]any)["meta"].(map[string]any); meta["name"] != "Ada" {
		t.Fatalf("alice's meta in the roster = %v; want name Ada", meta)
	}

	// A second connection of another identity joins; alice updates her meta.
	carol := connectAs(t, r, "carol", nil)
	carol.send(`{"type":"track","id":"t2","channel":"rooms/1"}`)
	carolID := carol.expect("tracked")["member"].(string)
	join := bob.expect("join")
	if mem := memberOf(t, join); mem["id"] != carolID || mem["subject"] != "carol" {
		t.Fatalf("join = %v; want carol", join)
	}
	alice.send(`{"type":"track","id":"t3","channel":"rooms/1","meta":{"name":"Ada","status":"away"}}`)
	alice.expect("tracked")
	join = bob.expect("join")
	if mem := memberOf(t, join); mem["id"] != aliceID || mem["meta"].(map[string]any)["status"] != "away" {
		t.Fatalf("join after a meta update = %v; want alice, away", join)
	}

	// carol untracks: a leave. untrack again: not_found.
	carol.send(`{"type":"untrack","id":"u1","channel":"rooms/1"}`)
	if u := carol.expect("untracked"); u["id"] != "u1" || u["channel"] != "rooms/1" {
		t.Fatalf("untracked = %v", u)
	}
	if leave := bob.expect("leave"); memberOf(t, leave)["id"] != carolID {
		t.Fatalf("leave = %v; want carol", leave)
	}
	carol.send(`{"type":"untrack","id":"u2","channel":"rooms/1"}`)
	carol.expectError("not_found", "u2")

	// alice's connection closes: her leave, without meta.
	_ = alice.c.CloseNow()
	leave := bob.expect("leave")
	if mem := memberOf(t, leave); mem["id"] != aliceID || mem["meta"] != nil {
		t.Fatalf("leave on disconnect = %v; want alice, no meta", leave)
	}

	// A forbidden track, and presence on a pattern or with a bad name.
	bob.send(`{"type":"track","id":"t4","channel":"quiet/1"}`)
	bob.expectError("forbidden", "t4")
	bob.send(`{"type":"track","id":"t5","channel":"lobby"}`) // no rule covers it: closed
	bob.expectError("forbidden", "t5")
	bob.send(`{"type":"subscribe","id":"s2","sub":"all","channel":"rooms/*","presence":true}`)
	if e := bob.expectError("bad_frame", "s2"); e["field"] != "presence" {
		t.Fatalf("presence on a pattern: %v; want field presence", e)
	}

	// Everyone gone: the node forgets the channel.
	_ = carol.c.CloseNow()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ch, _ := r.srv.presence.Local(); ch == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node still holds presence for a channel everyone left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The member cap, and the meta bound, with their stable codes; a member at the cap may still
// update its meta.
func TestPresenceLimitsOverWebSocket(t *testing.T) {
	cfg := baseConfig()
	cfg.Presence = presence.Config{MaxMembers: 2, MaxMetaBytes: 32}
	r := start(t, cfg)
	var cs []*client
	for i, sub := range []string{"a", "b", "c"} {
		c := connectAs(t, r, sub, jwt.MapClaims{})
		c.send(`{"type":"track","id":"t","channel":"rooms/1"}`)
		if i < 2 {
			c.expect("tracked")
		} else {
			e := c.expectError("presence_full", "t")
			if e["status"] != float64(429) {
				t.Fatalf("presence_full status = %v; want 429", e["status"])
			}
		}
		cs = append(cs, c)
	}
	cs[0].send(`{"type":"track","id":"u","channel":"rooms/1","meta":{"s":"at the cap"}}`)
	cs[0].expect("tracked")
	cs[0].send(`{"type":"track","id":"big","channel":"rooms/1","meta":{"s":"` + strings.Repeat("x", 40) + `"}}`)
	if e := cs[0].expectError("frame_too_large", "big"); e["field"] != "meta" {
		t.Fatalf("meta past the bound: %v; want field meta", e)
	}
	cs[0].send(`{"type":"track","id":"bad","channel":"rooms/../1"}`)
	if e := cs[0].expectError("bad_frame", "bad"); e["field"] != "channel" {
		t.Fatalf("track on a bad name: %v; want bad_frame on channel", e)
	}
	// A leave frees a place.
	_ = cs[1].c.CloseNow()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs[2].send(`{"type":"track","id":"again","channel":"rooms/1"}`)
		m := cs[2].expect2("tracked", "error")
		if m["type"] == "tracked" {
			break
		}
		if m["code"] != "presence_full" || time.Now().After(deadline) {
			t.Fatalf("track after a member left: %v", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Over SSE streams, whose commands come by POST: a track, a roster for a subscriber with
// presence, a leave on untrack, and a leave when a tracking stream's client goes away (the
// stream's reader sees it, and the session's end untracks).
func TestPresenceOverSSE(t *testing.T) {
	cfg := baseConfig()
	cfg.Policy = policy.Rules{Channels: map[string]policy.ChannelRules{
		"rooms/*": {Subscribe: "true", Presence: "true"},
	}}
	r := start(t, cfg)
	open := func(sub string) (*sseClient, string, string) {
		t.Helper()
		c, resp := openSSE(t, r.url+"/v1/sse", bearerHeader(t, sub))
		if c == nil {
			t.Fatalf("GET /v1/sse as %s: %d", sub, resp.StatusCode)
		}
		session, _ := c.next("welcome").frame["session"].(string)
		if session == "" {
			t.Fatalf("%s's welcome has no session", sub)
		}
		return c, r.url + "/v1/sse/" + session, token(t, sub, time.Now().Add(time.Hour))
	}
	command := func(url, tok, frame string) {
		t.Helper()
		if code, m := postJSON(t, url, tok, frame); code != 202 {
			t.Fatalf("POST %s: %d %v, want 202", frame, code, m)
		}
	}

	alice, aliceCmd, aliceTok := open("alice")
	command(aliceCmd, aliceTok, `{"type":"track","id":"t1","channel":"rooms/1","meta":{"name":"Ada"}}`)
	aliceID, _ := alice.next("tracked").frame["member"].(string)
	if !strings.HasPrefix(aliceID, "alice/") {
		t.Fatalf("tracked member %q, want one of alice", aliceID)
	}

	bob, bobCmd, bobTok := open("bob")
	command(bobCmd, bobTok, `{"type":"subscribe","id":"s1","sub":"room","channel":"rooms/1","presence":true}`)
	bob.next("subscribed")
	if ids := memberIDs(t, bob.next("roster").frame); len(ids) != 1 || ids[0] != aliceID {
		t.Fatalf("roster %v, want alice's member alone", ids)
	}

	carol, carolCmd, carolTok := open("carol")
	command(carolCmd, carolTok, `{"type":"track","id":"t2","channel":"rooms/1"}`)
	carolID, _ := carol.next("tracked").frame["member"].(string)
	if mem := memberOf(t, bob.next("join").frame); mem["id"] != carolID {
		t.Fatalf("join of %v, want carol's %s", mem, carolID)
	}

	command(aliceCmd, aliceTok, `{"type":"untrack","id":"u1","channel":"rooms/1"}`)
	alice.next("untracked")
	if mem := memberOf(t, bob.next("leave").frame); mem["id"] != aliceID {
		t.Fatalf("leave of %v after alice's untrack, want %s", mem, aliceID)
	}

	// Carol's client goes away without a word: her member leaves with her session.
	carol.cancel()
	carol.resp.Body.Close()
	if mem := memberOf(t, bob.next("leave").frame); mem["id"] != carolID {
		t.Fatalf("leave of %v after carol's stream ended, want %s", mem, carolID)
	}
}
