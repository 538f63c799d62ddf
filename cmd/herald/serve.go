package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/server"
	"go.yaml.in/yaml/v3"
)

const serveUsage = `usage: herald serve [--config herald.yaml] [--print-config]

Runs a Herald node. Settings come from the config file, then HERALD_* environment variables
(docs/CONFIG.md lists every key). With no file, the embedded default is one node with
in-memory state on 127.0.0.1:8080; it still needs auth.secrets (HERALD_AUTH_SECRETS) or
auth.allow_anonymous: true.

flags:
`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	path := fs.String("config", os.Getenv("HERALD_CONFIG"), "config file (YAML); env HERALD_CONFIG")
	printConfig := fs.Bool("print-config", false, "print the effective configuration, secrets redacted, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		return usageError{err.Error()}
	}
	if *printConfig {
		return printRedacted(stdout, cfg)
	}
	if msg := policyNotEnforced(cfg); msg != "" {
		newLogger(cfg, stderr).Warn(msg, "tables", len(cfg.PolicySection.Tables), "channels", len(cfg.PolicySection.Channels))
	}
	return serve(ctx, cfg, stderr, nil)
}

// policyNotEnforced warns, while the policy gate is checked at load but not yet enforced, that
// configured rules protect nothing: someone who wrote them must not believe otherwise.
func policyNotEnforced(cfg *config.Config) string {
	if len(cfg.PolicySection.Tables) == 0 && len(cfg.PolicySection.Channels) == 0 {
		return ""
	}
	return "policy rules are configured and checked, but this version does not enforce them yet: " +
		"any authenticated client may subscribe to any streamed table and read every column (docs/POLICY.md, Status)"
}

func printRedacted(w io.Writer, cfg *config.Config) error {
	b, err := yaml.Marshal(cfg.Redacted())
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// newLogger builds the process logger from the config.
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs a node until ctx ends. listening, when set, is called with the bound address.
func serve(ctx context.Context, cfg *config.Config, logw io.Writer, listening func(addr string)) error {
	log := newLogger(cfg, logw)
	srv, err := server.New(server.ConfigFrom(cfg, log))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Listening():
		if listening != nil {
			listening(srv.Addr())
		}
	case err := <-done:
		return err
	}
	return <-done
}
