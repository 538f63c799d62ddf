package router

import (
	"fmt"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/stream"
)

// DefaultLookback is how far back in its history the router offers a new snapshot
// subscription's hand-off (HandoffConfig.Lookback): the hand-off's, which the snapshot
// reader's sync-standby guard uses too.
const DefaultLookback = handoff.DefaultLookback

// HandoffConfig configures the hand-offs of snapshot subscriptions. The zero value of each
// field is its default.
type HandoffConfig struct {
	// Lookback is how far back, by the time the router routed them, the transactions of the
	// router's History are offered to a new hand-off, before any live one: a transaction the
	// router routed just before the subscription registered may still have been invisible to
	// the snapshot taken after (it was waiting on a synchronous standby, or had written its
	// commit record and not yet left the running set), and it would be in neither the rows
	// nor the stream. The hand-off keeps those its snapshot does not see, and skips the rest.
	// As far as the History reaches, at most. Default DefaultLookback.
	Lookback time.Duration
	// EarlyBytes and PendingBytes bound what a hand-off holds (handoff.Config).
	EarlyBytes, PendingBytes int
}

// Snapshot is what a snapshot subscription's reader needs: the hand-off it feeds, and the
// table and rules its rows are read and judged by, the same as the subscription's changes.
type Snapshot struct {
	// Handoff is the subscription's hand-off: the reader sets its snapshot, then says when
	// the rows are sent; the router offers it the stream. Its failure ends the subscription.
	Handoff *handoff.Handoff[*stream.Item]
	// Table is schema-qualified; Columns are its published columns in table order, each with
	// the OID its values decode as; Key its key columns, at least one.
	Table   string
	Columns []filter.Column
	Key     []string
	// Filter is the subscription's filter, nil for every row: its SQL may narrow the read, and
	// Keep decides.
	Filter *filter.Filter
	// Keep decides a row of the snapshot as a change's new image is decided: the filter, then
	// the table's row rule with the subscriber's claims as they were when it subscribed (the
	// row as an insert's, with no old image), and returns it projected onto the columns the
	// subscriber may see and asked for. An error is a row rule that failed: the snapshot
	// fails with policy_error rather than hide the row.
	Keep func(row change.Row) (change.Row, bool, error)
	// Joined is the table's TableInfo.Joined: the reader refuses a snapshot whose Xmin is
	// below it (table_not_ready). 0: the table was in the publication when the stream started,
	// and no transaction held a write lock on it then.
	Joined change.XID8
	// For a subscription asked with Request.Hold, whose look-back its caller reads from the
	// history nodes share: Since is the position the look-back starts after (the commit LSN
	// this router had routed up to by HandoffConfig.Lookback ago, as far as it knows), and
	// Open hands the hand-off the transactions of the table read from that history in
	// (Since, through], oldest first, then what the router held meanwhile that committed after
	// through. Open is called once; nil without Hold.
	Since change.LSN
	Open  func(txns []history.Txn, through change.LSN)
}

// handoffEntry is a table subscription whose snapshot is being joined to its stream. Its entry
// routes into collect (its target while the hand-off lasts), and Accept offers what it
// collected from each transaction, as one handoff.Txn, once the transaction is routed. Guarded
// by the router's mu, except h, which has its own lock.
type handoffEntry struct {
	e      *entry
	t      *table
	table  string
	types  map[string]filter.Type
	target stream.Receiver // the subscriber, once the hand-off is live
	h      *handoff.Handoff[*stream.Item]

	items   []*stream.Item // what the transaction being routed delivers to the subscription
	bytes   int            // what items hold, as the hand-off counts it
	settled bool           // out of the router's list: live (routed to target) or failed (dropped)

	// holding is set for a subscription asked with Request.Hold until Snapshot.Open: the
	// transactions routed meanwhile wait in held (bounded by the early buffer's bound), to be
	// offered after its look-back.
	holding   bool
	held      []heldTxn
	heldBytes int
}

// heldTxn is a transaction routed while a hand-off waits for its look-back.
type heldTxn struct {
	txn   change.Txn // its position and id; no events
	items []*stream.Item
	bytes int
}

