package server

import (
	"net/http"

	"github.com/heraldrt/herald/internal/delivery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the node's Prometheus series. Most are read from the components' own counters
// when scraped, so the hot paths carry no metric code of their own; lane counters of ended
// sessions are folded into totals when each session is untracked.
type metrics struct {
	reg    *prometheus.Registry
	closes *prometheus.CounterVec
	// ended sessions' lane counters, guarded by the Server's mu
	endedLost    map[delivery.DropReason]uint64
	endedMarkers uint64
	endedFrames  uint64
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_session_closes_total", Help: "Sessions ended, by close code name.",
		}, []string{"code"}),
		endedLost: map[delivery.DropReason]uint64{},
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), m.closes)
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge("herald_connections", "Client connections holding a slot.", func() float64 { return float64(s.conns.Load()) })
	gauge("herald_sessions", "Live sessions.", func() float64 { return float64(s.Sessions()) })
	gauge("herald_sockets_open", "Client sockets open, under the cap set from the open-file limit.", func() float64 {
		if g := s.gated.Load(); g != nil {
			return float64(g.open.Load())
		}
		return 0
	})
	counter("herald_sockets_refused_total", "Client sockets refused too_many_connections at the socket cap, or reset for lack of descriptors.", func() float64 {
		if g := s.gated.Load(); g != nil {
			return float64(g.refused.Load())
		}
		return 0
	})
	counter("herald_data_frames_written_total", "Data frames handed to connections' writers.", func() float64 {
		t, _ := s.laneTotals()
		return float64(t.DataWritten)
	})
	counter("herald_resync_markers_total", "Resync markers written, one per gap per subscription.", func() float64 {
		t, _ := s.laneTotals()
		return float64(t.MarkersEmitted)
	})
	for _, reason := range delivery.Reasons() {
		reason := reason
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "herald_frames_lost_total", Help: "Data frames replaced by a resync marker, by reason.",
			ConstLabels: prometheus.Labels{"reason": string(reason)},
		}, func() float64 {
			_, lost := s.laneTotals()
			return float64(lost[reason])
		}))
	}
	counter("herald_channel_publications_total", "Channel publications.", func() float64 {
		return float64(s.channels.hub.Stats().Published)
	})
	gauge("herald_channel_fanout_queued", "Channel publications waiting for, or in, their fan-out.", func() float64 {
		return float64(s.channels.hub.Stats().Queued)
	})
	counter("herald_channel_publications_refused_total", "Channel publications refused because their fan-out queue stayed full.", func() float64 {
		return float64(s.channels.hub.Stats().Refused)
	})
	if s.peers != nil {
		s.peers.registerMetrics(m.reg, s.channels.hub)
	}
	if s.feed != nil {
		gauge("herald_changefeed_streaming", "1 while the replication stream is live.", func() float64 {
			if s.feed.Stats().Streaming {
				return 1
			}
			return 0
		})
		gauge("herald_changefeed_leader", "1 while this node holds the slot's leader lock.", func() float64 {
			if s.feed.Stats().Leader {
				return 1
			}
			return 0
		})
		gauge("herald_changefeed_lag_bytes", "Server WAL end minus the confirmed position.", func() float64 { return float64(s.feed.Stats().LagBytes) })
		gauge("herald_changefeed_confirm_failures", "Status updates that failed since the last that landed.", func() float64 {
			return float64(s.feed.Stats().ConfirmFailures)
		})
		counter("herald_changefeed_restarts_total", "Replication stream restarts.", func() float64 { return float64(s.feed.Stats().Restarts) })
		counter("herald_changefeed_transactions_total", "Transactions handed to the router.", func() float64 { return float64(s.feed.Stats().Txns) })
		counter("herald_changefeed_changes_total", "Changes handed to the router.", func() float64 { return float64(s.feed.Stats().Events) })
		counter("herald_changefeed_overflows_total", "Transactions too large to hold, sent as resyncs.", func() float64 {
			return float64(s.feed.Stats().Overflows)
		})
		counter("herald_router_deliveries_total", "Change frames handed to sessions.", func() float64 {
			return float64(s.tables.router.Stats().Delivered)
		})
		counter("herald_router_filter_evaluations_total", "Filter evaluations (one per group of identical filters per change).", func() float64 {
			return float64(s.tables.router.Stats().Evaluations)
		})
		counter("herald_router_gaps_total", "Resyncs (incomplete_image) for changes whose effect on a view could not be told from what Postgres logged.", func() float64 {
			return float64(s.tables.router.Stats().Gaps)
		})
		gauge("herald_table_subscriptions", "Live table subscriptions.", func() float64 { return float64(s.tables.router.Stats().Subscriptions) })
		counter("herald_policy_rule_evaluations_total", "Row rule evaluations (one per group of subscriptions sharing a filter and the claim values the rule reads, per change).", func() float64 {
			return float64(s.tables.router.Stats().RuleEvaluations)
		})
		counter("herald_policy_rule_errors_total", "Row rule evaluations that failed: a policy_error resync for that group's subscriptions.", func() float64 {
			return float64(s.tables.router.Stats().RuleErrors)
		})
		m.reg.MustRegister(deniedCollector{s})
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// laneTotals sums the lane counters of live and ended sessions, in one hold of the Server's mu:
// an ending session moves from the one to the other under mu, so it is counted once, and
// the totals never go down between scrapes (Prometheus would read that as a reset).
func (s *Server) laneTotals() (delivery.Stats, map[delivery.DropReason]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.liveStatsLocked()
	lost := map[delivery.DropReason]uint64{
		delivery.ReasonLaneFull: live.LostLaneFull + s.metrics.endedLost[delivery.ReasonLaneFull],
		delivery.ReasonTooLarge: live.LostTooLarge + s.metrics.endedLost[delivery.ReasonTooLarge],
	}
	live.MarkersEmitted += s.metrics.endedMarkers
	live.DataWritten += s.metrics.endedFrames
	return live, lost
}

// rowsDenied is herald_policy_rows_denied_total's description.
var rowsDenied = prometheus.NewDesc("herald_policy_rows_denied_total",
	"Row rule evaluations that withheld a row image from a group of subscriptions whose filter let it through, by table (groups the rule's index equality rules out are not evaluated, nor counted).", []string{"table"}, nil)

// deniedCollector reads rows_denied by table from the router when scraped. The tables are
// those with policy rules, so the series are bounded by the config.
type deniedCollector struct{ s *Server }

func (c deniedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rowsDenied }

func (c deniedCollector) Collect(ch chan<- prometheus.Metric) {
	for table, n := range c.s.tables.router.Stats().RowsDenied {
		ch <- prometheus.MustNewConstMetric(rowsDenied, prometheus.CounterValue, float64(n), table)
	}
}
