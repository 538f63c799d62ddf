package changefeed

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
)

// blackhole is a TCP proxy that can stop forwarding without closing anything: the network
// failure where packets vanish and neither end hears a reset.
type blackhole struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn // guarded by mu
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", b.target)
		if err != nil {
			c.Close()
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, c, up)
		b.mu.Unlock()
		b.wg.Add(2)
		go b.pipe(c, up)
		go b.pipe(up, c)
	}
}

// pipe copies until either side closes; while frozen, what it reads is dropped.
func (b *blackhole) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func TestSilentConnectionIsAbandonedAndRestarted(t *testing.T) {
	url0 := db(t, itemsTable)
	u, err := url.Parse(url0)
	if err != nil {
		t.Fatal(err)
	}
	hole := newBlackhole(t, u.Host)
	u.Host = hole.ln.Addr().String()

	sink := newCollector()
	var ends atomic.Int32
	cfg := testConfig(u.String(), "items")
	cfg.OnEnd = func(error) { ends.Add(1) }
	r := start(t, cfg, sink)
	testenv.Exec(t, url0, `INSERT INTO items VALUES (1, 'a', 'b', 1, NULL)`)
	sink.waitEvents(t, 1)

	hole.frozen.Store(true)
	frozeAt := time.Now()
	testenv.Exec(t, url0, `INSERT INTO items VALUES (2, 'a', 'b', 1, NULL)`)
	deadline := time.Now().Add(20 * time.Second)
	for ends.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the silent connection was not abandoned within 20s (silence timeout %s)", cfg.SilenceTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waited := time.Since(frozeAt)
	if st := r.feed.Stats(); st.Failure == "" {
		t.Errorf("stats %+v: the abandonment is not recorded", st)
	}
	// The old walsender still holds the slot until Postgres notices; end it as an operator
	// would, so the restarted stream can take the slot.
	testenv.Exec(t, url0, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = current_database() AND active`)
	hole.frozen.Store(false)
	events := sink.waitEvents(t, 2)
	if got := col(t, events[1].After, "id"); got != "2" {
		t.Errorf("after the restart got id %s, want 2", got)
	}
	if waited < cfg.SilenceTimeout {
		t.Errorf("abandoned after %s, before the %s silence timeout", waited, cfg.SilenceTimeout)
	}
	t.Logf("abandoned %s after the network froze", waited.Round(time.Millisecond))
	_ = fmt.Sprint()
}
