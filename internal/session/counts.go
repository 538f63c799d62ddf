package session

import (
	"sync/atomic"

	"github.com/heraldrt/herald/internal/stream"
)

// Counts sums what the sessions sharing it (Config.Counts) hold and have made, for a node's
// metrics: each session adds to it as its subscriptions go live and end, so reading it costs
// nothing per session, and what an ended session made stays counted. A server keeps one per
// transport. Safe for concurrent use; the zero value is ready to use.
type Counts struct {
	live    [2]atomic.Int64  // live subscriptions, by kind
	total   [2]atomic.Uint64 // subscriptions that went live, ever, by kind
	resumes [2][len(resumeOutcomes)]atomic.Uint64
}

// ResumeOutcome is how a subscription that asked to resume (a from, or an SSE Last-Event-ID)
// started: the same string is the metric label.
type ResumeOutcome string

const (
	// ResumeReplayed: the history reached back to from; what came after it was replayed.
	ResumeReplayed ResumeOutcome = "replayed"
	// ResumeHistoryExpired: the history no longer reached from; the subscription started with
	// a history_expired resync.
	ResumeHistoryExpired ResumeOutcome = "history_expired"
	// ResumeStreamReset: from's stream ended (a channel's epoch changed); the subscription
	// started with a stream_reset resync.
	ResumeStreamReset ResumeOutcome = "stream_reset"
)

var resumeOutcomes = [...]ResumeOutcome{ResumeReplayed, ResumeHistoryExpired, ResumeStreamReset}

// ResumeOutcomes lists every ResumeOutcome, for metrics that pre-create their labels.
func ResumeOutcomes() []ResumeOutcome { return resumeOutcomes[:] }

// Resumes is how many subscriptions of kind k that asked to resume started with outcome o.
func (c *Counts) Resumes(k SubscriptionKind, o ResumeOutcome) uint64 {
	for i, x := range resumeOutcomes {
		if x == o {
			return c.resumes[kindIndex(k)][i].Load()
		}
	}
	return 0
}

// resumed counts a resumed subscription that went live, by what it started with: first, the
// first item it was owed (its resume gap or the first replayed item; nil when nothing came
// between from and the head). c may be nil.
func (c *Counts) resumed(table bool, first *stream.Item) {
	if c == nil {
		return
	}
	k := kindIndex(KindChannel)
	if table {
		k = kindIndex(KindTable)
	}
	o := 0 // replayed
	if first != nil && first.Gap != nil {
		switch first.Gap.Reason {
		case stream.ReasonHistoryExpired:
			o = 1
		case stream.ReasonStreamReset:
			o = 2
		}
	}
	c.resumes[k][o].Add(1)
}

// SubscriptionKind is what a subscription streams: the same string is the metric label.
type SubscriptionKind string

const (
	KindTable   SubscriptionKind = "table"
	KindChannel SubscriptionKind = "channel"
)

// SubscriptionKinds lists every SubscriptionKind, for metrics that pre-create their labels.
func SubscriptionKinds() []SubscriptionKind { return []SubscriptionKind{KindTable, KindChannel} }

func kindIndex(k SubscriptionKind) int {
	if k == KindTable {
		return 0
	}
	return 1
}

// Live is how many subscriptions of kind k are live now: from their subscribed reply until
// they end.
func (c *Counts) Live(k SubscriptionKind) int64 { return c.live[kindIndex(k)].Load() }

// Total is how many subscriptions of kind k ever went live.
func (c *Counts) Total(k SubscriptionKind) uint64 { return c.total[kindIndex(k)].Load() }

// started counts a subscription that went live; c may be nil.
func (c *Counts) started(table bool) {
	if c == nil {
		return
	}
	i := kindIndex(KindChannel)
	if table {
		i = kindIndex(KindTable)
	}
	c.live[i].Add(1)
	c.total[i].Add(1)
}

// ended counts a live subscription that ended; c may be nil.
func (c *Counts) ended(table bool) {
	if c == nil {
		return
	}
	i := kindIndex(KindChannel)
	if table {
		i = kindIndex(KindTable)
	}
	c.live[i].Add(-1)
}
