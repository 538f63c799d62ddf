package handoff

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/heraldrt/herald/internal/change"
)

// This file is the pure model property test of the research note (§8.1): a small MVCC
// simulator of one table drives hand-offs through random interleavings of transactions,
// snapshots, decoding and positions, and checks each subscriber's view against the truth:
//
//   - at Live(head), the client's view equals the filter applied to the table's state after
//     every transaction committed at or before head;
//   - after each later transaction, it equals the filtered state at that transaction;
//   - every transaction is delivered at most once, in commit order, never one the snapshot
//     saw, and every one it did not see (with something the subscriber sees) up to head is
//     delivered by Live.
//
// Postgres's behaviour is modelled as the note measured it: a transaction writes its commit
// record, then later leaves the running set (so visibility order is not commit order: Long
// Fork); the decoder streams a commit once its record is flushed, independently of whether it
// is visible yet; row locks are held until a transaction ends, so writers of one key become
// visible in commit order; asynchronous commits become visible before their record is
// flushed; transaction ids start just before a wraparound, in epoch 3, and the stream carries
// them as 32 bits, widened as the changefeed widens them.

// mutation is a deliberate defect, to show the model notices each (the note's §8.1 list).
type mutation int

const (
	mutNone       mutation = iota
	mutRawXID              // the stream's 32-bit xid used unwidened (Electric's server, §2.5-1)
	mutStopAtXmax          // stop judging at the first xid at or past xmax (§2.5-2)
	mutNoLookback          // no history replay at registration (§2.5-3)
	mutLSNCut              // an LSN cut at Bound instead of judging each transaction
	mutWriteBound          // Bound from the write (flush) position, not the insert one (§2.5-5)
)

func (m mutation) String() string {
	return [...]string{"none", "raw 32-bit xid", "stop at xmax", "no look-back", "LSN cut", "write-position bound"}[m]
}

type txState uint8

const (
	running  txState = iota + 1 // writing; holds its row locks
	recorded                    // commit record written; still running to snapshots (e.g. waiting on a sync standby)
	ended                       // committed and visible
	aborted
)

// mevent is one row change: old nil is an insert, new nil a delete.
type mevent struct {
	key      int
	old, new *int
}

type mtxn struct {
	xid         change.XID8
	state       txState
	sync        bool // synchronous commit: the record is flushed before the transaction ends
	events      []mevent
	commit, end change.LSN
	dispatched  int // 1 + its index in the dispatched history; 0 until streamed
}

// record is one WAL record the decoder streams: a commit, or a fence (txn nil).
type record struct {
	start, end change.LSN
	txn        *mtxn
}

// mview is one change as a subscriber sees it: enter, update or leave a key.
type mview struct {
	op       byte // 'e', 'u', 'l'
	key, val int
}

type stage uint8

const (
	registered stage = iota + 1
	snapTaken
	snapSet
	rowsDone
)

// msub is one subscriber: its hand-off, the reader's progress, and the client's view.
type msub struct {
	m      *model
	id     int
	mod    int // the filter: a row is in view when its value % mod == 0
	h      *Handoff[mview]
	stage  stage
	regLen int // how many commits had been dispatched when it registered

	snapText    string
	bound       change.LSN
	xmax        change.XID8
	visibleAtS  map[change.XID8]bool // ground truth: the committed transactions that had ended at the snapshot
	rows        map[int]int
	seenPastMax bool    // a transaction at or past xmax was judged
	unjudged    []*mtxn // offered before the snapshot was set, for the counts

	client    map[int]int
	delivered map[change.XID8]bool
	lastEnd   change.LSN
	live      bool
}

func (s *msub) in(v int) bool { return v%s.mod == 0 }

type stateAt struct {
	commit change.LSN
	state  map[int]int
}

