package router

import (
	"strings"
	"time"
	"unsafe"

	"github.com/heraldrt/herald/internal/change"
)

// History is what the router keeps of the transactions it routed, so a subscription that comes
// back with the position it last had (a `from`) is handed what it missed rather than a resync:
// the changes of the streamed tables, transaction by transaction in commit order, bounded by
// bytes and by age, oldest first out. One ring for every table: its bound is the node's, not
// each table's.
//
// A resumed subscription's from is inside the history when no transaction after it was let
// go: from is at or after the commit LSN of the last transaction evicted (Floor). The replay
// is routed through the subscription's own filter and policy exactly as the live changes were,
// under the router's lock, so nothing routed live comes between the replay and the first live
// change.
type History struct {
	maxBytes int           // read-only
	maxAge   time.Duration // read-only

	// Guarded by the Router's mu.
	txns  []histTxn // oldest first; txns[start:] is live
	start int
	bytes int
	// floor is the commit LSN of the last transaction let go, or the position the stream went
	// live after (Seed): a from at or after it is inside. seeded is false until then: the
	// history covers nothing.
	floor  change.LSN
	seeded bool
}

// DefaultHistoryBytes and DefaultHistoryAge bound a node's table history.
const (
	DefaultHistoryBytes = 64 << 20
	DefaultHistoryAge   = 10 * time.Minute
)

// histTxn is one routed transaction as history keeps it: only the events of streamed tables,
// each with its index in the transaction (its position).
type histTxn struct {
	lsn    change.LSN
	at     time.Time // when it was routed: age is measured from here
	events []histEvent
	bytes  int
	// xid8 and end are the transaction's id and the end of its commit record: a snapshot's
	// hand-off judges the look-back by them (HandoffConfig.Lookback).
	xid8 change.XID8
	end  change.LSN
	// overflow is set for a transaction too large to hold, kept without its rows: the history
	// was let go up to it (a resume cannot pass it), but a hand-off's look-back still offers
	// it, as the gap it is.
	overflow *change.Overflow
}

type histEvent struct {
	idx uint32
	ev  change.Event
}

// NewHistory returns a history bounded by maxBytes and maxAge (zero: the defaults).
func NewHistory(maxBytes int, maxAge time.Duration) *History {
	if maxBytes <= 0 {
		maxBytes = DefaultHistoryBytes
	}
	if maxAge <= 0 {
		maxAge = DefaultHistoryAge
	}
	return &History{maxBytes: maxBytes, maxAge: maxAge}
}

// eventBytes is what an event holds in memory as the history keeps it: its struct (within
// histEvent), its images' columns, and their names and values (each allocated apart, rounded
// up to the allocator's smallest class), so that changefeed.history_bytes bounds the heap the
// history takes, not a fraction of it (BenchmarkHistoryMemory compares the two).
func eventBytes(e *change.Event) int {
	n := int(unsafe.Sizeof(histEvent{})) + len(e.Table)
	for _, row := range [2]change.Row{e.Before, e.After} {
		if len(row) > 0 {
			n += len(row) * int(unsafe.Sizeof(change.Column{}))
		}
		for i := range row {
			n += allocBytes(len(row[i].Name)) + allocBytes(len(row[i].Value))
		}
	}
	return n
}

// allocBytes is n bytes as the allocator hands them out: at least 8, in steps of 8 (16 past
// 128), which is close enough for small strings and values.
func allocBytes(n int) int {
	switch {
	case n == 0:
		return 0
	case n <= 128:
		return (n + 7) &^ 7
	}
	return (n + 15) &^ 15
}

