package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/testenv"
)

// docsDDL is the policy tests' table: the tenant is part of the key, so a row rule over it is
// exact under REPLICA IDENTITY DEFAULT too (Postgres logs the old key whenever it changes).
const docsDDL = `CREATE TABLE docs (org_id text, id int, title text, secret text, PRIMARY KEY (org_id, id))`

// secretValue is the hidden column's value in every row: it must appear in no frame a
// non-admin receives.
const secretValue = "s3cr3t-v4lue"

// docsPolicy: each identity sees its own organisation's rows; only admins see secret; a
// banned identity may not subscribe; anyone may subscribe to rooms, only admins publish.
func docsPolicy() policy.Rules {
	return policy.Rules{
		Tables: map[string]policy.TableRules{"public.docs": {
			Subscribe:   `!has(auth.banned)`,
			Row:         `row.org_id == auth.org_id`,
			ColumnsRule: `has(auth.role) && auth.role == "admin" ? ["org_id", "id", "title", "secret"] : ["org_id", "id", "title"]`,
		}},
		Channels: map[string]policy.ChannelRules{"rooms/*": {Subscribe: "true", Publish: `has(auth.role) && auth.role == "admin"`}},
	}
}

// startPolicy starts a server streaming public.docs under docsPolicy, the table's replica
// identity set to identity.
func startPolicy(t *testing.T, identity string) (*running, string) {
	t.Helper()
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, docsDDL, `ALTER TABLE docs REPLICA IDENTITY `+identity, `CREATE TABLE notes (id int PRIMARY KEY)`)
	cfg := baseConfig()
	cfg.Session.MaxSubscriptions = 50
	cfg.Session.ClientPublish = true
	cfg.Changefeed = feedConfig(t, url)
	cfg.Changefeed.Tables = []string{"public.docs", "public.notes"} // notes streams, without rules
	cfg.Policy = docsPolicy()
	r := start(t, cfg)
	waitReady(t, r)
	return r, url
}

// connectAs dials and connects with a token carrying claims (and sub, exp).
func connectAs(t *testing.T, r *running, sub string, claims jwt.MapClaims) *client {
	t.Helper()
	c := dial(t, r)
	m := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		m[k] = v
	}
	c.send(`{"type":"connect","id":"c1","token":"` + tokenClaims(t, m) + `"}`)
	c.expect("welcome")
	return c
}

func subscribeDocs(c *client, sub string) {
	c.t.Helper()
	c.send(`{"type":"subscribe","id":"` + sub + `","sub":"` + sub + `","table":"public.docs"}`)
	c.expect("subscribed")
}

// tenantFrames reads c's frames up to the sentinel row (id 999) of org, and returns the change
// frames before it as "op:id", failing on any frame that carries the hidden column.
func tenantFrames(t *testing.T, c *client, org string, hidden bool) []string {
	t.Helper()
	var got []string
	for {
		m, err := c.read(20 * time.Second)
		if err != nil {
			t.Fatalf("%s: waiting for the sentinel: %v; so far %v", org, err, got)
		}
		raw, _ := json.Marshal(m)
		if hidden && (strings.Contains(string(raw), "secret") || strings.Contains(string(raw), secretValue)) {
			t.Errorf("%s: frame %s carries the hidden column", org, raw)
		}
		if m["type"] != "change" {
			t.Fatalf("%s: unexpected frame %s", org, raw)
		}
		row, _ := m["row"].(map[string]any)
		if row == nil {
			row, _ = m["old"].(map[string]any)
		}
		if row["org_id"] != org {
			t.Errorf("%s: frame %s is another tenant's row", org, raw)
		}
		id := fmt.Sprint(row["id"])
		if id == "999" {
			return got
		}
		got = append(got, fmt.Sprintf("%s:%s", m["op"], id))
	}
}

