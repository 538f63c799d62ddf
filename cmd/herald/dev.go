package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/devpg"
	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"
)

const devUsage = `usage: herald dev [--listen 127.0.0.1:8080] [--no-postgres]

Runs a Herald node for development: a throwaway private PostgreSQL from the local server
binaries, with a demo table (public.items) that changes every few seconds, and the server
against it, with anonymous connections and client publishing allowed, and policy rules that
open the demo table and every channel to everyone (printed at start). Ctrl-C stops it all and
removes the database. Without PostgreSQL binaries it still serves channels, and says what is
missing.

flags:
`

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, devUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	noPG := fs.Bool("no-postgres", false, "serve channels only; start no database")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	cfg := config.Default()
	cfg.Listen = *listen
	cfg.LogLevel = "warn"
	cfg.AuthSection.AllowAnonymous = true
	cfg.Channels.ClientPublish = true
	var key [16]byte
	_, _ = rand.Read(key[:])
	apiKey := "dev-" + hex.EncodeToString(key[:])
	cfg.API.Keys = []string{apiKey}
	devPolicy(cfg)
	log := newLogger(cfg, stderr)

	var db *devpg.Server
	if !*noPG {
		fmt.Fprintln(stderr, "herald dev: starting a private PostgreSQL ...")
		var err error
		db, err = devpg.Start(ctx, devpg.Config{Logger: log})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(stderr, "herald dev: no PostgreSQL, so no table streams; serving channels only.\n  why: %v\n", err)
		} else {
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = db.Stop(sctx)
			}()
			if err := demoTable(ctx, db.URL()); err != nil {
				return err
			}
			cfg.ChangefeedSection.DatabaseURL = db.URL()
			cfg.ChangefeedSection.Tables = []string{"public.items"}
		}
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if db != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			demoWriter(runCtx, db.URL(), log)
		}()
	}
	return serve(runCtx, cfg, stderr, func(addr string) {
		printDevBanner(stdout, addr, apiKey, db)
		printDevPolicy(stdout, cfg)
	})
}

// devPolicy opens the demo table and every channel to everyone: a development node has no
// users to keep apart. The rules are written out, as a production config must write its own,
// and printed, so nobody takes them for the defaults (which close everything).
func devPolicy(cfg *config.Config) {
	cfg.PolicySection.Tables = map[string]config.TablePolicy{"public.items": {Row: "true"}}
	cfg.PolicySection.Channels = map[string]config.ChannelPolicy{
		"**": {Subscribe: "true", Publish: "true", Presence: "true"},
	}
}

// printDevPolicy prints the development node's policy as a config file would hold it.
func printDevPolicy(w io.Writer, cfg *config.Config) {
	b, err := yaml.Marshal(map[string]any{"policy": cfg.PolicySection})
	if err != nil {
		return
	}
	fmt.Fprintf(w, "\nPolicy: open to everyone, for development only. A server without rules is closed;\n"+
		"this is what herald dev runs with, as a config file (docs/POLICY.md) would say it:\n\n%s", indent(string(b), "  "))
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

func printDevBanner(w io.Writer, addr, apiKey string, db *devpg.Server) {
	http := "http://" + addr
	// herald sub's default --url is this command's default address.
	sub := "herald sub"
	if addr != "127.0.0.1:8080" {
		sub += " --url ws://" + addr
	}
	fmt.Fprintf(w, `
Herald is running on %s (anonymous connections and client publishing allowed).

  Subscribe:  %s --channel demo/chat
  WebSocket:  ws://%s/v1/ws   (subprotocol herald.v1; first frame {"type":"connect","id":"1"})
  SSE:        curl -N '%s/v1/sse?sub=chat&channel=demo/chat'
  Publish:    curl -X POST %s/v1/publish -H 'Authorization: Bearer %s' \
                -d '{"channel":"demo/chat","data":{"text":"hello"}}'
`, http, sub, addr, http, http, apiKey)
	if db != nil {
		fmt.Fprintf(w, `
  Postgres:   %s
              table public.items changes every few seconds; watch it with:
              %s --table public.items
              curl -N '%s/v1/sse?sub=items&table=public.items'
`, db.URL(), sub, http)
	}
	fmt.Fprintln(w, "\nCtrl-C stops it.")
}

// demoTable creates the demo table.
func demoTable(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to the private PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `CREATE TABLE items (
		id bigserial PRIMARY KEY, org_id text NOT NULL, title text, qty int, updated_at timestamptz DEFAULT now());
		ALTER TABLE items REPLICA IDENTITY FULL`)
	if err != nil {
		return fmt.Errorf("create the demo table: %w", err)
	}
	return nil
}

// demoWriter inserts, updates and deletes demo rows every few seconds until ctx ends.
func demoWriter(ctx context.Context, url string, log *slog.Logger) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		log.Warn("demo writer: connect", "error", err)
		return
	}
	defer conn.Close(context.Background())
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var sql string
		switch i % 4 {
		case 0, 1:
			sql = fmt.Sprintf(`INSERT INTO items (org_id, title, qty) VALUES ('org_%d', 'item %d', %d)`, i%3, i, i)
		case 2:
			sql = `UPDATE items SET qty = qty + 1, updated_at = now() WHERE id = (SELECT max(id) FROM items)`
		case 3:
			sql = `DELETE FROM items WHERE id = (SELECT min(id) FROM items)`
		}
		if _, err := conn.Exec(ctx, sql); err != nil && ctx.Err() == nil {
			log.Warn("demo writer", "error", err)
		}
	}
}
