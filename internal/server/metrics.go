package server

import (
	"net/http"
	"time"

	"github.com/heraldrt/herald/internal/cluster"
	"github.com/heraldrt/herald/internal/delivery"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/session"
	redisstore "github.com/heraldrt/herald/internal/store/redis"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/transport/sse"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the node's Prometheus series (docs/OPERATIONS.md lists each). They are read from
// the components' own counters when scraped, each component's snapshot taken once per scrape,
// so the hot paths carry no metric code of their own. Nothing a scrape reads walks the
// sessions: the sessions add to per-node aggregates as they count (delivery.Totals for their
// lanes, the edges for their connections and subscriptions), and what an ended session
// counted stays in them. Every counter is an atomic that is only ever added to, so none goes
// down between two scrapes.
type metrics struct {
	reg    *prometheus.Registry
	closes *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herald_session_closes_total", Help: "Sessions ended, by close code name.",
		}, []string{"code"}),
	}
	// Every code a session ends with shows from the start, at 0, so a rate over it is defined.
	for _, r := range session.CloseReasons() {
		m.closes.WithLabelValues(heraldv1.CloseCode(r).String())
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), m.closes,
		nodeCollector{s})
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// laneTotals is the lane counters of every session the node has had, and the frames lost by
// reason: what /metrics reports, read without a walk over the sessions.
func (s *Server) laneTotals() (delivery.Stats, map[delivery.DropReason]uint64) {
	t := s.lanes.Stats()
	return t.Stats, map[delivery.DropReason]uint64{
		delivery.ReasonLaneFull: t.LostLaneFull,
		delivery.ReasonTooLarge: t.LostTooLarge,
	}
}

// otherTable is the table label of what is counted for a table without policy rules, which a
// client may name at will. A real table's label is schema-qualified, so it never reads so.
const otherTable = "other"

// series is one metric family the node collector writes.
type series struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

func counter(name, help string, labels ...string) series {
	return series{prometheus.NewDesc(name, help, labels, nil), prometheus.CounterValue}
}

func gauge(name, help string, labels ...string) series {
	return series{prometheus.NewDesc(name, help, labels, nil), prometheus.GaugeValue}
}