// collect is a hand-off's entry's target: it keeps what the routing delivers, for Accept to
// offer. Called under the router's mu only (the bus hands over on the router's goroutine).
type collect struct{ ho *handoffEntry }

func (c collect) Push(_ string, it *stream.Item) {
	ho := c.ho
	if ho.settled {
		return // failed: nothing more reaches the subscriber (a live one is target's again)
	}
	ho.items = append(ho.items, it)
	ho.bytes += itemBytes(it)
}

// itemBytes is what an item holds in memory, as a hand-off bounds it: its structs, and its
// images' names and values.
func itemBytes(it *stream.Item) int {
	n := 256
	if c := it.Change; c != nil {
		for _, row := range [2]change.Row{c.Row, c.Old} {
			for i := range row {
				n += 32 + len(row[i].Name) + len(row[i].Value)
			}
		}
	}
	return n
}

// handoffSink hands what a hand-off delivers to its subscriber, through the bus, which never
// blocks: the hand-off calls it under its own lock, from the router's goroutine or the
// reader's.
type handoffSink struct {
	bus    Bus
	target stream.Receiver
	sub    string
}

func (s handoffSink) Deliver(t *handoff.Txn[*stream.Item]) {
	for _, it := range t.Items {
		s.bus.Deliver(s.target, s.sub, it)
	}
}

func (s handoffSink) Live(head change.LSN) {
	s.bus.Deliver(s.target, s.sub, stream.NewLive(stream.TablePosition(head, 0)))
}

// keeper is Snapshot.Keep for entry e: its filter, rule, claims and columns as they are now,
// copied, since a refresh may change e's claims under the router's lock while the reader
// decides rows outside it.
func keeper(e *entry) func(change.Row) (change.Row, bool, error) {
	f, rule, claims, cols := e.filter, e.rule, e.claims, e.columns
	return func(row change.Row) (change.Row, bool, error) {
		if f != nil && f.Eval(row) != filter.True {
			return nil, false, nil
		}
		if rule != nil {
			d, err := rule.Visible(rule.Decode(row), nil, claims)
			switch d {
			case policy.Allow:
			case policy.Deny:
				return nil, false, nil
			default:
				if err == nil {
					err = &policy.EvalError{Rule: rule.Ref(), Detail: "the rule did not decide"}
				}
				return nil, false, err
			}
		}
		return project(row, cols), true, nil
	}
}

// startHandoffLocked makes ho's hand-off, starting after the router's head, and offers it the
// History's transactions of the look-back, oldest first; Accept offers it every later one. It
// runs under mu, right after ho's entry joined its table, so the first live transaction comes
// after the last one offered here.
func (r *Router) startHandoffLocked(ho *handoffEntry) {
	ho.h = handoff.New(handoff.Config{Head: r.head, EarlyBytes: r.handoff.EarlyBytes, PendingBytes: r.handoff.PendingBytes},
		handoffSink{bus: r.bus, target: ho.target, sub: ho.e.sub})
	r.handoffs = append(r.handoffs, ho)
	if ho.holding || r.hist == nil {
		return
	}
	lookback := r.handoff.Lookback
	if lookback <= 0 {
		lookback = DefaultLookback
	}
	// A table of the entry alone: the history's changes go through its filter and policy as
	// live ones do, and reach its collect, nothing else.
	solo := newTable()
	solo.add(ho.e, ho.types)
	rt := &r.rt
	rt.r = r
	r.hist.since(time.Now().Add(-lookback), func(t *histTxn) {
		if of := t.overflow; of != nil {
			if n, ok := of.Tables[ho.table]; ok {
				r.overflowTable(solo, t.lsn, of, n)
			}
		}
		for k := range t.events {
			h := &t.events[k]
			if h.ev.Table == ho.table {
				h.ev.LSN = t.lsn
				rt.event(solo, &h.ev, h.idx)
			}
		}
		r.offerLocked(ho, &change.Txn{XID8: t.xid8, CommitLSN: t.lsn, EndLSN: t.end, Transactional: true})
		r.lookbacks.Add(1)
	})
	rt.wakes.Wake()
}

