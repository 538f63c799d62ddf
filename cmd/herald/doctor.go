package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/heraldrt/herald/internal/doctor"
)

const doctorUsage = `usage: herald doctor [--config herald.yaml] [--json]

Checks, one fact at a time, what herald serve needs of its config, its Postgres and its Redis,
and says for each: ok, warn or fail, what it found, and the fix. Reads the same config file and
HERALD_* variables as herald serve. Changes nothing: it never creates the slot or the
publication.

Exit status: 0 when nothing failed (warnings alone included), 1 when a check failed, 2 for a
usage error. docs/OPERATIONS.md ("herald doctor") lists every check.

flags:
`

// errChecksFailed is doctor's failure: the report has said what failed and how to fix it.
type errChecksFailed struct{ summary string }

func (e errChecksFailed) Error() string { return e.summary }

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, doctorUsage)
		fs.PrintDefaults()
	}
	path := fs.String("config", os.Getenv("HERALD_CONFIG"), "config file (YAML); env HERALD_CONFIG")
	asJSON := fs.Bool("json", false, "print one JSON object per check, one per line")
	timeout := fs.Duration("timeout", doctor.DefaultTimeout, "how long the checks of each service (Postgres, Redis) may take")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *timeout <= 0 {
		return usageError{"--timeout must be above zero"}
	}
	report := doctor.Run(ctx, doctor.Config{Path: *path, Env: os.Environ(), Timeout: *timeout})
	write := report.WriteText
	if *asJSON {
		write = report.WriteJSON
	}
	if err := write(stdout); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if report.Failed() {
		return errChecksFailed{report.Summary()}
	}
	return nil
}