// TestPolicyTenantsOverWebSocket: two tenants never see each other's rows, through inserts,
// updates that move a row between them (leave for one, enter for the other, both ways),
// updates and deletes, under both replica identities; a non-admin never receives the hidden
// column, in a row or an old image; a subscriber whose claims make the rule fail gets an
// error naming the rule and a policy_error resync, and nothing else, while the others keep
// receiving.
func TestPolicyTenantsOverWebSocket(t *testing.T) {
	for _, identity := range []string{"DEFAULT", "FULL"} {
		t.Run(identity, func(t *testing.T) {
			r, url := startPolicy(t, identity)
			acme := connectAs(t, r, "u-acme", jwt.MapClaims{"org_id": "acme"})
			globex := connectAs(t, r, "u-globex", jwt.MapClaims{"org_id": "globex"})
			broken := connectAs(t, r, "u-broken", nil) // no org_id: the row rule cannot decide
			subscribeDocs(acme, "d")
			subscribeDocs(globex, "d")
			subscribeDocs(broken, "d")

			testenv.Exec(t, url,
				`INSERT INTO docs VALUES ('acme', 1, 'a', '`+secretValue+`')`,
				`INSERT INTO docs VALUES ('globex', 2, 'g', '`+secretValue+`')`,
				`UPDATE docs SET org_id = 'globex' WHERE id = 1`, // acme -> globex
				`UPDATE docs SET org_id = 'acme' WHERE id = 1`,   // and back
				`UPDATE docs SET title = 'a2' WHERE id = 1`,
				`DELETE FROM docs WHERE id = 1`,
				`DELETE FROM docs WHERE id = 2`,
				`INSERT INTO docs VALUES ('acme', 999, 'sentinel', '`+secretValue+`')`,
				`INSERT INTO docs VALUES ('globex', 999, 'sentinel', '`+secretValue+`')`)

			if diff := cmp.Diff([]string{"insert:1", "leave:1", "enter:1", "update:1", "delete:1"}, tenantFrames(t, acme, "acme", true)); diff != "" {
				t.Errorf("acme (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"insert:2", "enter:1", "leave:1", "delete:2"}, tenantFrames(t, globex, "globex", true)); diff != "" {
				t.Errorf("globex (-want +got):\n%s", diff)
			}

			// The broken subscriber: one error naming the rule, then resyncs, never a row.
			e := broken.expect("error")
			if e["code"] != "policy_error" || e["sub"] != "d" || !strings.Contains(fmt.Sprint(e["message"]), `policy.tables."public.docs".row`) {
				t.Errorf("error %v: want policy_error for sub d naming the row rule", e)
			}
			sawResync := false
			for {
				m, err := broken.read(time.Second)
				if err != nil {
					break
				}
				if m["type"] != "resync" || m["reason"] != "policy_error" || m["sub"] != "d" {
					t.Fatalf("broken subscriber got %v, want only policy_error resyncs", m)
				}
				sawResync = true
			}
			if !sawResync {
				t.Error("the broken subscriber got no policy_error resync")
			}
		})
	}
}

// TestPolicyRefusals: a subscribe rule that denies, a table or channel without rules, a publish
// rule that denies (forbidden); a filter or a column list on a hidden column is refused as
// unknown, and no message names the hidden column.
func TestPolicyRefusals(t *testing.T) {
	r, _ := startPolicy(t, "FULL")
	banned := connectAs(t, r, "u-banned", jwt.MapClaims{"org_id": "acme", "banned": true})
	banned.send(`{"type":"subscribe","id":"b","sub":"b","table":"public.docs"}`)
	banned.expectError("forbidden", "b")

	c := connectAs(t, r, "u-acme", jwt.MapClaims{"org_id": "acme"})
	for _, tt := range []struct{ frame, code string }{
		{`{"type":"subscribe","id":"f","sub":"f","table":"public.docs","filter":{"eq":["secret","x"]}}`, "unknown_column"},
		{`{"type":"subscribe","id":"g","sub":"g","table":"public.docs","filter":{"and":[{"eq":["id",1]},{"gt":["secret","x"]}]}}`, "unknown_column"},
		{`{"type":"subscribe","id":"h","sub":"h","table":"public.docs","columns":["id","secret"]}`, "unknown_column"},
		{`{"type":"subscribe","id":"i","sub":"i","table":"public.notes"}`, "forbidden"},
		{`{"type":"subscribe","id":"j","sub":"j","channel":"elsewhere"}`, "forbidden"},
		{`{"type":"publish","id":"k","channel":"rooms/1","data":1}`, "forbidden"},
	} {
		c.send(tt.frame)
		m := c.expect("error")
		if m["code"] != tt.code {
			t.Errorf("%s: got %v, want %s", tt.frame, m, tt.code)
		}
		if raw, _ := json.Marshal(m); strings.Contains(string(raw), "secret") {
			t.Errorf("%s: the refusal %s names the hidden column", tt.frame, raw)
		}
	}
	// A column that does not exist is refused alike, so the two cannot be told apart.
	c.send(`{"type":"subscribe","id":"n","sub":"n","table":"public.docs","filter":{"eq":["nosuch","x"]}}`)
	if m := c.expect("error"); m["code"] != "unknown_column" || strings.Contains(fmt.Sprint(m["message"]), "nosuch") {
		t.Errorf("a missing column: %v, want unknown_column naming no column", m)
	}
	// What the rules allow goes through.
	c.send(`{"type":"subscribe","id":"ok","sub":"ok","table":"public.docs","filter":{"eq":["title","x"]},"columns":["id","title"]}`)
	c.expect("subscribed")
	c.send(`{"type":"subscribe","id":"room","sub":"room","channel":"rooms/1"}`)
	c.expect("subscribed")
	admin := connectAs(t, r, "u-admin", jwt.MapClaims{"org_id": "acme", "role": "admin"})
	admin.send(`{"type":"publish","id":"p","channel":"rooms/1","data":{"x":1}}`)
	admin.expect("published")
	if m := c.expect("message"); m["sub"] != "room" {
		t.Errorf("message %v, want it on room", m)
	}
	// The HTTP API is the server's own publisher: the channel rules do not apply to it.
	publish(t, r, "rooms/1", `2`)
	c.expect("message")
}

// TestPolicyRefreshRevokes: a refresh whose claims no longer allow a subscription ends it with
// an unprompted unsubscribed (forbidden), keeps the rest, and the connection stays up; one
// whose claims change the rows the rule allows moves the subscription to them.
func TestPolicyRefreshRevokes(t *testing.T) {
	r, url := startPolicy(t, "FULL")
	c := connectAs(t, r, "u-1", jwt.MapClaims{"org_id": "acme"})
	subscribeDocs(c, "d")
	c.send(`{"type":"subscribe","id":"room","sub":"room","channel":"rooms/1"}`)
	c.expect("subscribed")

	// Moved to globex: the same subscription now sees globex's rows.
	moved := tokenClaims(t, jwt.MapClaims{"sub": "u-1", "org_id": "globex", "exp": time.Now().Add(time.Hour).Unix()})
	c.send(`{"type":"refresh","id":"r1","token":"` + moved + `"}`)
	c.expect("refreshed")
	testenv.Exec(t, url, `INSERT INTO docs VALUES ('acme', 1, 'a', 'x')`, `INSERT INTO docs VALUES ('globex', 999, 'g', 'x')`)
	if diff := cmp.Diff([]string(nil), tenantFrames(t, c, "globex", true)); diff != "" {
		t.Errorf("after moving to globex (-want +got):\n%s", diff)
	}

	banned := tokenClaims(t, jwt.MapClaims{"sub": "u-1", "org_id": "globex", "banned": true, "exp": time.Now().Add(time.Hour).Unix()})
	c.send(`{"type":"refresh","id":"r2","token":"` + banned + `"}`)
	var ended, refreshed bool
	for !ended || !refreshed {
		m := c.expect2("unsubscribed", "refreshed")
		switch m["type"] {
		case "unsubscribed":
			if m["sub"] != "d" || m["code"] != "forbidden" || m["id"] != nil {
				t.Errorf("unsubscribed %v: want sub d ended unprompted with forbidden", m)
			}
			ended = true
		case "refreshed":
			refreshed = true
		}
	}
	testenv.Exec(t, url, `INSERT INTO docs VALUES ('globex', 2, 'g', 'x')`)
	publish(t, r, "rooms/1", `1`)
	if m := c.expect("message"); m["sub"] != "room" {
		t.Errorf("got %v, want the channel subscription's message, and nothing of the ended one", m)
	}
	c.send(`{"type":"ping","id":"p"}`)
	c.expect("pong")
}

// expect2 reads the next frame, which must be of one of two types.
func (c *client) expect2(a, b string) map[string]any {
	c.t.Helper()
	m, err := c.read(5 * time.Second)
	if err != nil {
		c.t.Fatalf("waiting for %s or %s: %v", a, b, err)
	}
	if m["type"] != a && m["type"] != b {
		c.t.Fatalf("got %v, want %s or %s", m, a, b)
	}
	return m
}

// TestPolicyOverSSE: the same gate over SSE: a URL subscription sees its own tenant's rows
// only, without the hidden column, and a denied subscribe is refused.
func TestPolicyOverSSE(t *testing.T) {
	r, url := startPolicy(t, "FULL")
	tok := tokenClaims(t, jwt.MapClaims{"sub": "u-sse", "org_id": "acme", "exp": time.Now().Add(time.Hour).Unix()})
	s, resp := openSSE(t, r.url+"/v1/sse?sub=d&table=public.docs", map[string][]string{"Authorization": {"Bearer " + tok}})
	if s == nil {
		t.Fatalf("GET /v1/sse: %d", resp.StatusCode)
	}
	s.next("welcome")
	s.next("subscribed")
	testenv.Exec(t, url,
		`INSERT INTO docs VALUES ('globex', 1, 'g', '`+secretValue+`')`,
		`INSERT INTO docs VALUES ('acme', 2, 'a', '`+secretValue+`')`,
		`UPDATE docs SET org_id = 'globex' WHERE id = 2`,
		`UPDATE docs SET org_id = 'acme' WHERE id = 1`)
	var got []string
	for range 3 {
		ev := s.next("change")
		raw, _ := json.Marshal(ev.frame)
		if strings.Contains(string(raw), secretValue) || strings.Contains(string(raw), "secret") {
			t.Errorf("event %s carries the hidden column", raw)
		}
		row, _ := ev.frame["row"].(map[string]any)
		if row == nil {
			row, _ = ev.frame["old"].(map[string]any)
		}
		got = append(got, fmt.Sprintf("%s:%v", ev.frame["op"], row["id"]))
	}
	if diff := cmp.Diff([]string{"insert:2", "leave:2", "enter:1"}, got); diff != "" {
		t.Errorf("SSE acme (-want +got):\n%s", diff)
	}

	banned := tokenClaims(t, jwt.MapClaims{"sub": "u-b", "org_id": "acme", "banned": true, "exp": time.Now().Add(time.Hour).Unix()})
	b, _ := openSSE(t, r.url+"/v1/sse", map[string][]string{"Authorization": {"Bearer " + banned}})
	w := b.next("welcome")
	cmd := r.url + "/v1/sse/" + fmt.Sprint(w.frame["session"])
	if code, m := postJSON(t, cmd, banned, `{"type":"subscribe","id":"s","sub":"s","table":"public.docs"}`); code != 202 {
		t.Fatalf("command: %d %v", code, m)
	}
	if ev := b.next("error"); ev.frame["code"] != "forbidden" {
		t.Errorf("banned subscribe over SSE: %v, want forbidden", ev.frame)
	}
}

// TestPolicyCompileErrorStopsTheNode: a table rule that names a column the table lacks is found
// once the stream is live, against the columns Postgres reports, and stops the node with the
// rule's name, its position and the fix.
func TestPolicyCompileErrorStopsTheNode(t *testing.T) {
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, docsDDL)
	cfg := baseConfig()
	cfg.Changefeed = feedConfig(t, url)
	cfg.Changefeed.Tables = []string{"public.docs"}
	cfg.Policy = policy.Rules{Tables: map[string]policy.TableRules{"public.docs": {Row: `row.titel == "x"`}}}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v (the table's columns are only known once the stream is live)", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	select {
	case err := <-done:
		var ce *policy.CompileError
		if !errors.As(err, &ce) || ce.Rule != `policy.tables."public.docs".row` || ce.Line != 1 || !strings.Contains(ce.Fix, "title") {
			t.Errorf("Run: %v, want the row rule's compile error at 1:x suggesting title", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop within 30s")
	}
}
