package router

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/stream"
)

// Accept routes one committed transaction: the changefeed's Sink. It hands every item of the
// transaction to the bus, and returns once the bus has flushed them, so the changefeed
// confirms only what was handed on. Subscriptions attach between transactions, never during
// one, so the head a subscription reports is exact.
func (r *Router) Accept(ctx context.Context, txn *change.Txn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if txn.CommitLSN <= r.head && r.live {
		// Routed already, or inside a gap every subscription here was told of (GapAll).
		return nil
	}
	if txn.Overflow != nil {
		r.overflow(txn)
	}
	rt := &r.rt
	rt.r = r
	for i := range txn.Events {
		e := &txn.Events[i]
		if e.Op == change.Message {
			continue
		}
		t := r.tables[e.Table]
		if t == nil {
			continue
		}
		rt.event(t, e, uint32(i+1))
	}
	// The writers the transaction fed wake now, each to all of its changes at once.
	rt.wakes.Wake()
	if len(r.handoffs) > 0 {
		// Every hand-off in progress is offered every transaction, what its subscription sees
		// of it or nothing: its position counts.
		r.offerHandoffsLocked(txn)
	}
	if r.hist != nil {
		r.hist.append(txn, time.Now(), r.streams)
	}
	if err := r.bus.Flush(ctx); err != nil {
		return fmt.Errorf("router: flush transaction %s to the bus: %w", txn.CommitLSN, err)
	}
	if !messageOnly(txn) {
		r.head, r.accepted = txn.CommitLSN, txn.CommitLSN
		r.noteLocked(time.Now(), txn.CommitLSN)
	}
	// A logical message sent outside any transaction is no position to start after: its LSN
	// is the end of its record, where the next record, perhaps the commit of a transaction
	// whose changes came before it, begins. As the head it would have that transaction
	// taken for one routed already.
	r.live = true
	return nil
}

// messageOnly reports whether txn is a logical message sent outside any transaction, which the
// changefeed hands on at once, positioned by its own LSN: no transaction.
func messageOnly(txn *change.Txn) bool {
	if txn.Transactional || txn.Overflow != nil {
		return false
	}
	for i := range txn.Events {
		if txn.Events[i].Op != change.Message {
			return false
		}
	}
	return true
}

// overflow tells every subscriber of a table an oversized transaction touched that its view is
// stale from that transaction on. The resync counts what was lost only where the count is
// exact: an unfiltered subscription would have had each of the table's n changes; how many a
// filter would have let through is unknown, so a filtered one's resync has no lost.
func (r *Router) overflow(txn *change.Txn) {
	for name, n := range txn.Overflow.Tables {
		if t := r.tables[name]; t != nil {
			r.overflowTable(t, txn.CommitLSN, txn.Overflow, n)
		}
	}
}

// overflowTable tells every subscriber of t that the oversized transaction at lsn let go of n
// of its changes to t.
func (r *Router) overflowTable(t *table, lsn change.LSN, of *change.Overflow, n int) {
	first := stream.TablePosition(lsn, 1)
	last := stream.TablePosition(lsn, uint32(of.Changes))
	counted := stream.NewGap(&stream.Gap{First: first, Last: last, Lost: uint64(n), Reason: stream.ReasonTransactionTooLarge})
	uncounted := stream.NewGap(&stream.Gap{First: first, Last: last, Reason: stream.ReasonTransactionTooLarge})
	t.each(func(e *entry) {
		it := uncounted
		if e.filter.String() == "null" { // the filter that matches every row
			it = counted
		}
		r.bus.Deliver(e.target, e.sub, it)
		r.delivered.Add(1)
	})
}