type model struct {
	rng      *rand.Rand
	mut      mutation
	keys     int
	lookback int // commits replayed at registration

	nextXID, latestCompleted change.XID8
	running                  []*mtxn // running or recorded
	locks                    map[int]*mtxn
	nextVal                  int

	wal             []record
	insert, flushed change.LSN
	decoded         int     // records of wal streamed
	history         []*mtxn // commits streamed, in order
	routerHead      change.LSN
	lastDispatchEnd change.LSN
	ref             change.XID8 // the changefeed's widening reference
	walState        map[int]int
	states          []stateAt
	subs            []*msub
	maxSubs         int
	err             error
	stats           modelStats
}

// modelStats counts what a run exercised, to show the model reaches the hard cases.
type modelStats struct {
	longFork     int // a visible transaction judged after one at or past xmax
	lookbackHits int // a transaction from the registration's history, not visible, delivered
	delivered    int // transactions delivered
	skipped      int // non-empty transactions skipped as visible
	wrapped      int // runs whose offered xids spanned two epochs
	lives        int
}

func (a *modelStats) add(b modelStats) {
	a.longFork += b.longFork
	a.lookbackHits += b.lookbackHits
	a.delivered += b.delivered
	a.skipped += b.skipped
	a.wrapped += b.wrapped
	a.lives += b.lives
}

func newModel(seed uint64, mut mutation) *model {
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	start := change.MakeXID8(3, math.MaxUint32-uint32(rng.IntN(120)))
	m := &model{
		rng:             rng,
		mut:             mut,
		keys:            3 + rng.IntN(6),
		lookback:        2 + rng.IntN(10),
		nextXID:         start,
		latestCompleted: start - 1,
		ref:             start,
		locks:           map[int]*mtxn{},
		walState:        map[int]int{},
		insert:          0x1000000,
		flushed:         0x1000000,
		maxSubs:         1 + rng.IntN(3),
	}
	if mut == mutNoLookback {
		m.lookback = 0
	}
	return m
}

func (m *model) fail(format string, args ...any) {
	if m.err == nil {
		m.err = fmt.Errorf(format, args...)
	}
}

// run plays steps random actions, then settles every transaction and subscriber.
func (m *model) run(steps int) error {
	for i := 0; i < steps && m.err == nil; i++ {
		m.step()
	}
	if m.err == nil {
		m.settle()
	}
	return m.err
}

func (m *model) step() {
	switch r := m.rng.IntN(100); {
	case r < 10:
		m.begin()
	case r < 30:
		m.write()
	case r < 40:
		m.commitRecord()
	case r < 52:
		m.endTx()
	case r < 55:
		m.abort()
	case r < 62:
		m.flush()
	case r < 80:
		m.decode()
	case r < 83:
		m.keepalive()
	case r < 86:
		m.subscribe()
	default:
		m.advanceSub()
	}
}

// ---- the database ----

func (m *model) begin() {
	if len(m.running) >= 6 {
		return
	}
	t := &mtxn{xid: m.nextXID, state: running, sync: m.rng.IntN(10) < 7}
	m.nextXID++
	m.running = append(m.running, t)
}