// offerHandoffsLocked offers txn, as each hand-off's subscription sees it (what its collect
// gathered while txn was routed), to every hand-off in progress, and settles those that are
// done. A logical message sent outside any transaction (the fence a snapshot's reader emits) is
// a position: every transaction before it was offered.
func (r *Router) offerHandoffsLocked(txn *change.Txn) {
	for i := 0; i < len(r.handoffs); {
		ho := r.handoffs[i]
		r.offerLocked(ho, txn)
		if r.settleLocked(ho) {
			last := len(r.handoffs) - 1
			r.handoffs[i] = r.handoffs[last]
			r.handoffs[last] = nil
			r.handoffs = r.handoffs[:last]
			continue
		}
		i++
	}
}

// offerLocked offers ho the transaction txn, with what its collect gathered from it, or holds
// it until its look-back.
func (r *Router) offerLocked(ho *handoffEntry, txn *change.Txn) {
	items, bytes := ho.items, ho.bytes
	ho.items, ho.bytes = nil, 0
	if ho.holding {
		ho.held = append(ho.held, heldTxn{txn: change.Txn{XID8: txn.XID8, CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN,
			Transactional: !messageOnly(txn)}, items: items, bytes: bytes})
		ho.heldBytes += bytes + 64
		if limit := r.earlyBytes(); ho.heldBytes > limit {
			ho.h.Fail(handoff.ReasonBufferFull, fmt.Sprintf("%d transactions (%d bytes) were routed before the look-back was read, past the bound of %d bytes",
				len(ho.held), ho.heldBytes, limit), nil)
			// Failed: nothing more is held, and Accept settles it.
			ho.holding, ho.held, ho.heldBytes = false, nil, 0
		}
		return
	}
	if messageOnly(txn) {
		// Its events are messages, which no subscription is routed; its LSN is the end of its
		// record, so every transaction that committed before it was offered.
		_ = ho.h.OfferPosition(txn.EndLSN)
		return
	}
	// An error is the hand-off's failure (it holds it, and the reader sees it), or, once
	// live, a transaction offered twice, which it drops: the router offers each once.
	if len(items) == 0 {
		// A hand-off keeps no empty transaction (its position is all it reads of it): one
		// scratch value serves every such offer.
		r.empty = handoff.Txn[*stream.Item]{XID8: txn.XID8, CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN}
		_ = ho.h.Offer(&r.empty)
		return
	}
	_ = ho.h.Offer(&handoff.Txn[*stream.Item]{XID8: txn.XID8, CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN, Items: items, Bytes: bytes})
}

func (r *Router) earlyBytes() int {
	if r.handoff.EarlyBytes > 0 {
		return r.handoff.EarlyBytes
	}
	return handoff.DefaultEarlyBytes
}

// openLocked gives ho its look-back, txns of its table read from the history nodes share in
// (Since, through], oldest first, then offers what was held meanwhile that committed after
// through: the rest the look-back holds.
func (r *Router) openLocked(ho *handoffEntry, txns []history.Txn, through change.LSN) {
	if !ho.holding {
		return
	}
	ho.holding = false
	held := ho.held
	ho.held, ho.heldBytes = nil, 0
	if ho.settled || ho.e.detached {
		return
	}
	solo := newTable()
	solo.add(ho.e, ho.types)
	rt := &r.rt
	rt.r = r
	for i := range txns {
		t := &txns[i]
		if t.LSN > through {
			break
		}
		if t.XID8 == 0 || t.End == 0 {
			ho.h.Fail(handoff.ReasonReplicationRestarted, fmt.Sprintf(
				"the tables' history holds transaction %s without its id or end (written by an older node), so the look-back cannot be judged", t.LSN), nil)
			break
		}
		if of := t.Overflow; of != nil {
			if n, ok := of.Tables[ho.table]; ok {
				r.overflowTable(solo, t.LSN, of, n)
			}
		}
		for k := range t.Events {
			h := &t.Events[k]
			if h.Table == ho.table {
				h.Event.LSN = t.LSN
				rt.event(solo, &h.Event, h.Idx)
			}
		}
		r.offerLocked(ho, &change.Txn{XID8: t.XID8, CommitLSN: t.LSN, EndLSN: t.End, Transactional: true})
		r.lookbacks.Add(1)
	}
	rt.wakes.Wake()
	for i := range held {
		x := &held[i]
		if x.txn.Transactional && x.txn.CommitLSN <= through {
			continue // in the look-back
		}
		ho.items, ho.bytes = x.items, x.bytes
		if x.txn.Transactional {
			r.offerLocked(ho, &x.txn)
		} else {
			r.offerLocked(ho, &change.Txn{CommitLSN: x.txn.CommitLSN, EndLSN: x.txn.EndLSN})
		}
	}
}