// routing is the state of routing one transaction.
type routing struct {
	r     *Router
	cands []*group
	items []shaped
	// keyOld is the old key of the current update when Postgres sent no old image (it kept
	// the key), read from the new image; built at most once per change.
	keyOld   change.Row
	keyOldOK bool
	// The current change's images as the table's row rule reads them, decoded at most once
	// per change and shared by every group's evaluation.
	imAfter, imOld     *policy.Image
	imAfterOK, imOldOK bool
	denied             *atomicCounter // the table's rows_denied
	// The row rule's index keys of the change's images (RowRule.RowKey), and the images
	// they were read from: after for an insert or update, before for a delete or update.
	rowAfter, rowBefore     change.Row
	keyAfter, keyBefore     string
	stateAfter, stateBefore policy.KeyState
	// wakes are the writers the transaction's deliveries made runnable, woken once it is
	// routed, or once they are this many (wakeAfter) in a large one.
	wakes stream.Wakeups
}

// wakeAfter is how many writers a transaction may hold asleep before they are woken while it
// is still being routed, so the other processors can start writing.
const wakeAfter = 4 << 10

// shaped is one change view, shared by the subscribers of one op, column list and old image:
// the old image depends on what each group's filter saw, and one group's view must never reach
// another's subscribers.
type shaped struct {
	op      stream.Op
	shape   string
	withOld bool
	keyOnly bool
	item    *stream.Item
}

func (rt *routing) collectOne(g *group) {
	if g.seen != rt.r.gen {
		g.seen = rt.r.gen
		rt.cands = append(rt.cands, g)
	}
}

// reach reads the row rule's index keys of change e's images, once per change.
func (rt *routing) reach(rule *policy.RowRule, e *change.Event) {
	rt.rowAfter, rt.rowBefore = nil, nil
	rt.stateAfter, rt.stateBefore = policy.KeyNull, policy.KeyNull
	if e.Op != change.Delete {
		rt.rowAfter = e.After
		rt.keyAfter, rt.stateAfter = rule.RowKey(e.After)
	}
	switch e.Op {
	case change.Delete:
		rt.rowBefore = e.Before
	case change.Update:
		rt.rowBefore, _ = rt.oldImage(e)
	}
	if rt.rowBefore != nil {
		rt.keyBefore, rt.stateBefore = rule.RowKey(rt.rowBefore)
	} else if e.Op == change.Update {
		rt.stateBefore = policy.KeyUnknown // nothing of the old row is known
	}
}

// reachable reports whether group g's row rule may allow one of the change's images: its
// claim key matches the image's key, or either is unknown. Every other group the rule denies
// on both, so it need not be evaluated.
func (rt *routing) reachable(g *group) bool {
	if !g.keyed {
		return true
	}
	match := func(key string, state policy.KeyState) bool {
		return state == policy.KeyUnknown || state == policy.KeyFound && key == g.ckey
	}
	return match(rt.keyAfter, rt.stateAfter) || match(rt.keyBefore, rt.stateBefore)
}

func (rt *routing) collect(gs groups) {
	for _, g := range gs {
		if g.seen != rt.r.gen {
			g.seen = rt.r.gen
			rt.cands = append(rt.cands, g)
		}
	}
}

