package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/testenv"
)

// lockedBuffer is a log's destination written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func randomSecret(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// TestNoSecretInLogsOrErrors runs nodes through what goes wrong with secrets about (a wrong
// database password in the changefeed's URL, bad and foreign tokens, a bad API key, refused
// publishes, configs that fail to build) and collects every log line, at debug, and every
// error a person or a client is shown: what New and Run return, error frames, HTTP answers,
// /readyz's reasons. None holds the database password, an API key, a JWT secret or a client's
// token.
func TestNoSecretInLogsOrErrors(t *testing.T) {
	base, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// scripts/testenv's pg_hba makes this role log in with a SCRAM password: any other role
	// may be trusted, and a wrong password would pass.
	testenv.Exec(t, base.String(), `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_pw_scram') THEN CREATE ROLE herald_pw_scram LOGIN; END IF;
	END $$`)
	dbPassword := randomSecret("dbpw-")
	dbURL := *base
	dbURL.User = url.UserPassword("herald_pw_scram", dbPassword)
	q := dbURL.Query()
	q.Set("sslmode", "disable")
	dbURL.RawQuery = q.Encode()
	redisPassword := randomSecret("redispw-")
	jwtSecret := randomSecret("jwt-secret-") + randomSecret("-")
	apiKey := randomSecret("api-key-")
	foreignSecret := randomSecret("other-secret-") + randomSecret("-")

	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var shown []string // every error a person or a client is shown
	show := func(what string, v any) { shown = append(shown, fmt.Sprintf("%s: %v", what, v)) }

	// Configs that fail to build, each with a secret in it.
	{
		cfg := baseConfig()
		cfg.Logger = log
		cfg.Auth = auth.Config{Secrets: []string{"short-" + jwtSecret[:8]}}
		_, err := New(cfg)
		show("New with a short secret", err)
		if err == nil {
			t.Error("New took a secret of 14 bytes")
		}
		cfg = baseConfig()
		cfg.Logger = log
		cfg.Cluster = ClusterConfig{RedisURL: "redis://:" + redisPassword + "@127.0.0.1:1/0"}
		_, err = New(cfg)
		show("New with an unreachable Redis", err)
		if err == nil {
			t.Error("New reached a Redis on port 1")
		}
		cfg = baseConfig()
		cfg.Logger = log
		cfg.Changefeed = &changefeed.Config{DatabaseURL: "postgres://herald_pw_scram:" + dbPassword + "@127.0.0.1:notaport/db", Tables: []string{"public.items"}}
		_, err = New(cfg)
		show("New with a malformed database URL", err)
		if err == nil {
			t.Error("New took a database URL with port notaport")
		}
	}

	// A node that streams a database whose URL carries a password (which the test server, which
	// trusts its users, does not ask for).
	feedDB, err := url.Parse(testenv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Exec(t, feedDB.String(), itemsDDL)
	feedDB.User = url.UserPassword(feedDB.User.Username(), dbPassword)
	cfg := baseConfig()
	cfg.Logger = log
	cfg.Auth = auth.Config{Secrets: []string{jwtSecret}}
	cfg.APIKeys = []string{apiKey}
	cfg.Session.ClientPublish = true
	cfg.Policy = policy.Rules{
		Tables:   map[string]policy.TableRules{"public.items": {Row: "true"}},
		Channels: map[string]policy.ChannelRules{"open/**": {Subscribe: "true", Publish: "true"}, "locked/**": {Subscribe: "true"}},
	}
	cfg.Changefeed = feedConfig(t, feedDB.String())
	r := start(t, cfg)
	waitReady(t, r)

	sign := func(secret string, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := sign(jwtSecret, jwt.MapClaims{"sub": "ada", "exp": time.Now().Add(time.Hour).Unix()})
	refreshed := sign(jwtSecret, jwt.MapClaims{"sub": "ada", "exp": time.Now().Add(2 * time.Hour).Unix()})
	foreign := sign(foreignSecret, jwt.MapClaims{"sub": "eve", "exp": time.Now().Add(time.Hour).Unix()})
	otherIdentity := sign(jwtSecret, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()})
	expired := sign(jwtSecret, jwt.MapClaims{"sub": "ada", "exp": time.Now().Add(-time.Hour).Unix()})
	garbage := randomSecret("not-a-jwt-")
	tokens := []string{good, refreshed, foreign, otherIdentity, expired, garbage}

	// Bad tokens at connect: each answered with an error frame, then a close.
	for _, tok := range []string{foreign, expired, garbage} {
		c := dial(t, r)
		c.send(`{"type":"connect","id":"c","token":"` + tok + `"}`)
		m, err := c.read(5 * time.Second)
		show("connect with a bad token", m)
		if err != nil || m["type"] != "error" {
			t.Errorf("connect with a bad token: %v, %v; want an error frame", m, err)
		}
		_, err = c.read(5 * time.Second)
		show("close after a bad token", err)
	}
	// A session that refreshes badly, publishes where it may not, and asks for a table while
	// the stream cannot start.
	c := dial(t, r)
	c.send(`{"type":"connect","id":"c","token":"` + good + `"}`)
	c.expect("welcome")
	for _, f := range []string{
		`{"type":"refresh","id":"r1","token":"` + foreign + `"}`,
		`{"type":"refresh","id":"r2","token":"` + otherIdentity + `"}`,
		`{"type":"refresh","id":"r3","token":"` + garbage + `"}`,
		`{"type":"publish","id":"p1","channel":"locked/a","data":1}`,
		`{"type":"publish","id":"p2","channel":"bad channel","data":1}`,
		`{"type":"subscribe","id":"t1","sub":"t1","table":"public.items"}`,
		`{"type":"refresh","id":"r4","token":"` + refreshed + `"}`,
	} {
		c.send(f)
		m, err := c.read(15 * time.Second)
		show("reply", m)
		if err != nil {
			t.Fatalf("reply to %s: %v", f, err)
		}
	}
	// SSE with a bad token, in the header and in the query.
	for _, req := range []func() *http.Request{
		func() *http.Request {
			rq, _ := http.NewRequest(http.MethodGet, r.url+"/v1/sse?sub=s&channel=open/a", nil)
			rq.Header.Set("Authorization", "Bearer "+foreign)
			return rq
		},
		func() *http.Request {
			rq, _ := http.NewRequest(http.MethodGet, r.url+"/v1/sse?sub=s&channel=open/a&access_token="+garbage, nil)
			return rq
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := http.DefaultClient.Do(req().WithContext(ctx))
		if err == nil {
			b, _ := io.ReadAll(resp.Body) // the stream ends after its one error event
			resp.Body.Close()
			show("SSE with a bad token", fmt.Sprintf("%d %s", resp.StatusCode, b))
		}
		cancel()
	}
	// The publish API with a bad key, with no key, and refused publishes with the good one.
	for _, tt := range []struct{ key, body string }{
		{apiKey + "x", `{"channel":"open/a","data":1}`},
		{"", `{"channel":"open/a","data":1}`},
		{"x" + apiKey, `{"channel":"open/a","data":1}`},
		{apiKey, `{"channel":"bad channel","data":1}`},
		{apiKey, `{"channel":"open/a","data":` + strings.Repeat("1", 80<<10) + `}`},
		{apiKey, `not json ` + apiKey},
	} {
		code, m := postJSON(t, r.url+"/v1/publish", tt.key, tt.body)
		show("publish", fmt.Sprintf("%d %v", code, m))
		if code == 200 {
			t.Errorf("publish %q with key %q was taken", tt.body[:min(40, len(tt.body))], tt.key)
		}
	}
	testenv.Exec(t, feedDB.String(), `INSERT INTO items (id, org_id) VALUES (1, 'acme')`)
	show("change", c.expect("change"))
	show("/metrics", scrape(t, r))
	_, reason := readyz(t, r.url)
	show("/readyz", reason)
	r.halt(t)

	// A node whose changefeed logs in with a wrong password: it stops, and says why.
	{
		cfg := cfg
		cfg.Changefeed = feedConfig(t, dbURL.String())
		srv, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = srv.Run(ctx)
		cancel()
		show("Run with a wrong database password", err)
		if err == nil {
			t.Error("a node whose database refused its password ran on")
		}
	}

	all := logs.String() + "\n" + strings.Join(shown, "\n")
	// The run met what it was meant to: otherwise the test proves nothing.
	for _, want := range []string{"password authentication failed", "unauthorized", "token_expired", "forbidden", "bad_frame"} {
		if !strings.Contains(all, want) {
			t.Errorf("the run never met %q: the logs and errors it collected do not show it", want)
		}
	}
	secrets := map[string]string{"the database password": dbPassword, "the Redis password": redisPassword,
		"the JWT secret": jwtSecret, "a foreign JWT secret": foreignSecret, "an API key": apiKey}
	for i, tok := range tokens {
		secrets[fmt.Sprintf("client token %d", i)] = tok
		// A JWT's signature alone is as good as a token to nobody, but it is the token's.
		if _, sig, ok := strings.Cut(tok[strings.IndexByte(tok, '.')+1:], "."); ok {
			secrets[fmt.Sprintf("client token %d's signature", i)] = sig
		}
	}
	for what, secret := range secrets {
		for _, line := range strings.Split(all, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("%s shows: %s", what, line)
			}
		}
	}
	t.Logf("checked %d log lines and %d errors", strings.Count(logs.String(), "\n"), len(shown))
}
