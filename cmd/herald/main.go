// Command herald is Herald's one binary: the server, and the tools a person runs beside it.
//
// Exit codes: 0 success, 1 a runtime failure, 2 a usage or configuration error.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/heraldrt/herald/internal/problem"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// usageError is a mistake in how the command was called; main exits 2 for it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run a Herald node", runServe},
		{"dev", "run a node with a throwaway Postgres and a demo table", runDev},
		{"tail", "stream decoded Postgres changes as JSON lines", runTail},
		{"sub", "subscribe to a table or channel and print each frame as a JSON line", runSub},
		{"doctor", "check the config, Postgres and Redis, and say how to fix what is wrong", runDoctor},
		{"bench", "load a node with N subscribers and M events; report latency and cost", runBench},
		{"version", "print the version", runVersion},
	}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, "herald", version)
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: herald <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'herald <command> -h' for a command's flags.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err := c.run(ctx, args[1:], stdout, stderr)
		if err == nil || errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return 0
		}
		fmt.Fprintf(stderr, "herald %s: %v\n", c.name, err)
		if p, ok := problem.Of(err); ok {
			// The stable code to search the docs for (docs/OPERATIONS.md, Problems).
			fmt.Fprintf(stderr, "  code: %s\n", p.Code)
		}
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stderr, "herald: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}