// event routes one change of table t.
func (rt *routing) event(t *table, e *change.Event, idx uint32) {
	rt.r.routed.Add(1)
	rt.r.gen++
	rt.cands = rt.cands[:0]
	clear(rt.items) // the scratch space must not keep items alive
	rt.items = rt.items[:0]
	rt.keyOld, rt.keyOldOK = nil, false
	rt.rowAfter, rt.rowBefore = nil, nil
	rt.imAfter, rt.imOld, rt.imAfterOK, rt.imOldOK, rt.denied = nil, nil, false, false, nil

	if e.Op == change.Truncate {
		t.each(func(en *entry) {
			rt.send(&member{sub: en.sub, target: en.target, shape: en.shape, columns: en.columns}, e, idx, stream.OpTruncate, nil, nil, false)
		})
		return
	}
	if t.row != nil {
		rt.reach(t.row, e)
	}
	switch {
	case t.rule == nil:
		rt.collect(t.scan)
	case e.Op == change.Update && rt.rowBefore == nil:
		rt.collect(t.scan) // nothing of the old row is known: any group may have had it
	default:
		// Under a row rule with an index equality, only the scan groups whose claim matches
		// the row's value, before or after, may see the change: the rest are not visited.
		if rt.rowAfter != nil {
			t.rule.Candidates(rt.rowAfter, rt.collectOne)
		}
		if rt.rowBefore != nil {
			t.rule.Candidates(rt.rowBefore, rt.collectOne)
		}
	}
	for col, c := range t.byCol {
		// The subscribers that may see the row now, and those that may have seen it before.
		rt.lookup(c, e.After, col)
		switch {
		case e.Op == change.Insert:
		case e.Before != nil && has(e.Before, col):
			rt.lookup(c, e.Before, col)
		case e.Before == nil && e.Op == change.Update && slices.Contains(e.Key, col) && has(e.After, col):
			// An update that kept the key: the old value is the new one, looked up above.
		default:
			// The old value is unknown (the table's replica identity no longer logs the
			// column): any of this column's subscribers may have had the row in view.
			for _, gs := range c.keys {
				rt.collect(gs)
			}
		}
	}
	for _, g := range rt.cands {
		if g.rule != nil && !rt.reachable(g) {
			continue // the rule's index equality rules the row out, before and after
		}
		v := rt.view(g, e)
		if v.op == "" {
			continue
		}
		for i := range g.members {
			m := &g.members[i]
			// An entry indexed under several keys (an in list) is in several groups; an update
			// that moved the row between two of its keys reaches it once.
			if g.multi > 0 && len(m.en.keys) > 1 {
				if m.en.seen == rt.r.gen {
					continue
				}
				m.en.seen = rt.r.gen
			}
			if v.gap {
				if v.err != nil {
					rt.policyGap(m, e, idx, v.err)
					continue
				}
				rt.gap(m, e, idx)
				continue
			}
			rt.send(m, e, idx, v.op, v.row, v.old, v.keyOnly)
		}
	}
}

func has(row change.Row, col string) bool {
	_, ok := row.Get(col)
	return ok
}

func (rt *routing) lookup(c *column, row change.Row, col string) {
	v, ok := row.Get(col)
	if !ok {
		return
	}
	if key, ok := filter.Key(c.typ, v); ok {
		rt.collect(c.keys[key])
	}
}

func (rt *routing) eval(g *group, row change.Row) filter.Result {
	if g.filter == nil {
		return filter.True
	}
	rt.r.evals.Add(1)
	return g.filter.Eval(row)
}

// oldImage is the old image of update e as far as it is known: the one Postgres sent, or,
// when it sent none because the key did not change, the key read from the new image. keyOnly
// says the image holds only the key columns. It is nil when nothing of the old row is known.
func (rt *routing) oldImage(e *change.Event) (old change.Row, keyOnly bool) {
	if e.Before != nil {
		return e.Before, e.BeforeKeyOnly
	}
	if !rt.keyOldOK {
		rt.keyOldOK = true
		rt.keyOld = keyOf(e.After, e.Key)
	}
	return rt.keyOld, true
}

// keyOf is the key columns of row, or nil when there is no key or row lacks part of it.
func keyOf(row change.Row, key []string) change.Row {
	if len(key) == 0 {
		return nil
	}
	out := make(change.Row, 0, len(key))
	for _, c := range row {
		if slices.Contains(key, c.Name) {
			out = append(out, c)
		}
	}
	if len(out) != len(key) {
		return nil
	}
	return out
}

// decision is what one group's subscribers need of one change: a frame, a gap, or nothing
// (op is ""). err is set, with gap, when the group's row rule failed: a policy_error.
type decision struct {
	op      stream.Op
	row     change.Row
	old     change.Row
	keyOnly bool
	gap     bool
	err     error
}

