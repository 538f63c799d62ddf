package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed"
)

const tailUsage = `usage: herald tail [flags]

Streams decoded Postgres changes as JSON lines on stdout, one line per change, in commit order.
Each line carries its transaction's commit LSN ("lsn"). To resume exactly after a stop or a
crash, pass the last line's lsn to --from: transactions at or before it are not printed again.

A transaction's lines are written together, in one write. One too large to hold in memory is
printed as a single {"op":"overflow",...} line naming the tables it changed.

Logs go to stderr. The database needs wal_level=logical and a role with REPLICATION.

flags:
`

// stringList is a repeatable, comma-separated flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tailUsage)
		fs.PrintDefaults()
	}
	var (
		tables, messages      stringList
		cfg                   changefeed.Config
		from, until, logLevel string
		quiet                 bool
	)
	fs.StringVar(&cfg.DatabaseURL, "database-url", firstEnv("HERALD_DATABASE_URL", "DATABASE_URL"), "Postgres URL (env HERALD_DATABASE_URL or DATABASE_URL)")
	fs.Var(&tables, "table", "schema.table to stream; repeat or comma-separate (default: every table of the publication)")
	fs.StringVar(&cfg.Slot, "slot", "herald_tail", "replication slot name; created if absent")
	fs.BoolVar(&cfg.TemporarySlot, "temporary", false, "use a throwaway slot that Postgres drops when tail exits (its position is lost)")
	fs.StringVar(&cfg.Publication, "publication", "herald", "publication name; created for --table if absent")
	fs.StringVar(&from, "from", "", "skip transactions committed at or before this LSN (the last lsn you saw)")
	fs.StringVar(&until, "until", "", "exit once everything committed before this LSN has been printed")
	fs.StringVar(&cfg.TenantColumn, "tenant-column", "", "column whose value becomes each line's tenant")
	fs.Var(&messages, "messages", "logical message prefixes to print; '*' for all")
	fs.BoolVar(&quiet, "quiet", false, "print no changes, only a summary on stderr at exit")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q; name tables with --table", fs.Arg(0))}
	}
	cfg.Tables = tables
	cfg.MessagePrefixes = messages
	var err error
	if cfg.From, err = parseLSNFlag("from", from); err != nil {
		return err
	}
	untilLSN, err := parseLSNFlag("until", until)
	if err != nil {
		return err
	}
	if untilLSN != 0 {
		// With nothing left to print, the end is reached when the server's idle position is
		// confirmed, which happens on the status tick: tick every second, not every ten.
		cfg.StatusInterval = time.Second
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", logLevel)}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if cfg.DatabaseURL == "" {
		return usageError{"no database: pass --database-url or set HERALD_DATABASE_URL"}
	}

	tuneGC()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &tailSink{w: stdout, quiet: quiet, started: time.Now(), until: untilLSN, done: cancel}
	feed, err := changefeed.New(cfg, out)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	if untilLSN != 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchUntil(runCtx, feed, untilLSN, cancel)
		}()
	}
	err = feed.Run(runCtx)
	cancel()
	wg.Wait()
	if quiet || untilLSN != 0 {
		out.summary(stderr, feed.Stats())
	}
	return err
}

// watchUntil ends the run once the feed has accepted everything before until: a transaction
// ending at or past it, or a confirmed position there when nothing more was committed.
func watchUntil(ctx context.Context, feed *changefeed.Feed, until change.LSN, done func()) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s := feed.Stats(); s.Confirmed >= until {
				done()
				return
			}
		}
	}
}

// tailGCPercent is tail's GOGC unless the environment sets one. What tail holds live is small,
// the transaction being assembled and a few queued, while every row it decodes is a fresh
// allocation: at the default of 100 the collector ran every few transactions, and with it the
// runtime returned pages to the system that the next transaction faulted back in. At 400 it
// runs a quarter as often (BenchmarkPump: about a third less CPU a row), and the heap may grow
// to five times what is live; a GOMEMLIMIT still bounds it, since the collector runs sooner as
// the heap nears the limit whatever GOGC says.
const tailGCPercent = 400

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(tailGCPercent)
	}
}

func parseLSNFlag(name, v string) (change.LSN, error) {
	if v == "" {
		return 0, nil
	}
	l, err := change.ParseLSN(v)
	if err != nil {
		return 0, usageError{fmt.Sprintf("--%s: %v", name, err)}
	}
	return l, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// tailSink prints each transaction as JSON lines, in one write, so a process killed between
// two writes leaves whole transactions behind it and --from resumes exactly.
type tailSink struct {
	w       io.Writer
	quiet   bool
	started time.Time
	buf     []byte
	txns    int
	events  int
	// until, when set, ends the run (done) once a transaction ending at or past it is
	// printed: every later one commits after it. Stopping confirms what was printed.
	until change.LSN
	done  func()
}

func (s *tailSink) Accept(_ context.Context, txn *change.Txn) error {
	s.txns++
	s.events += len(txn.Events)
	if s.until != 0 && txn.EndLSN >= s.until {
		defer s.done()
	}
	if s.quiet {
		return nil
	}
	b := s.buf[:0]
	if txn.Overflow != nil {
		b = append(b, `{"op":"overflow","lsn":"`...)
		b, _ = txn.CommitLSN.AppendText(b)
		b = append(b, `","txid":`...)
		b = strconv.AppendUint(b, uint64(txn.XID), 10)
		b = append(b, `,"changes":`...)
		b = strconv.AppendInt(b, int64(txn.Overflow.Changes), 10)
		b = append(b, `,"tables":{`...)
		first := true
		for t, n := range txn.Overflow.Tables {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = change.AppendJSONString(b, t)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, "}}\n"...)
	}
	for i := range txn.Events {
		b = txn.Events[i].AppendJSON(b)
		b = append(b, '\n')
	}
	s.buf = b
	if _, err := s.w.Write(b); err != nil {
		return fmt.Errorf("write to stdout: %w", err)
	}
	return nil
}

func (s *tailSink) summary(w io.Writer, st changefeed.Stats) {
	secs := time.Since(s.started).Seconds()
	fmt.Fprintf(w, "tail: %d transactions, %d changes in %.2fs (%.0f changes/s), confirmed %s\n",
		s.txns, s.events, secs, float64(s.events)/secs, st.Confirmed)
}
