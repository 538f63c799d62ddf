package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hostile are session settings unlike the changefeed's in every way that changes a value's
// text, set on the test pools, so that a read that did not pin its own would show it.
var hostile = map[string]string{
	"timezone":           "Asia/Kathmandu",
	"datestyle":          "SQL, DMY",
	"intervalstyle":      "sql_standard",
	"bytea_output":       "escape",
	"extra_float_digits": "0",
}

// newPool is a pool on url with the hostile settings and an application_name of its own,
// closed when the test ends.
func newPool(t testing.TB, url string, maxConns int32) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	app := "herald_snapshot_test_" + hex.EncodeToString(b[:])
	for k, v := range hostile {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, app
}

// page is one page a recorder received.
type page struct {
	rows []change.Row
	p    Progress
	last bool
}

// recorder is a Sink that keeps what it is given. onSnapshot and onPage, when set, run first
// and may block or fail.
type recorder struct {
	mu         sync.Mutex
	snaps      []handoff.Snapshot // guarded by mu
	pages      []page             // guarded by mu
	onSnapshot func(handoff.Snapshot) error
	onPage     func(rows []change.Row, p Progress, last bool) error
}

func (r *recorder) Snapshot(s handoff.Snapshot) error {
	if r.onSnapshot != nil {
		if err := r.onSnapshot(s); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, s)
	return nil
}

func (r *recorder) Page(rows []change.Row, p Progress, last bool) error {
	if r.onPage != nil {
		if err := r.onPage(rows, p, last); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pages = append(r.pages, page{rows, p, last})
	return nil
}

// rows is every row received, in order.
func (r *recorder) rows() []change.Row {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []change.Row
	for _, p := range r.pages {
		out = append(out, p.rows...)
	}
	return out
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func wantReason(t testing.TB, err error, want handoff.Reason) {
	t.Helper()
	if got, ok := handoff.ReasonOf(err); !ok || got != want {
		t.Fatalf("err = %v, want reason %s", err, want)
	}
	var he *handoff.Error
	if errors.As(err, &he) && he.Fix != want.Fix() {
		t.Errorf("Fix = %q, want %q", he.Fix, want.Fix())
	}
}

// db is a fresh database with setup run in it.
func db(t testing.TB, setup ...string) string {
	t.Helper()
	url := testenv.NewDatabase(t)
	testenv.Exec(t, url, setup...)
	return url
}

// waitUntil polls cond every 20ms until it holds, or fails the test after a minute.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