// judge decides whether group g may see row image row: its filter, then, where the filter
// does not rule the row out, its row rule. after says row is the new image of the change,
// and old is then the image before it (nil for an insert). A rule that denies makes the
// answer False; one that fails returns its error, and the answer must not be read as
// visible. counted says a denial withholds the row (rows_denied).
func (rt *routing) judge(g *group, e *change.Event, row change.Row, after bool, old change.Row, counted bool) (filter.Result, error) {
	res := rt.eval(g, row)
	if g.rule == nil || res == filter.False {
		return res, nil
	}
	var im, oldIm *policy.Image
	if after {
		im = rt.afterImage(g.rule, row)
		if old != nil {
			oldIm = rt.oldImage2(g.rule, old)
		}
	} else {
		im = rt.oldImage2(g.rule, row)
	}
	rt.r.ruleEvals.Add(1)
	d, err := g.rule.Visible(im, oldIm, g.claims)
	switch d {
	case policy.Allow:
		return res, nil
	case policy.Deny:
		if counted {
			if rt.denied == nil {
				rt.denied = rt.r.counterFor(&rt.r.denied, e.Table)
			}
			rt.denied.Add(1)
		}
		return filter.False, nil
	}
	rt.r.ruleErrs.Add(1)
	rt.r.counterFor(&rt.r.ruleErrsBy, e.Table).Add(1)
	if err == nil {
		err = &policy.EvalError{Rule: g.rule.Ref(), Detail: "the rule did not decide"}
	}
	return filter.Unknown, err
}

func (rt *routing) afterImage(rule *policy.RowRule, row change.Row) *policy.Image {
	if !rt.imAfterOK {
		rt.imAfter, rt.imAfterOK = rule.Decode(row), true
	}
	return rt.imAfter
}

// oldImage2 decodes the change's image before it: every caller passes the same one per change
// (the delete's row, or the update's old image as oldImage gives it).
func (rt *routing) oldImage2(rule *policy.RowRule, row change.Row) *policy.Image {
	if !rt.imOldOK {
		rt.imOld, rt.imOldOK = rule.Decode(row), true
	}
	return rt.imOld
}

// view decides, once for a group, what its subscribers' view needs of change e (see the
// package doc's table). A row rule's answer joins the filter's: a row is in view when both
// say so. A rule that fails is a policy_error gap, never a guess.
func (rt *routing) view(g *group, e *change.Event) decision {
	switch e.Op {
	case change.Insert:
		is, err := rt.judge(g, e, e.After, true, nil, true)
		switch {
		case err != nil:
			return decision{op: stream.OpInsert, gap: true, err: err}
		case is == filter.True:
			return decision{op: stream.OpInsert, row: e.After}
		case is == filter.Unknown:
			return decision{op: stream.OpInsert, gap: true}
		}
	case change.Delete:
		was, err := rt.judge(g, e, e.Before, false, nil, true)
		switch {
		case err != nil:
			return decision{op: stream.OpDelete, gap: true, err: err}
		case was != filter.False:
			return decision{op: stream.OpDelete, old: e.Before, keyOnly: e.BeforeKeyOnly}
		}
	case change.Update:
		old, keyOnly := rt.oldImage(e)
		was := filter.Unknown
		var wasErr error
		if old != nil {
			was, wasErr = rt.judge(g, e, old, false, nil, false)
		}
		is, isErr := rt.judge(g, e, e.After, true, old, true)
		switch {
		case isErr != nil:
			return decision{op: stream.OpUpdate, gap: true, err: isErr}
		case wasErr != nil:
			return decision{op: stream.OpUpdate, gap: true, err: wasErr}
		case is == filter.Unknown:
			// A column the filter reads is absent from the new image (an unchanged value
			// stored out of line, with no full old image to fill it from): whether the row
			// is in view now cannot be told, and guessing either way could leave the client
			// wrong without knowing it.
			return decision{op: stream.OpUpdate, gap: true}
		case is == filter.True && was == filter.False:
			return decision{op: stream.OpEnter, row: e.After}
		case is == filter.True:
			// In view before, or maybe: an update, which the client applies as an upsert.
			return decision{op: stream.OpUpdate, row: e.After, old: visibleOld(was, e), keyOnly: e.BeforeKeyOnly}
		case was == filter.True:
			return decision{op: stream.OpLeave, old: old, keyOnly: keyOnly}
		case was == filter.Unknown && old != nil:
			// Maybe in view before, not now: the client removes the row if it has it.
			return decision{op: stream.OpLeave, old: old, keyOnly: keyOnly}
		case was == filter.Unknown:
			// Nothing of the old row is known, not even its key: a client holding it could
			// not be told which row to remove.
			return decision{op: stream.OpLeave, gap: true}
		}
	}
	return decision{}
}