// samples keep when the router routed what (sampleEvery apart, at most maxSamples), so a
// hand-off's look-back can be read, by position, from a history that has no times.
const (
	sampleEvery = 100 * time.Millisecond
	maxSamples  = 1024
)

type sample struct {
	at  time.Time
	lsn change.LSN
}

// noteLocked records that the router had routed up to lsn at now.
func (r *Router) noteLocked(now time.Time, lsn change.LSN) {
	if n := len(r.samples); n > 0 && now.Sub(r.samples[n-1].at) < sampleEvery {
		return
	}
	if len(r.samples) == maxSamples {
		copy(r.samples, r.samples[1:])
		r.samples = r.samples[:maxSamples-1]
	}
	r.samples = append(r.samples, sample{at: now, lsn: lsn})
}

// sinceLocked is the position the router had routed up to at from: the latest sample at or
// before it, else the oldest it has (it started after from), else 0.
func (r *Router) sinceLocked(from time.Time) change.LSN {
	for i := len(r.samples) - 1; i >= 0; i-- {
		if !r.samples[i].at.After(from) {
			return r.samples[i].lsn
		}
	}
	if len(r.samples) > 0 {
		return r.samples[0].lsn
	}
	return 0
}

// settleLocked reports whether ho's hand-off is done, and if so takes its entry out of the
// hand-off: a live one is routed straight to its subscriber from the next transaction on, a
// failed one is dropped until its subscriber lets it go.
func (r *Router) settleLocked(ho *handoffEntry) bool {
	if ho.holding {
		// Done only if it failed; either way it waits for its look-back.
		return false
	}
	select {
	case <-ho.h.Done():
	default:
		return false
	}
	ho.settled = true
	ho.items, ho.bytes = nil, 0
	if ho.h.Phase() == handoff.Live && !ho.e.detached {
		ho.t.remove(ho.e)
		ho.e.target = ho.target
		ho.t.add(ho.e, ho.types)
	}
	return true
}

// failHandoffsLocked fails every hand-off in progress for reason, and settles every one done:
// the stream lost what they were offered, or restarted.
func (r *Router) failHandoffsLocked(reason handoff.Reason, detail string) {
	for _, ho := range r.handoffs {
		ho.h.Fail(reason, detail, nil)
		ho.holding, ho.held, ho.heldBytes = false, nil, 0
		r.settleLocked(ho)
	}
	clear(r.handoffs)
	r.handoffs = r.handoffs[:0]
}

// dropHandoffLocked takes ho out of the router's list as its subscription detaches, letting go
// of what its hand-off held.
func (r *Router) dropHandoffLocked(ho *handoffEntry) {
	if ho.settled {
		return
	}
	ho.h.Fail(handoff.ReasonReplicationRestarted, "the subscription ended", nil)
	ho.settled = true
	ho.items, ho.bytes = nil, 0
	for i, x := range r.handoffs {
		if x == ho {
			last := len(r.handoffs) - 1
			r.handoffs[i] = r.handoffs[last]
			r.handoffs[last] = nil
			r.handoffs = r.handoffs[:last]
			break
		}
	}
}

// checkSnapshot refuses a snapshot the table's rows cannot be read for, or that the request
// contradicts.
func checkSnapshot(table string, req Request, info *TableInfo) error {
	switch {
	case !req.From.IsZero():
		return &fault.Error{Code: fault.CodeBadFrame, Field: "snapshot",
			Message: "a snapshot starts from the table's rows as they are now, and from resumes after a position the client holds: send one of them, not both"}
	case len(info.Key) == 0:
		return &fault.Error{Code: fault.CodeBadFrame, Field: "snapshot", Message: fmt.Sprintf(
			"table %s has neither a primary key nor a replica identity index, so its rows cannot be read in pages nor told apart; subscribe without snapshot, or ask the operator to give it a primary key", table)}
	}
	return nil
}