// The node's series. The cluster's, Redis's and the bus's apply with redis.url set; the
// changefeed's, the router's, the slot's and the table policy's with a changefeed.
var (
	mReady = gauge("herald_ready", "1 while /readyz answers ready, 0 while it answers 503 (its body says why).")

	mConnections      = gauge("herald_connections", "Client connections holding a slot, by transport (ws, sse).", "transport")
	mSessions         = gauge("herald_sessions", "Live sessions, by transport.", "transport")
	mSessionsTotal    = counter("herald_sessions_total", "Sessions opened, by transport.", "transport")
	mSubscriptions    = gauge("herald_subscriptions", "Live subscriptions, by transport and kind (table, channel).", "transport", "kind")
	mSubscriptionsTot = counter("herald_subscriptions_total", "Subscriptions that went live, by transport and kind.", "transport", "kind")
	mSocketsOpen      = gauge("herald_sockets_open", "Client sockets open, under the cap set from the open-file limit.")
	mResumes          = counter("herald_resumes_total", "Subscriptions that asked to resume (from, or SSE Last-Event-ID) and went live, by transport, kind and outcome: replayed (the history reached back), history_expired or stream_reset (it started with that resync).", "transport", "kind", "outcome")
	mSocketsRefused   = counter("herald_sockets_refused_total", "Client sockets refused too_many_connections at the socket cap, or reset for lack of descriptors.")

	mDataWritten     = counter("herald_data_frames_written_total", "Data frames (changes, messages) handed to connections' writers.")
	mControlWritten  = counter("herald_control_frames_written_total", "Control frames (replies, errors, presence) handed to connections' writers.")
	mControlRefused  = counter("herald_control_frames_refused_total", "Control frames refused by a full control lane: each closed its connection as too slow.")
	mMarkers         = counter("herald_resync_markers_total", "Resync markers written, one per gap per subscription, by the reason the gap opened.", "reason")
	mFramesLost      = counter("herald_frames_lost_total", "Data frames replaced by a resync marker in a connection's lanes, by reason.", "reason")
	mBusDeliveries   = counter("herald_bus_deliveries_total", "Items (changes, messages, gaps, presence) the node's bus handed to its sessions.")
	mUnavailable     = counter("herald_unavailable_total", "Requests refused as unavailable, by what was asked; the log says what failed and why.", "op")
	mPublished       = counter("herald_channel_publications_total", "Channel publications.")
	mFanoutQueued    = gauge("herald_channel_fanout_queued", "Channel publications waiting for, or in, their fan-out.")
	mPublishRefused  = counter("herald_channel_publications_refused_total", "Channel publications refused because their fan-out queue stayed full.")
	mChannelRefusals = counter("herald_policy_channel_refusals_total", "Channel requests the policy refused, by action (subscribe, publish, presence) and code (forbidden, policy_error).", "action", "code")
	mPresenceMembers = gauge("herald_presence_members", "Presence members this node's connections hold, in every channel.")
	mPresenceChans   = gauge("herald_presence_channels", "Channels this node keeps presence for: members, presence subscribers or a sweep claim.")
	mDurableSubs     = gauge("herald_durable_subscriptions", "Durable subscriptions this node feeds from its channel hub.")
	mDurableDepth    = gauge("herald_durable_queue_depth", "Messages queued in the durable subscriptions this node feeds, leased ones included, as last seen.")
	mDurableDeliv    = counter("herald_durable_deliveries_total", "Durable messages handed out by this node's steps: one per connection for a broadcast, one per lease for a single.")
	mDurableAcks     = counter("herald_durable_acks_total", "Single messages settled by an ack.")
	mDurableRetries  = counter("herald_durable_retries_total", "Single leases that ended without an ack (expired, or their connection went); the message is offered again.")
	mDurableParked   = counter("herald_durable_parked_total", "Single messages parked after durable.max_attempts deliveries without an ack.")
	mDurableDropped  = counter("herald_durable_dropped_total", "Durable messages shed by a full queue (a queue_full resync in their place).")

	mStreaming         = gauge("herald_changefeed_streaming", "1 while the replication stream is live on this node.")
	mLeader            = gauge("herald_changefeed_leader", "1 while this node holds the slot's leader lock.")
	mLagBytes          = gauge("herald_changefeed_lag_bytes", "The server's WAL end, as the stream last reported it, minus the position last confirmed to Postgres.")
	mLastCommit        = gauge("herald_changefeed_last_commit_timestamp_seconds", "Commit time, by the database's clock, of the last transaction handed on; absent before the first.")
	mConfirmFailures   = counter("herald_changefeed_confirm_failures_total", "Status updates (confirmations of the handed-on position) that failed to send.")
	mConfirmFailingNow = gauge("herald_changefeed_confirm_failures_consecutive", "Status updates that failed since the last that landed.")
	mRestarts          = counter("herald_changefeed_restarts_total", "Replication stream restarts.")
	mTxns              = counter("herald_changefeed_transactions_total", "Transactions handed to the router.")
	mChanges           = counter("herald_changefeed_changes_total", "Changes handed to the router.")
	mOverflows         = counter("herald_changefeed_overflows_total", "Transactions too large to hold, sent as resyncs.")
	mSlotUp            = gauge("herald_replication_slot_up", "1 when the last read of the slot's state succeeded and found the slot.")
	mSlotActive        = gauge("herald_replication_slot_active", "1 while a connection streams from the slot.")
	mSlotWALStatus     = gauge("herald_replication_slot_wal_status", "1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others.", "status")
	mSlotRetained      = gauge("herald_replication_slot_retained_wal_bytes", "WAL the slot keeps from removal: the disk it pins (current WAL position minus restart_lsn).")
	mSlotLag           = gauge("herald_replication_slot_lag_bytes", "Current WAL position minus the slot's confirmed_flush_lsn.")
	mSlotSafe          = gauge("herald_replication_slot_safe_wal_bytes", "WAL that may still be written before the slot is lost (safe_wal_size); absent without max_slot_wal_keep_size.")
	mSlotReadFailures  = counter("herald_replication_slot_read_failures_total", "Reads of the slot's state that failed.")
	mDeliveries        = counter("herald_router_deliveries_total", "Change frames handed to sessions.")
	mEvaluations       = counter("herald_router_filter_evaluations_total", "Filter evaluations (one per group of identical filters per change).")
	mRouterGaps        = counter("herald_router_gaps_total", "Resyncs (incomplete_image) for changes whose effect on a view could not be told from what Postgres logged.")
	mTableSubs         = gauge("herald_table_subscriptions", "Live table subscriptions in the router.")
	mRuleEvaluations   = counter("herald_policy_rule_evaluations_total", "Row rule evaluations (one per group of subscriptions sharing a filter and the claim values the rule reads, per change).")
	mRuleErrors        = counter("herald_policy_rule_errors_total", "Row rule evaluations that failed, by table: each a policy_error resync for that group's subscriptions.", "table")
	mRowsDenied        = counter("herald_policy_rows_denied_total", "Row rule evaluations that withheld a row image from a group of subscriptions whose filter let it through, by table (groups the rule's index equality rules out are not evaluated, nor counted).", "table")
	mTableRefusals     = counter("herald_policy_table_refusals_total", `Table subscriptions (and refreshed ones) the policy refused, by table ("other" for any table without rules) and code (forbidden, policy_error).`, "table", "code")

	mSnapStarted    = counter("herald_snapshots_started_total", "Table snapshots begun (subscribe with snapshot).")
	mSnapLive       = counter("herald_snapshots_live_total", "Table snapshots whose subscription went live: rows sent and joined to the stream.")
	mSnapEnded      = counter("herald_snapshots_failed_total", "Table snapshots that ended before going live, by reason: the code their subscription ended with, or canceled when the subscription ended first.", "reason")
	mSnapRows       = counter("herald_snapshot_rows_total", "Rows table snapshots sent.")
	mSnapBytes      = counter("herald_snapshot_bytes_total", "Bytes, as JSON, of the rows table snapshots sent.")
	mSnapReading    = gauge("herald_snapshots_reading", "Table snapshots reading from the database now.")
	mSnapWaiting    = gauge("herald_snapshots_waiting", "Table snapshots waiting for their turn to read (handoff.max_concurrent).")
	mHandoffs       = gauge("herald_handoffs", "Snapshot subscriptions whose changes are held until their rows are sent and joined to the stream.")
	mHandoffTxns    = counter("herald_handoff_transactions_total", "Transactions snapshots' hand-offs judged, by verdict: skipped (in the snapshot's rows), delivered (after them), straddled (delivered, and running when the snapshot was taken).", "verdict")
	mHandoffLookbck = counter("herald_handoff_lookback_transactions_total", "Transactions routed before a snapshot subscription that its hand-off was offered as its look-back.")

	mRedisUp       = gauge("herald_redis_up", "1 while every Redis node answered the last check.")
	mRedisErrors   = counter("herald_redis_errors_total", "Redis failures, by source: health_check (a check found a node not answering), bus (a round trip of the bus between nodes failed, and is retried).", "source")
	mRedisCommands = counter("herald_redis_bus_commands_total", "Redis commands the bus between nodes sent.")
	mRedisTrips    = counter("herald_redis_bus_round_trips_total", "Redis round trips of the bus between nodes (a batch of commands is one).")
	mBusSent       = counter("herald_bus_messages_sent_total", "Messages this node wrote to other nodes' streams (one per item and destination node).")
	mBusSentBytes  = counter("herald_bus_sent_bytes_total", "Bytes of those messages.")
	mBusReceived   = counter("herald_bus_messages_received_total", "Messages this node read from its stream.")
	mBusRecvBytes  = counter("herald_bus_received_bytes_total", "Bytes of those messages.")
	mBusDropped    = counter("herald_bus_messages_dropped_total", "Messages dropped before they reached their node's stream, by reason; each is a gap to its subscribers.", "reason")
	mBusGaps       = counter("herald_bus_gaps_total", "Losses found on this node's stream, by reason; each is a gap to the subscribers it feeds.", "reason")
	mBusQueued     = gauge("herald_bus_queued_messages", "Messages waiting to be written to other nodes' streams.")
	mItemsSent     = counter("herald_cluster_items_sent_total", "Items this node sent to other nodes (one per item and destination node), by kind.", "kind")
	mItemsReceived = counter("herald_cluster_items_received_total", "Items this node received from other nodes, by kind.", "kind")
	mItemsDropped  = counter("herald_cluster_items_dropped_total", "Items lost on this node's side of the bus (a full queue, an unreadable payload), by kind; each shows to its subscribers as a gap.", "kind")
	mClusterGaps   = counter("herald_cluster_gaps_total", "Losses the bus reported from another node, by kind; each is a resync for the subscriptions it feeds here.", "kind")
	mClusterQueued = gauge("herald_cluster_queued", "Items waiting to be routed to other nodes, or handed on here.")
	mInterestReads = counter("herald_cluster_interest_reads_total", "Reads of the interest index's rows (a cache miss: an owner's generation moved).")
	mOrderGaps     = counter("herald_channel_order_gaps_total", "Channel offsets that did not arrive from another node within the order wait: each a gap to the channel's subscribers here.")
	mForwarded     = counter("herald_sse_commands_forwarded_total", "SSE commands posted to this node for a stream another node holds, by outcome: relayed (whatever the answer), unknown_node (404), lookup_failed and unreachable (503).", "outcome")
	mOrderLate     = counter("herald_channel_order_late_total", "Channel publications from other nodes that arrived after their offset was handed on or reported lost, and were dropped.")
	allSeries      = []series{mReady, mConnections, mSessions, mSessionsTotal, mSubscriptions, mSubscriptionsTot, mResumes, mSocketsOpen, mSocketsRefused, mDataWritten, mControlWritten, mControlRefused, mMarkers, mFramesLost, mBusDeliveries, mUnavailable, mPublished, mFanoutQueued, mPublishRefused, mChannelRefusals, mPresenceMembers, mPresenceChans, mDurableSubs, mDurableDepth, mDurableDeliv, mDurableAcks, mDurableRetries, mDurableParked, mDurableDropped, mStreaming, mLeader, mLagBytes, mLastCommit, mConfirmFailures, mConfirmFailingNow, mRestarts, mTxns, mChanges, mOverflows, mSlotUp, mSlotActive, mSlotWALStatus, mSlotRetained, mSlotLag, mSlotSafe, mSlotReadFailures, mDeliveries, mEvaluations, mRouterGaps, mTableSubs, mRuleEvaluations, mRuleErrors, mRowsDenied, mTableRefusals, mSnapStarted, mSnapLive, mSnapEnded, mSnapRows, mSnapBytes, mSnapReading, mSnapWaiting, mHandoffs, mHandoffTxns, mHandoffLookbck, mRedisUp, mRedisErrors, mRedisCommands, mRedisTrips, mBusSent, mBusSentBytes, mBusReceived, mBusRecvBytes, mBusDropped, mBusGaps, mBusQueued, mItemsSent, mItemsReceived, mItemsDropped, mClusterGaps, mClusterQueued, mInterestReads, mOrderGaps, mOrderLate, mForwarded}
)

