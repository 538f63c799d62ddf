package router

import (
	"context"
	"fmt"
	"slices"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/stream"
)

// Accept routes one committed transaction: the changefeed's Sink. It hands every item of the
// transaction to the bus, and returns once the bus has flushed them, so the changefeed
// confirms only what was handed on. Subscriptions attach between transactions, never during
// one, so the head a subscription reports is exact.
func (r *Router) Accept(ctx context.Context, txn *change.Txn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
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
	if err := r.bus.Flush(ctx); err != nil {
		return fmt.Errorf("router: flush transaction %s to the bus: %w", txn.CommitLSN, err)
	}
	r.head, r.live = txn.CommitLSN, true
	return nil
}

// overflow tells every subscriber of a table an oversized transaction touched that its view is
// stale from that transaction on. The resync counts what was lost only where the count is
// exact: an unfiltered subscription would have had each of the table's n changes; how many a
// filter would have let through is unknown, so a filtered one's resync has no lost.
func (r *Router) overflow(txn *change.Txn) {
	for name, n := range txn.Overflow.Tables {
		t := r.tables[name]
		if t == nil {
			continue
		}
		first := stream.TablePosition(txn.CommitLSN, 1)
		last := stream.TablePosition(txn.CommitLSN, uint32(txn.Overflow.Changes))
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

	if e.Op == change.Truncate {
		t.each(func(en *entry) {
			rt.send(&member{sub: en.sub, target: en.target, shape: en.shape, columns: en.columns}, e, idx, stream.OpTruncate, nil, nil, false)
		})
		return
	}
	rt.collect(t.scan)
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
// (op is "").
type decision struct {
	op      stream.Op
	row     change.Row
	old     change.Row
	keyOnly bool
	gap     bool
}

// view decides, once for a group, what its subscribers' view needs of change e (see the
// package doc's table).
func (rt *routing) view(g *group, e *change.Event) decision {
	switch e.Op {
	case change.Insert:
		switch rt.eval(g, e.After) {
		case filter.True:
			return decision{op: stream.OpInsert, row: e.After}
		case filter.Unknown:
			return decision{op: stream.OpInsert, gap: true}
		}
	case change.Delete:
		if rt.eval(g, e.Before) != filter.False {
			return decision{op: stream.OpDelete, old: e.Before, keyOnly: e.BeforeKeyOnly}
		}
	case change.Update:
		old, keyOnly := rt.oldImage(e)
		was := filter.Unknown
		if old != nil {
			was = rt.eval(g, old)
		}
		is := rt.eval(g, e.After)
		switch {
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