// visibleOld is the old image a subscriber may see on an update: one that was in its view,
// or the key alone.
func visibleOld(was filter.Result, e *change.Event) change.Row {
	if was == filter.True || e.BeforeKeyOnly {
		return e.Before
	}
	return nil
}

// gap tells one subscriber that change idx of e may have changed its view in a way the
// router cannot tell: a gap covering that one change.
func (rt *routing) gap(m *member, e *change.Event, idx uint32) {
	at := stream.TablePosition(e.LSN, idx)
	rt.r.bus.Deliver(m.target, m.sub, stream.NewGap(&stream.Gap{First: at, Last: at, Reason: stream.ReasonIncompleteImage}))
	rt.r.delivered.Add(1)
	rt.r.gaps.Add(1)
}

// policyGap tells one subscriber that its row rule failed on change idx of e: the change is
// withheld, and a gap covering it says so (policy_error), naming the rule. Every other
// subscriber's view is untouched.
func (rt *routing) policyGap(m *member, e *change.Event, idx uint32, err error) {
	rule := ""
	if ee, ok := err.(*policy.EvalError); ok {
		rule = ee.Rule
	}
	at := stream.TablePosition(e.LSN, idx)
	rt.r.bus.Deliver(m.target, m.sub, stream.NewGap(&stream.Gap{First: at, Last: at, Reason: stream.ReasonPolicyError, Rule: rule}))
	rt.r.delivered.Add(1)
}

// send hands the subscriber its view of change idx of e: one item per op, column list and old
// image, shared by every subscriber of that shape.
func (rt *routing) send(en *member, e *change.Event, idx uint32, op stream.Op, row, old change.Row, oldKeyOnly bool) {
	var it *stream.Item
	withOld := old != nil
	for i := range rt.items {
		sh := &rt.items[i]
		if sh.op == op && sh.shape == en.shape && sh.withOld == withOld && sh.keyOnly == oldKeyOnly {
			it = sh.item
			break
		}
	}
	if it == nil {
		c := &stream.Change{LSN: e.LSN, Idx: idx, Op: op, Table: e.Table,
			Row: project(row, en.columns), Old: project(old, en.columns), OldKeyOnly: oldKeyOnly && old != nil,
			CommitTime: e.CommitTime, TxID: uint64(e.TxID), WriteTag: e.WriteTag}
		if c.Row != nil {
			c.Omitted = projectNames(e.Omitted, en.columns)
		}
		it = stream.NewChange(c)
		rt.items = append(rt.items, shaped{op: op, shape: en.shape, withOld: withOld, keyOnly: oldKeyOnly, item: it})
	}
	rt.r.bus.DeliverDeferred(en.target, en.sub, it, &rt.wakes)
	rt.r.delivered.Add(1)
	if rt.wakes.Len() >= wakeAfter {
		rt.wakes.Wake()
	}
}

// project keeps the listed columns of row, in table order.
func project(row change.Row, cols map[string]bool) change.Row {
	if row == nil || cols == nil {
		return row
	}
	out := make(change.Row, 0, len(cols))
	for _, c := range row {
		if cols[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

func projectNames(names []string, cols map[string]bool) []string {
	if cols == nil || names == nil {
		return names
	}
	var out []string
	for _, n := range names {
		if cols[n] {
			out = append(out, n)
		}
	}
	return out
}