func (m *model) pick(st txState) *mtxn {
	var c []*mtxn
	for _, t := range m.running {
		if t.state == st {
			c = append(c, t)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[m.rng.IntN(len(c))]
}

// write has a running transaction change one key, once it holds the key's lock: a writer of a
// key waits until the previous writer has ended (F10), so it sees that writer's effect.
func (m *model) write() {
	t := m.pick(running)
	if t == nil {
		return
	}
	k := m.rng.IntN(m.keys)
	if holder := m.locks[k]; holder != nil && holder != t {
		return
	}
	m.locks[k] = t
	cur, ok := m.walState[k]
	for _, e := range t.events {
		if e.key == k {
			if e.new == nil {
				ok = false
			} else {
				cur, ok = *e.new, true
			}
		}
	}
	m.nextVal++
	v := m.nextVal
	switch {
	case !ok:
		t.events = append(t.events, mevent{key: k, new: &v})
	case m.rng.IntN(4) == 0:
		old := cur
		t.events = append(t.events, mevent{key: k, old: &old})
	default:
		old := cur
		t.events = append(t.events, mevent{key: k, old: &old, new: &v})
	}
}

// commitRecord writes a running transaction's commit record: it can be streamed once flushed,
// but it is not visible until it ends. One without events changed only other tables.
func (m *model) commitRecord() {
	t := m.pick(running)
	if t == nil {
		return
	}
	t.commit = m.insert
	t.end = m.insert + change.LSN(16+8*len(t.events))
	m.insert = t.end
	m.wal = append(m.wal, record{start: t.commit, end: t.end, txn: t})
	t.state = recorded
	// Its writers hold their keys' locks, so its changes apply to the commit-order state.
	for _, e := range t.events {
		if e.new == nil {
			delete(m.walState, e.key)
		} else {
			m.walState[e.key] = *e.new
		}
	}
	m.states = append(m.states, stateAt{commit: t.commit, state: maps.Clone(m.walState)})
	if t.sync {
		m.flushed = max(m.flushed, t.end)
	}
}

// endTx makes a recorded transaction visible and releases its locks, at any later moment: a
// synchronous standby may keep it waiting while it is already streamed.
func (m *model) endTx() {
	t := m.pick(recorded)
	if t == nil {
		return
	}
	m.finish(t, ended)
}

func (m *model) abort() {
	t := m.pick(running)
	if t == nil {
		return
	}
	m.finish(t, aborted)
}

func (m *model) finish(t *mtxn, st txState) {
	t.state = st
	m.latestCompleted = max(m.latestCompleted, t.xid)
	for k, holder := range m.locks {
		if holder == t {
			delete(m.locks, k)
		}
	}
	m.running = slices.DeleteFunc(m.running, func(r *mtxn) bool { return r == t })
}

func (m *model) flush() { m.flushed = m.insert }

// takeSnapshot is GetSnapshotData: xmax one past the latest completed transaction, the running
// ones below it listed, xmin the oldest of them (or xmax).
func (m *model) takeSnapshot() Snapshot {
	s := Snapshot{Xmax: m.latestCompleted + 1, Bound: m.insert}
	for _, t := range m.running {
		if t.xid < s.Xmax {
			s.XIP = append(s.XIP, t.xid)
		}
	}
	slices.Sort(s.XIP)
	s.Xmin = s.Xmax
	if len(s.XIP) > 0 {
		s.Xmin = s.XIP[0]
	}
	if m.mut == mutWriteBound {
		s.Bound = m.flushed
	}
	return s
}

// visibleState is what a snapshot taken now reads: the effects of every ended transaction.
func (m *model) visibleState() (map[int]int, map[change.XID8]bool) {
	st, vis := map[int]int{}, map[change.XID8]bool{}
	for _, r := range m.wal {
		if r.txn == nil || r.txn.state != ended {
			continue
		}
		vis[r.txn.xid] = true
		for _, e := range r.txn.events {
			if e.new == nil {
				delete(st, e.key)
			} else {
				st[e.key] = *e.new
			}
		}
	}
	return st, vis
}

// ---- the stream ----

// decode streams the next WAL record once it is flushed, whether or not its transaction is
// visible yet (F5).
func (m *model) decode() {
	if m.decoded >= len(m.wal) || m.wal[m.decoded].end > m.flushed {
		return
	}
	r := m.wal[m.decoded]
	m.decoded++
	m.lastDispatchEnd = r.end
	if r.txn == nil {
		for _, s := range m.subs {
			s.position(r.start)
		}
		return
	}
	t := r.txn
	x32 := t.xid.XID()
	w, ok := change.WidenXID(x32, m.ref)
	if !ok || w != t.xid {
		m.fail("widening %d against %s gave %s, %v; the transaction is %s", x32, m.ref, w, ok, t.xid)
		return
	}
	m.ref = w
	m.history = append(m.history, t)
	t.dispatched = len(m.history)
	m.routerHead = t.commit
	for _, s := range m.subs {
		s.offer(t)
	}
}

// keepalive passes the flush position when everything up to it has been streamed.
func (m *model) keepalive() {
	if m.decoded < len(m.wal) && m.wal[m.decoded].end <= m.flushed {
		return
	}
	for _, s := range m.subs {
		s.position(m.flushed)
	}
}

// offered is what the router hands a hand-off: the transaction's id as the changefeed widened
// it, and its changes as the subscriber's filter sees them.
func (s *msub) offered(t *mtxn) *Txn[mview] {
	xid := t.xid
	if s.m.mut == mutRawXID {
		xid = change.XID8(t.xid.XID())
	}
	o := &Txn[mview]{XID8: xid, CommitLSN: t.commit, EndLSN: t.end}
	for _, e := range t.events {
		oldIn := e.old != nil && s.in(*e.old)
		newIn := e.new != nil && s.in(*e.new)
		switch {
		case oldIn && newIn:
			o.Items = append(o.Items, mview{'u', e.key, *e.new})
		case newIn:
			o.Items = append(o.Items, mview{'e', e.key, *e.new})
		case oldIn:
			o.Items = append(o.Items, mview{'l', e.key, 0})
		}
	}
	o.Bytes = 24 * len(o.Items)
	return o
}

func (s *msub) offer(t *mtxn) {
	if s.h.Phase() == Failed {
		return
	}
	o := s.offered(t)
	switch {
	case s.stage < snapSet:
		s.unjudged = append(s.unjudged, t)
	case !s.live:
		s.judged(t)
	}
	if err := s.h.Offer(o); err != nil {
		s.m.fail("sub %d: offer of %s: %v", s.id, t.xid, err)
	}
}

// judged counts what the hand-off judged, in the order it judges.
func (s *msub) judged(t *mtxn) {
	nonEmpty := len(s.offered(t).Items) > 0
	switch {
	case t.xid >= s.xmax:
		s.seenPastMax = true
	case s.visibleAtS[t.xid] && s.seenPastMax && nonEmpty:
		s.m.stats.longFork++
	}
	if s.visibleAtS[t.xid] && nonEmpty {
		s.m.stats.skipped++
	}
}

func (s *msub) position(p change.LSN) {
	if s.h.Phase() == Failed {
		return
	}
	if err := s.h.OfferPosition(p); err != nil {
		s.m.fail("sub %d: position %s: %v", s.id, p, err)
	}
}

// ---- the subscribers ----

// subscribe registers a subscriber between two streamed transactions, with the look-back:
// the last commits streamed, then the position reached.
func (m *model) subscribe() {
	if len(m.subs) >= m.maxSubs {
		return
	}
	s := &msub{m: m, id: len(m.subs), mod: 1 + m.rng.IntN(3), stage: registered, regLen: len(m.history),
		client: map[int]int{}, delivered: map[change.XID8]bool{}}
	s.h = New[mview](Config{Head: m.routerHead}, s)
	switch m.mut {
	case mutStopAtXmax:
		s.h.visible = stopAtXmax()
	case mutLSNCut:
		s.h.visible = lsnCut
	}
	m.subs = append(m.subs, s)
	for _, t := range m.history[max(0, len(m.history)-m.lookback):] {
		s.offer(t)
	}
	if m.lastDispatchEnd > 0 {
		s.position(m.lastDispatchEnd)
	}
}

func (m *model) advanceSub() {
	if len(m.subs) == 0 {
		return
	}
	s := m.subs[m.rng.IntN(len(m.subs))]
	if s.h.Phase() == Failed {
		return
	}
	if s.stage >= snapTaken && m.rng.IntN(3) == 0 {
		m.fence()
		return
	}
	switch s.stage {
	case registered:
		m.snapshotFor(s)
	case snapTaken:
		s.setSnapshot()
	case snapSet:
		s.sendRows()
	}
}

// guardOK is the look-back guard (§6.2 step 2): no transaction streamed before the
// registration's history window may still be waiting to become visible, or the snapshot would
// miss it and the stream would not replay it. The reader retries later.
func (m *model) guardOK(s *msub) bool {
	if m.mut == mutNoLookback {
		return true
	}
	for _, t := range m.running {
		if t.state == recorded && t.dispatched > 0 && t.dispatched <= s.regLen-m.lookback {
			return false
		}
	}
	return true
}

func (m *model) snapshotFor(s *msub) {
	if !m.guardOK(s) {
		return
	}
	snap := m.takeSnapshot()
	s.snapText, s.bound, s.xmax = snap.String(), snap.Bound, snap.Xmax
	st, vis := m.visibleState()
	s.visibleAtS = vis
	s.rows = map[int]int{}
	for k, v := range st {
		if s.in(v) {
			s.rows[k] = v
		}
	}
	s.stage = snapTaken
}

func (s *msub) setSnapshot() {
	snap, err := ParseSnapshot(s.snapText, s.bound)
	if err != nil {
		s.m.fail("sub %d: %v", s.id, err)
		return
	}
	if err := s.h.SetSnapshot(snap); err != nil {
		s.m.fail("sub %d: SetSnapshot: %v", s.id, err)
		return
	}
	s.stage = snapSet
	for _, t := range s.unjudged {
		s.judged(t)
	}
	s.unjudged = nil
}

func (s *msub) sendRows() {
	for k, v := range s.rows {
		s.client[k] = v
	}
	s.stage = rowsDone
	if err := s.h.RowsSent(); err != nil {
		s.m.fail("sub %d: RowsSent: %v", s.id, err)
	}
}

// fence is the non-transactional logical message the reader emits after the snapshot: it is
// inserted after the snapshot's bound was read.
func (m *model) fence() {
	r := record{start: m.insert, end: m.insert + 24}
	m.insert = r.end
	m.wal = append(m.wal, r)
}

// Deliver is the client receiving a transaction: strict apply, then the checks.
func (s *msub) Deliver(t *Txn[mview]) {
	m := s.m
	var orig *mtxn
	for _, h := range m.history {
		if h.commit == t.CommitLSN {
			orig = h
		}
	}
	switch {
	case orig == nil:
		m.fail("sub %d: delivered a transaction at %s that was never streamed", s.id, t.CommitLSN)
		return
	case s.stage < rowsDone:
		m.fail("sub %d: delivered %s before the rows were sent", s.id, orig.xid)
		return
	case s.delivered[orig.xid]:
		m.fail("sub %d: delivered %s twice", s.id, orig.xid)
		return
	case s.visibleAtS[orig.xid]:
		m.fail("sub %d: delivered %s, which the snapshot saw (a duplicate)", s.id, orig.xid)
		return
	case t.EndLSN <= s.lastEnd:
		m.fail("sub %d: delivered %s out of commit order", s.id, orig.xid)
		return
	}
	s.delivered[orig.xid] = true
	s.lastEnd = t.EndLSN
	m.stats.delivered++
	if orig.dispatched <= s.regLen {
		m.stats.lookbackHits++
	}
	for _, v := range t.Items {
		_, has := s.client[v.key]
		switch {
		case v.op == 'e' && has:
			m.fail("sub %d: %s enters key %d, which the client holds", s.id, orig.xid, v.key)
			return
		case v.op != 'e' && !has:
			m.fail("sub %d: %s changes key %d, which the client lacks", s.id, orig.xid, v.key)
			return
		case v.op == 'l':
			delete(s.client, v.key)
		default:
			s.client[v.key] = v.val
		}
	}
	if s.live {
		s.check(t.CommitLSN, "after "+orig.xid.String())
	}
}

// Live is the client learning its view is complete at head.
func (s *msub) Live(head change.LSN) {
	m := s.m
	if s.stage < rowsDone {
		m.fail("sub %d: live before the rows were sent", s.id)
		return
	}
	s.live = true
	m.stats.lives++
	s.check(head, "at live")
	for _, t := range m.history {
		if t.commit > head || s.visibleAtS[t.xid] || s.delivered[t.xid] {
			continue
		}
		if len(s.offered(t).Items) > 0 {
			m.fail("sub %d: %s (commit %s), not visible to the snapshot, was never delivered by live at %s", s.id, t.xid, t.commit, head)
			return
		}
	}
}

// check compares the client's view with the filtered state after every commit at or before
// lsn.
func (s *msub) check(lsn change.LSN, when string) {
	i := sort.Search(len(s.m.states), func(i int) bool { return s.m.states[i].commit > lsn })
	want := map[int]int{}
	if i > 0 {
		for k, v := range s.m.states[i-1].state {
			if s.in(v) {
				want[k] = v
			}
		}
	}
	if !maps.Equal(want, s.client) {
		s.m.fail("sub %d (%s, filter %% %d): client %v, want %v at %s (snapshot %s)", s.id, when, s.mod, s.client, want, lsn, s.snapText)
	}
}

// settle ends every transaction, drives every subscriber to live, and checks the end state.
func (m *model) settle() {
	for m.err == nil && len(m.running) > 0 {
		if t := m.pick(running); t != nil {
			if m.rng.IntN(3) == 0 {
				m.finish(t, aborted)
			} else {
				m.commitRecord()
			}
			continue
		}
		m.endTx()
	}
	m.flush()
	for i := 0; m.err == nil && i < 8; i++ {
		for _, s := range m.subs {
			if s.h.Phase() == Failed {
				m.fail("sub %d: hand-off failed: %v", s.id, s.h.Err())
				return
			}
			switch s.stage {
			case registered:
				m.snapshotFor(s)
			case snapTaken:
				s.setSnapshot()
			case snapSet:
				s.sendRows()
			}
		}
		m.fence()
		m.flush()
		for m.err == nil && m.decoded < len(m.wal) {
			m.decode()
		}
		m.keepalive()
	}
	if m.err != nil {
		return
	}
	epochs := map[uint32]bool{}
	for _, t := range m.history {
		epochs[t.xid.Epoch()] = true
	}
	if len(epochs) > 1 {
		m.stats.wrapped++
	}
	for _, s := range m.subs {
		if !s.live {
			m.fail("sub %d: not live after settling (phase %s, err %v)", s.id, s.h.Phase(), s.h.Err())
			return
		}
		s.check(m.routerHead, "settled")
		for _, t := range m.history {
			if !s.visibleAtS[t.xid] && !s.delivered[t.xid] && len(s.offered(t).Items) > 0 {
				m.fail("sub %d: %s never delivered", s.id, t.xid)
			}
		}
	}
}

// stopAtXmax is mutStopAtXmax: once a transaction at or past xmax has been judged, everything
// after it is delivered.
func stopAtXmax() func(*Snapshot, change.XID8, change.LSN) bool {
	stopped := false
	return func(s *Snapshot, x change.XID8, _ change.LSN) bool {
		if stopped || x >= s.Xmax {
			stopped = true
			return false
		}
		return s.Visible(x)
	}
}

// lsnCut is mutLSNCut: whatever ends at or before the bound counts as in the rows.
func lsnCut(s *Snapshot, _ change.XID8, end change.LSN) bool { return end <= s.Bound }

// TestModel is the property: over random interleavings, every subscriber's view is exact at
// Live and after every later transaction, with no duplicate and no gap. It also shows that
// the runs reach the hard cases (Long Fork, a transaction streamed before it was visible and
// found in the look-back, an epoch crossed), without which passing would prove little.
func TestModel(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 300
	}
	var total modelStats
	for seed := range uint64(runs) {
		m := newModel(seed, mutNone)
		if err := m.run(400); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		total.add(m.stats)
	}
	t.Logf("%+v", total)
	if total.longFork == 0 || total.lookbackHits == 0 || total.wrapped == 0 || total.skipped == 0 || total.delivered == 0 || total.lives == 0 {
		t.Fatalf("the runs did not reach every hard case: %+v", total)
	}
}

// TestModelMutations shows the model has teeth: each defect of the note's list makes some run
// fail.
func TestModelMutations(t *testing.T) {
	for _, mut := range []mutation{mutRawXID, mutStopAtXmax, mutNoLookback, mutLSNCut, mutWriteBound} {
		t.Run(mut.String(), func(t *testing.T) {
			for seed := range uint64(5000) {
				if err := newModel(seed, mut).run(400); err != nil {
					t.Logf("seed %d caught it: %v", seed, err)
					return
				}
			}
			t.Fatalf("no run noticed the defect %q", mut)
		})
	}
}
