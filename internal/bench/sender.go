package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/client"
	"github.com/jackc/pgx/v5"
)

// sender produces the events: publications or committed rows.
type sender interface {
	// send produces n events at rate per second (0: as fast as it can) and returns when all
	// are sent, when stop is closed (it issues no more events, and lets those in flight
	// finish), or when ctx ends (it abandons those in flight too). Each event is counted in
	// c.sent once the server has taken it (published, or committed), so that every event the
	// subscribers may receive is counted, and in c.issued as it is handed over.
	send(ctx context.Context, stop <-chan struct{}, n int, rate float64, c *counts) error
}

// counts are a sender's counters, read by the progress loop while it runs.
type counts struct {
	issued atomic.Int64 // handed to the server
	sent   atomic.Int64 // taken by the server: published, or committed
	// transactions counts the committed transactions (table mode).
	transactions atomic.Int64
	// answer is how long each publish took to be answered (channel mode): the request's round
	// trip, from before it was sent to its response read.
	answer histogram
}

// schedule returns when event i (0-based) is due: start + i/rate.
func schedule(start time.Time, i int, rate float64) time.Time {
	if rate <= 0 {
		return start
	}
	return start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
}

// sleepUntil waits until t; false when ctx ended or stop was closed first.
func sleepUntil(ctx context.Context, stop <-chan struct{}, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	default:
	}
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// publisher publishes to a channel through the HTTP API, from several workers so one slow
// request does not hold the schedule up. Event i goes to bases[i mod len(bases)].
type publisher struct {
	hc      *http.Client
	bases   []string
	apiKey  string
	channel string
	workers int
}

func (p *publisher) send(ctx context.Context, stop <-chan struct{}, n int, rate float64, c *counts) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for w := 0; w < p.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var data []byte
			for {
				i := int(next.Add(1) - 1)
				if i >= n || !sleepUntil(ctx, stop, schedule(start, i, rate)) {
					return
				}
				sentAt := time.Now()
				data = channelData(data[:0], sentAt.UnixNano(), i)
				c.issued.Add(1)
				_, err := client.PublishHTTP(ctx, p.hc, p.bases[i%len(p.bases)], p.apiKey, client.Publication{Channel: p.channel, Data: json.RawMessage(data)})
				c.answer.record(time.Since(sentAt))
				if err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("publish event %d: %w", i, err); cancel() })
					}
					return
				}
				c.sent.Add(1)
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// writer commits rows to a bench table through Postgres: every tick, the rows due by then in
// one INSERT, which is one small transaction. With updates, every other transaction updates
// the rows the one before inserted instead.
type writer struct {
	dbURL   string
	table   pgx.Identifier
	updates bool
	tenants int           // the organisations rows are spread over; default 10
	tick    time.Duration // default 10ms
	maxRows int           // per transaction; default 100
}

// The bench table's shape; CreateTable makes it.
const benchColumns = `(id bigserial PRIMARY KEY, org_id text NOT NULL, payload text, sent_at timestamptz)`

// ParseTable reads "schema.table" (or "table", in public) as an identifier.
func ParseTable(name string) (pgx.Identifier, error) {
	parts := strings.Split(name, ".")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return pgx.Identifier{"public", parts[0]}, nil
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return pgx.Identifier(parts), nil
	}
	return nil, fmt.Errorf("table %q: want schema.table, e.g. public.bench_items", name)
}

// CreateTable creates the bench table unless it exists: bench_items(id bigserial primary key,
// org_id text, payload text, sent_at timestamptz). payload carries each event's send time
// in unix nanoseconds (sent_at holds it too, to the millisecond the changefeed sends). It is
// REPLICA IDENTITY FULL, so a bench subscription may filter on org_id.
func CreateTable(ctx context.Context, dbURL string, table pgx.Identifier) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect to the bench database: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table.Sanitize()+" "+benchColumns+"; ALTER TABLE "+table.Sanitize()+" REPLICA IDENTITY FULL"); err != nil {
		return fmt.Errorf("create %s: %w", table.Sanitize(), err)
	}
	return nil
}

func (w *writer) send(ctx context.Context, stop <-chan struct{}, n int, rate float64, c *counts) error {
	if w.tick <= 0 {
		w.tick = 10 * time.Millisecond
	}
	if w.maxRows <= 0 {
		w.maxRows = 100
	}
	conn, err := pgx.Connect(ctx, w.dbURL)
	if err != nil {
		return fmt.Errorf("connect to the bench database: %w", err)
	}
	defer conn.Close(context.Background())
	// Commits must flush their WAL, as they do by default. herald dev's private server turns
	// synchronous_commit off for speed; then walsenders see a commit only once the WAL writer
	// flushes it, every wal_writer_delay (200 ms), and latency would measure that timer.
	if _, err := conn.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		return w.failed(ctx, err)
	}
	t := w.table.Sanitize()
	tenants := w.tenants
	if tenants <= 0 {
		tenants = 10
	}
	// The organisations in turn across transactions, so every one gets its share at any rate.
	insert := `INSERT INTO ` + t + ` (org_id, payload, sent_at)
		SELECT 'org_' || (($4::bigint + g) % ` + strconv.Itoa(tenants) + `), $1, $2 FROM generate_series(1, $3::int) g RETURNING id`
	update := `UPDATE ` + t + ` SET payload = $1, sent_at = $2 WHERE id = ANY($3)`

	start := time.Now()
	var (
		ids  []int64   // the rows the last insert made, for the next update
		last time.Time // when the last transaction began
	)
	for done := 0; done < n; {
		// Wait for the next event to be due, and at least a tick since the last transaction:
		// rows due meanwhile go in one transaction.
		wake := schedule(start, done+1, rate)
		if rate <= 0 {
			wake = start
		}
		if t := last.Add(w.tick); rate > 0 && t.After(wake) {
			wake = t
		}
		if !sleepUntil(ctx, stop, wake) {
			return nil
		}
		due := n
		if rate > 0 {
			due = min(int(time.Since(start).Seconds()*rate), n)
		}
		k := min(due-done, w.maxRows)
		if k <= 0 {
			continue
		}
		now := time.Now()
		last = now
		c.issued.Add(int64(k))
		payload := strconv.FormatInt(now.UnixNano(), 10)
		if w.updates && len(ids) > 0 {
			if len(ids) > k {
				ids = ids[:k]
			}
			tag, err := conn.Exec(ctx, update, payload, now, ids)
			if err != nil {
				return w.failed(ctx, err)
			}
			c.issued.Add(tag.RowsAffected() - int64(k)) // rows deleted meanwhile are no events
			k = int(tag.RowsAffected())
			ids = ids[:0]
		} else {
			rows, err := conn.Query(ctx, insert, payload, now, k, int64(done))
			if err != nil {
				return w.failed(ctx, err)
			}
			ids = ids[:0]
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return w.failed(ctx, err)
				}
				ids = append(ids, id)
			}
			if err := rows.Err(); err != nil {
				return w.failed(ctx, err)
			}
			if !w.updates {
				ids = ids[:0]
			}
		}
		done += k
		c.sent.Add(int64(k))
		c.transactions.Add(1)
	}
	return nil
}

func (w *writer) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("write to %s: %w", w.table.Sanitize(), err)
}
