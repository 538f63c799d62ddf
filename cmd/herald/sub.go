package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/heraldrt/herald/internal/wire"
)

const subUsage = `usage: herald sub [--url ws://127.0.0.1:8080] [--token T]
         (--table public.items [--filter JSON] [--columns a,b] | --channel name [--event e])
         [--from POS] [--sub ID] [--count N]

Subscribes to one table or channel of a Herald node and prints every frame it receives as one
JSON line on stdout, exactly as the server sent it: change, message, resync, expiring. What
happens to the connection (subscribed, errors, the close) goes to stderr with its code and what
to do. Ctrl-C stops it.

A subscription resumes after a position with --from: the position stderr printed when it
subscribed, or the pos of the last line (a change's "pos" and "idx" as 16/B374D848.3, a
message's {"epoch","offset"} as k7Hq2x:42).

Environment: HERALD_URL and HERALD_TOKEN are the defaults of --url and --token.
Exit codes: 0 on Ctrl-C or after --count frames, 1 when the server refuses or ends it, 2 on a
usage error.

flags:
`

// subArgs are herald sub's flags.
type subArgs struct {
	url, token       string
	table, filter    string
	columns          string
	channel, event   string
	from, sub        string
	snapshot         bool
	count            int
	subscription     client.Subscription
	handshakeTimeout time.Duration
}

func parseSubArgs(args []string, stderr io.Writer) (*subArgs, error) {
	fs := flag.NewFlagSet("sub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, subUsage)
		fs.PrintDefaults()
	}
	a := &subArgs{handshakeTimeout: 10 * time.Second}
	defURL := os.Getenv("HERALD_URL")
	if defURL == "" {
		defURL = "ws://127.0.0.1:8080"
	}
	fs.StringVar(&a.url, "url", defURL, "the node's URL; env HERALD_URL")
	fs.StringVar(&a.token, "token", os.Getenv("HERALD_TOKEN"), "access token (a JWT); none connects anonymously; env HERALD_TOKEN")
	fs.StringVar(&a.table, "table", "", "subscribe to a table's changes: schema.table")
	fs.StringVar(&a.filter, "filter", "", "table only: a filter, as JSON")
	fs.StringVar(&a.columns, "columns", "", "table only: the columns to send, comma-separated")
	fs.StringVar(&a.channel, "channel", "", "subscribe to a channel, or a pattern (rooms/*, docs/**)")
	fs.StringVar(&a.event, "event", "", "channel only: only this event name")
	fs.StringVar(&a.from, "from", "", "resume after this position: 16/B374D848.3 or k7Hq2x:42")
	fs.StringVar(&a.sub, "sub", "sub", "the subscription's id, as frames carry it")
	fs.BoolVar(&a.snapshot, "snapshot", false, "table only: print the rows that match now first (rows frames, then live), then the changes after them")
	fs.IntVar(&a.count, "count", 0, "exit after printing this many frames; 0: run until Ctrl-C")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Sprintf("unexpected argument %q; see herald sub -h", fs.Arg(0))}
	}
	s := client.Subscription{Sub: a.sub, Table: a.table, Channel: a.channel, Event: a.event, Snapshot: a.snapshot}
	switch {
	case a.snapshot && a.table == "":
		return nil, usageError{"--snapshot goes with --table: a channel has no rows to read"}
	case a.snapshot && a.from != "":
		return nil, usageError{"--snapshot reads the rows as they are now, --from resumes after a position you hold: give one of them"}
	case (a.table == "") == (a.channel == ""):
		return nil, usageError{"give one of --table and --channel"}
	case a.table != "" && a.event != "":
		return nil, usageError{"--event goes with --channel; filter a table with --filter"}
	case a.channel != "" && (a.filter != "" || a.columns != ""):
		return nil, usageError{"--filter and --columns go with --table"}
	case a.count < 0:
		return nil, usageError{"--count must be 0 or more"}
	}
	if a.filter != "" {
		if !json.Valid([]byte(a.filter)) {
			return nil, usageError{fmt.Sprintf("--filter %q is not valid JSON; e.g. --filter '{\"eq\":[\"org_id\",\"org_1\"]}'", a.filter)}
		}
		s.Filter = json.RawMessage(a.filter)
	}
	if a.columns != "" {
		for _, c := range strings.Split(a.columns, ",") {
			if c = strings.TrimSpace(c); c != "" {
				s.Columns = append(s.Columns, c)
			}
		}
	}
	if a.from != "" {
		p, err := client.ParsePosition(a.from)
		if err != nil {
			return nil, usageError{"--from: " + err.Error()}
		}
		if p.IsChannel() != (a.channel != "") {
			return nil, usageError{fmt.Sprintf("--from %s is a %s position, but the subscription is to a %s", a.from, kind(p.IsChannel()), kind(a.channel != ""))}
		}
		s.From = p
	}
	if _, err := client.Endpoint(a.url, "/v1/ws"); err != nil {
		return nil, usageError{"--url: " + err.Error()}
	}
	a.subscription = s
	return a, nil
}

