package session

import "sync/atomic"

// Counts sums what the sessions sharing it (Config.Counts) hold and have made, for a node's
// metrics: each session adds to it as its subscriptions go live and end, so reading it costs
// nothing per session, and what an ended session made stays counted. A server keeps one per
// transport. Safe for concurrent use; the zero value is ready to use.
type Counts struct {
	live  [2]atomic.Int64  // live subscriptions, by kind
	total [2]atomic.Uint64 // subscriptions that went live, ever, by kind
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