// append keeps txn's events of the tables keep reports, then lets go of the oldest
// transactions past the bounds. The caller holds the Router's mu.
func (h *History) append(txn *change.Txn, now time.Time, keep func(table string) bool) {
	var t histTxn
	kept := func(e *change.Event) bool { return e.Op != change.Message && e.Table != "" && keep(e.Table) }
	n := 0
	for i := range txn.Events {
		if kept(&txn.Events[i]) {
			n++
		}
	}
	if n > 0 {
		t.events = make([]histEvent, 0, n) // exactly: the history's bytes are mostly these
	}
	for i := range txn.Events {
		e := &txn.Events[i]
		if !kept(e) {
			continue
		}
		t.events = append(t.events, histEvent{idx: uint32(i + 1), ev: *e})
		t.bytes += eventBytes(e)
	}
	if txn.Overflow != nil {
		// Its rows were let go before they reached the router: a from before it cannot be
		// replayed past it. It stays, rowless, for hand-offs' look-backs.
		h.evictAll(txn.CommitLSN)
		h.txns = append(h.txns, histTxn{lsn: txn.CommitLSN, at: now, xid8: txn.XID8, end: txn.EndLSN, overflow: txn.Overflow})
		return
	}
	if len(t.events) > 0 {
		t.lsn, t.at, t.xid8, t.end = txn.CommitLSN, now, txn.XID8, txn.EndLSN
		h.txns = append(h.txns, t)
		h.bytes += t.bytes
	}
	h.trim(now)
}

// trim lets go of the oldest transactions past the byte bound or the age bound.
func (h *History) trim(now time.Time) {
	for h.start < len(h.txns) {
		t := &h.txns[h.start]
		if h.bytes <= h.maxBytes && now.Sub(t.at) <= h.maxAge {
			break
		}
		h.bytes -= t.bytes
		h.floor = t.lsn
		h.txns[h.start] = histTxn{}
		h.start++
	}
	// Reclaim the let-go prefix once it is most of the slice.
	if h.start > 0 && h.start >= len(h.txns)/2 {
		h.txns = append(h.txns[:0], h.txns[h.start:]...)
		h.start = 0
	}
}

// evictAll lets go of everything up to lsn.
func (h *History) evictAll(lsn change.LSN) {
	for i := h.start; i < len(h.txns); i++ {
		h.txns[i] = histTxn{}
	}
	h.txns, h.start, h.bytes = h.txns[:0], 0, 0
	h.floor = max(h.floor, lsn)
}

// seed says the stream went live after position lsn: nothing before it is kept.
func (h *History) seed(lsn change.LSN) {
	if !h.seeded {
		h.floor, h.seeded = max(h.floor, lsn), true
	}
}

// covers reports whether every transaction after from that touched a streamed table is kept.
func (h *History) covers(from change.LSN) bool {
	return h.seeded && from >= h.floor
}

// after calls fn for each kept event after position (lsn, idx) (idx 0: after the whole
// transaction), in commit order.
func (h *History) after(lsn change.LSN, idx uint32, fn func(lsn change.LSN, e *histEvent)) {
	for i := h.start; i < len(h.txns); i++ {
		t := &h.txns[i]
		if t.lsn < lsn || t.lsn == lsn && idx == 0 {
			continue
		}
		for k := range t.events {
			if t.lsn == lsn && t.events[k].idx <= idx {
				continue
			}
			fn(t.lsn, &t.events[k])
		}
	}
}

// since calls fn for each kept transaction routed at or after from, oldest first.
func (h *History) since(from time.Time, fn func(t *histTxn)) {
	i := len(h.txns)
	for i > h.start && !h.txns[i-1].at.Before(from) {
		i--
	}
	for ; i < len(h.txns); i++ {
		fn(&h.txns[i])
	}
}

// HistoryStats is a snapshot of the history's size.
type HistoryStats struct {
	Transactions int
	Bytes        int
	Floor        change.LSN // a from at or after it is inside
}

func (h *History) stats() HistoryStats {
	return HistoryStats{Transactions: len(h.txns) - h.start, Bytes: h.bytes, Floor: h.floor}
}

// streams reports whether table is one the router streams: the configured tables, or, without
// a list, every table but the system catalogs'.
func (r *Router) streams(table string) bool {
	if r.allowed != nil {
		return r.allowed[table]
	}
	schema, _, _ := strings.Cut(table, ".")
	return schema != "pg_catalog" && schema != "information_schema" && schema != "pg_toast"
}