// nodeCollector writes the node's series from the components' counters when scraped.
type nodeCollector struct{ s *Server }

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range allSeries {
		ch <- m.desc
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	emit := func(m series, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, v, labels...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	emit(mReady, b2f(s.notReady() == nil))

	for _, e := range []*edge{s.ws, s.sse} {
		emit(mConnections, float64(e.conns.Load()), e.name)
		emit(mSessions, float64(e.sessions.Load()), e.name)
		emit(mSessionsTotal, float64(e.opened.Load()), e.name)
		for _, k := range session.SubscriptionKinds() {
			emit(mSubscriptions, float64(e.counts.Live(k)), e.name, string(k))
			emit(mSubscriptionsTot, float64(e.counts.Total(k)), e.name, string(k))
			for _, o := range session.ResumeOutcomes() {
				emit(mResumes, float64(e.counts.Resumes(k, o)), e.name, string(k), string(o))
			}
		}
	}
	var open, refused float64
	if g := s.gated.Load(); g != nil {
		open, refused = float64(g.open.Load()), float64(g.refused.Load())
	}
	emit(mSocketsOpen, open)
	emit(mSocketsRefused, refused)

	lanes := s.lanes.Stats()
	emit(mDataWritten, float64(lanes.DataWritten))
	emit(mControlWritten, float64(lanes.ControlWritten))
	emit(mControlRefused, float64(lanes.ControlRefused))
	for _, r := range stream.Reasons() {
		emit(mMarkers, float64(lanes.MarkersByReason[r]), string(r))
	}
	for _, r := range delivery.Reasons() {
		emit(mFramesLost, float64(lanes.Lost(r)), string(r))
	}
	emit(mBusDeliveries, float64(s.bus.Stats().Delivered))
	for _, o := range ops {
		emit(mUnavailable, float64(s.unavail.count(o)), string(o))
	}

	hub := s.channels.hub.Stats()
	emit(mPublished, float64(hub.Published))
	emit(mFanoutQueued, float64(hub.Queued))
	emit(mPublishRefused, float64(hub.Refused))
	for i, a := range channelActions {
		for j, code := range refusedCodes {
			emit(mChannelRefusals, float64(s.policy.refused.channel[i][j].Load()), a, code)
		}
	}
	emit(mPresenceMembers, float64(s.presence.Members()))
	emit(mPresenceChans, float64(s.presence.Channels()))
	ds := s.durable.Stats()
	emit(mDurableSubs, float64(ds.Subscriptions))
	emit(mDurableDepth, float64(ds.Depth))
	emit(mDurableDeliv, float64(ds.Delivered))
	emit(mDurableAcks, float64(ds.Acked))
	emit(mDurableRetries, float64(ds.Retried))
	emit(mDurableParked, float64(ds.Parked))
	emit(mDurableDropped, float64(ds.Dropped))

	if s.feed != nil {
		c.collectTables(emit, b2f)
	}
	if s.peers != nil {
		c.collectCluster(emit, b2f, hub.Gaps, hub.Late)
	}
}

func (c nodeCollector) collectTables(emit func(series, float64, ...string), b2f func(bool) float64) {
	s := c.s
	f := s.feed.Stats()
	emit(mStreaming, b2f(f.Streaming))
	emit(mLeader, b2f(f.Leader))
	emit(mLagBytes, float64(f.LagBytes))
	if !f.LastCommit.IsZero() {
		emit(mLastCommit, float64(f.LastCommit.UnixNano())/float64(time.Second))
	}
	emit(mConfirmFailures, float64(f.ConfirmFailuresTotal))
	emit(mConfirmFailingNow, float64(f.ConfirmFailures))
	emit(mRestarts, float64(f.Restarts))
	emit(mTxns, float64(f.Txns))
	emit(mChanges, float64(f.Events))
	emit(mOverflows, float64(f.Overflows))

	slot := s.slot.State()
	emit(mSlotUp, b2f(slot.read && slot.exists))
	if slot.exists {
		emit(mSlotActive, b2f(slot.active))
		for _, st := range walStatuses {
			emit(mSlotWALStatus, b2f(slot.walStatus == st), st)
		}
		emit(mSlotRetained, float64(slot.retained))
		emit(mSlotLag, float64(slot.lag))
		if slot.safe != nil {
			emit(mSlotSafe, float64(*slot.safe))
		}
	}
	emit(mSlotReadFailures, float64(s.slot.failures.Load()))

	r := s.tables.router.Stats()
	emit(mDeliveries, float64(r.Delivered))
	emit(mEvaluations, float64(r.Evaluations))
	emit(mRouterGaps, float64(r.Gaps))
	emit(mTableSubs, float64(r.Subscriptions))
	emit(mRuleEvaluations, float64(r.RuleEvaluations))
	// The tables are those routed with policy rules, which the config bounds.
	for table, n := range r.RuleErrorsByTable {
		emit(mRuleErrors, float64(n), table)
	}
	for table, n := range r.RowsDenied {
		emit(mRowsDenied, float64(n), table)
	}
	for table, n := range s.policy.refused.tables {
		if table == "" {
			table = otherTable
		}
		for j, code := range refusedCodes {
			emit(mTableRefusals, float64(n[j].Load()), table, code)
		}
	}
	emit(mHandoffs, float64(r.Handoffs))
	emit(mHandoffLookbck, float64(r.Lookbacks))
	if sn := s.tables.snaps; sn != nil {
		emit(mSnapStarted, float64(sn.started.Load()))
		emit(mSnapLive, float64(sn.live.Load()))
		for i, o := range snapshotOutcomes {
			emit(mSnapEnded, float64(sn.ended[i].Load()), o)
		}
		rs := sn.reader.Stats()
		emit(mSnapRows, float64(rs.Rows))
		emit(mSnapBytes, float64(rs.Bytes))
		emit(mSnapReading, float64(rs.InProgress))
		emit(mSnapWaiting, float64(rs.Waiting))
		emit(mHandoffTxns, float64(sn.skipped.Load()), "skipped")
		emit(mHandoffTxns, float64(sn.delivered.Load()), "delivered")
		emit(mHandoffTxns, float64(sn.straddled.Load()), "straddled")
	}
}

func (c nodeCollector) collectCluster(emit func(series, float64, ...string), b2f func(bool) float64, orderGaps, orderLate uint64) {
	p := c.s.peers
	emit(mRedisUp, b2f(p.client.Healthy() == nil))
	_, failed := p.client.Checks()
	tr := p.transport.Stats()
	emit(mRedisErrors, float64(failed), "health_check")
	emit(mRedisErrors, float64(tr.Failures), "bus")
	emit(mRedisCommands, float64(tr.Commands))
	emit(mRedisTrips, float64(tr.RoundTrips))
	emit(mBusSent, float64(tr.Sent))
	emit(mBusSentBytes, float64(tr.SentBytes))
	emit(mBusReceived, float64(tr.Received))
	emit(mBusRecvBytes, float64(tr.ReceivedBytes))
	for _, r := range redisstore.DropReasons() {
		emit(mBusDropped, float64(tr.Dropped(r)), string(r))
	}
	for _, r := range redisstore.GapReasons() {
		emit(mBusGaps, float64(tr.Gaps(r)), string(r))
	}
	emit(mBusQueued, float64(tr.Queued))

	n := p.node.Stats()
	for k, kind := range cluster.KindNames {
		emit(mItemsSent, float64(n.Sent[k]), kind)
		emit(mItemsReceived, float64(n.Received[k]), kind)
		emit(mItemsDropped, float64(n.Dropped[k]), kind)
		emit(mClusterGaps, float64(n.Gaps[k]), kind)
	}
	emit(mClusterQueued, float64(n.Routing+n.Receiving))
	emit(mInterestReads, float64(n.Lookups))
	emit(mOrderGaps, float64(orderGaps))
	emit(mOrderLate, float64(orderLate))
	if ev := c.s.events.Load(); ev != nil {
		fw := ev.Forwards()
		for _, o := range sse.ForwardOutcomes {
			emit(mForwarded, float64(fw[o]), string(o))
		}
	}
}