func kind(channel bool) string {
	if channel {
		return "channel"
	}
	return "table"
}

func runSub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseSubArgs(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		var ue usageError
		if errors.As(err, &ue) {
			return err
		}
		return usageError{err.Error()}
	}

	hctx, cancel := context.WithTimeout(ctx, a.handshakeTimeout)
	defer cancel()
	c, err := client.Dial(hctx, a.url, client.Options{Token: a.token})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return explain(fmt.Errorf("connect to %s: %w", a.url, err))
	}
	defer c.Close()
	s := a.subscription
	pos, err := c.Subscribe(hctx, s)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return explain(err)
	}
	what := "channel " + s.Channel
	if s.Table != "" {
		what = "table " + s.Table
	}
	switch {
	case s.Snapshot:
		fmt.Fprintf(stderr, "herald sub: subscribed %q to %s with a snapshot (session %s); its live frame names the position to resume from with --from\n",
			s.Sub, what, c.Welcome().Session)
	case pos.IsZero():
		// A pattern spans channels whose positions are unrelated: there is nothing to resume from.
		fmt.Fprintf(stderr, "herald sub: subscribed %q to %s (session %s); a pattern has no position, so it cannot be resumed with --from\n",
			s.Sub, what, c.Welcome().Session)
	default:
		fmt.Fprintf(stderr, "herald sub: subscribed %q to %s at %s (session %s); resume with --from %s\n",
			s.Sub, what, pos, c.Welcome().Session, pos)
	}

	printed := 0
	for {
		f, raw, err := c.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return explain(err)
		}
		switch f := f.(type) {
		case *client.ErrorFrame:
			fmt.Fprintf(stderr, "herald sub: error %s (%d)%s: %s\n  what to do: %s\n", f.Code, f.StatusCode(),
				subOf(f.Sub), f.Message, client.CodeHint(f.Code, f.StatusCode()))
			continue
		case *client.Unsubscribed:
			if f.Sub == s.Sub {
				msg := fmt.Sprintf("the server ended subscription %q", f.Sub)
				if f.Code != "" {
					msg += fmt.Sprintf(": %s: %s\n  what to do: %s", f.Code, f.Message, client.CodeHint(f.Code, f.Code.Status()))
				}
				return errors.New(msg)
			}
			continue
		case *client.Resync:
			fmt.Fprintf(stderr, "herald sub: resync %q: items %s to %s may be lost (%s); re-read your view, the stream goes on after %s\n",
				f.Sub, orUnknown(f.First), f.Last, f.Reason, f.Last)
		case *client.Expiring:
			fmt.Fprintf(stderr, "herald sub: the token expires in %s; herald sub does not refresh it: restart with a fresh --token before then\n", f.ExpiresIn)
		}
		if _, err := stdout.Write(append(raw, '\n')); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
		printed++
		if a.count > 0 && printed >= a.count {
			return nil
		}
	}
}

func subOf(sub string) string {
	if sub == "" {
		return ""
	}
	return " on " + sub
}

func orUnknown(p wire.Position) string {
	if p.IsZero() {
		return "(unknown start)"
	}
	return p.String()
}

// explain adds what to do to an error that carries a code.
func explain(err error) error {
	var ce *client.CloseError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w\n  what to do: %s", err, ce.Hint())
	}
	var e *client.Error
	if errors.As(err, &e) {
		return fmt.Errorf("%w\n  what to do: %s", err, e.Hint())
	}
	return err
}
