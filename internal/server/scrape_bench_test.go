package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
)

// idleTransport is a connection that is never written to: an idle session's.
type idleTransport struct{}

func (idleTransport) Write(time.Time, []delivery.Item) error { return nil }
func (idleTransport) Close(session.CloseReason, string)      {}

// trackIdle tracks n idle sessions on s, which has not run: no goroutine, no socket.
func trackIdle(tb testing.TB, s *Server, n int) {
	tb.Helper()
	cfg := s.cfg.Session
	cfg.Codec = wire.Codec{}
	for range n {
		sess, err := session.New(cfg, session.Deps{}, idleTransport{}, auth.Identity{Subject: "idle"})
		if err != nil {
			tb.Fatal(err)
		}
		untrack := s.Track(sess)
		tb.Cleanup(func() { sess.Abort(); untrack() })
	}
}

// BenchmarkScrape is one /metrics scrape of a node holding idle sessions ("metrics"), and the
// lane counters' part of it two ways, in one run: "lanes=walk" sums every live session's
// counters under the server's lock, as scrapes once did (four times per scrape), holding off
// every connect and disconnect meanwhile; "lanes=totals" reads the node's delivery.Totals, as
// they do now.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		s, err := New(baseConfig())
		if err != nil {
			b.Fatal(err)
		}
		trackIdle(b, s, n)
		b.Run(fmt.Sprintf("sessions=%d/metrics", n), func(b *testing.B) {
			h := s.metrics.handler()
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				_, _ = io.Copy(io.Discard, w.Body)
			}
		})
		b.Run(fmt.Sprintf("sessions=%d/lanes=walk", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = walkLanes(s)
			}
		})
		b.Run(fmt.Sprintf("sessions=%d/lanes=totals", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = s.laneTotals()
			}
		})
	}
}

// walkLanes sums the live sessions' lane counters under the server's lock: how a scrape read
// them before the sessions counted into delivery.Totals, kept as the benchmark's baseline.
func walkLanes(s *Server) (total delivery.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sess := range s.sessions {
		st := sess.Stats()
		total.DataWritten += st.DataWritten
		total.LostLaneFull += st.LostLaneFull
		total.LostTooLarge += st.LostTooLarge
		total.MarkersEmitted += st.MarkersEmitted
	}
	return total
}
