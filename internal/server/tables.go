package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/cluster"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tables adapts the router to what sessions ask of it, and checks and honours a resumed
// subscription's from (docs/PROTOCOL.md, "Resuming").
type tables struct {
	router *router.Router
	// walEnd reads the database's current WAL position: no commit this database has made can
	// be at or past it, so a from there is from somewhere else.
	walEnd func(context.Context) (change.LSN, error)
	// peers, when the node is one of many: a subscription's interest is filed for the
	// replicator to route by, and it starts after the table's mark (see share).
	peers *peers
	// history, when the node is one of many, is the tables' history the replicator keeps,
	// which a resumed subscription is replayed from (see resume).
	history history.Store
	// confirmed reads how far Herald's replication slot has confirmed: every transaction that
	// committed before it was handed on by a replicator, and so stamped and recorded.
	confirmed func(context.Context) (change.LSN, error)
	log       *slog.Logger
	// unavail counts and logs what is refused as unavailable; refused counts what the policy
	// refused.
	unavail *unavailable
	refused *refusals
	// snaps runs snapshot subscriptions' snapshots; nil: none are served.
	snaps *snapshots
	// earlyBytes bounds a snapshot's look-back read from the history nodes share
	// (handoff.early_bytes).
	earlyBytes int
}

var _ session.Tables = (*tables)(nil)

// Subscribe attaches a table subscription. A from ahead of what the router has routed is
// legitimate after a restart: the new process re-reads what the slot had not confirmed, and
// the client may have received some of it before the crash. So everything at or before from
// is held back (see floor), and only a from at or past the database's WAL end, which no commit
// of this database can have reached, is refused with bad_position.
func (t *tables) Subscribe(ctx context.Context, s stream.Receiver, f session.SubscribeRequest) (session.TableSubscription, error) {
	ts, err := t.subscribe(ctx, s, f)
	table := qualified(f.Table)
	t.refused.table(table, err)
	if rc := ts.Recheck; rc != nil {
		ts.Recheck = func(id auth.Identity) error {
			err := rc(id)
			t.refused.table(table, err)
			return err
		}
	}
	return ts, t.unavail.note(opTableSubscribe, err)
}

// qualified is table with its schema: public when it names none.
func qualified(table string) string {
	if !strings.Contains(table, ".") {
		return "public." + table
	}
	return table
}

func (t *tables) subscribe(ctx context.Context, s stream.Receiver, f session.SubscribeRequest) (session.TableSubscription, error) {
	if f.Snapshot {
		return t.subscribeSnapshot(ctx, s, f)
	}
	target := s
	if !f.From.IsZero() {
		// Installed before the subscription attaches: what is routed between attaching and the
		// check below is already held back.
		target = &floor{Receiver: s, from: f.From}
	}
	var cut *cutover
	if t.peers != nil {
		cut = &cutover{Receiver: target}
		target = cut
	}
	sub, unsubscribe, err := t.router.Subscribe(ctx, router.Request{Table: f.Table, Filter: f.Filter, Columns: f.Columns, Sub: f.Sub, Target: target,
		Claims: policy.NewClaims(f.Identity.Claims), From: f.From})
	if err == nil && cut != nil {
		if sub.Head, unsubscribe, err = t.share(ctx, s, f, sub, unsubscribe, cut); err != nil {
			return session.TableSubscription{}, err
		}
	}
	ts := session.TableSubscription{Head: sub.Head, Key: sub.Key, Unsubscribe: unsubscribe}
	if sub.Recheck != nil {
		ts.Recheck = func(id auth.Identity) error { return sub.Recheck(policy.NewClaims(id.Claims)) }
	}
	if err != nil || f.From.LSN <= sub.Head.LSN {
		return ts, err
	}
	end, err := t.walEnd(ctx)
	if err != nil {
		unsubscribe()
		return session.TableSubscription{}, &fault.Error{Code: fault.CodeUnavailable,
			Message: "the database did not say how far its WAL reaches, to check from; retry with backoff", Err: err}
	}
	if f.From.LSN >= end {
		unsubscribe()
		return session.TableSubscription{}, &fault.Error{Code: fault.CodeBadPosition, Field: "from", Message: fmt.Sprintf(
			"from %s is past the end of this database's change stream (its WAL ends at %s): it comes from another database or deployment; subscribe without from and re-read the view",
			f.From, end)}
	}
	return ts, nil
}

// subscribeSnapshot attaches a subscription that begins with its table's rows: the router
// holds its changes in a hand-off, and the session runs its snapshot (snapshots.run), which
// reads the rows and joins them to the stream.
func (t *tables) subscribeSnapshot(ctx context.Context, s stream.Receiver, f session.SubscribeRequest) (session.TableSubscription, error) {
	if t.snaps == nil {
		return session.TableSubscription{}, &fault.Error{Code: fault.CodeUnavailable, Field: "snapshot",
			Message: "this server reads no snapshots; subscribe without snapshot"}
	}
	// Among many nodes the router keeps no history to look back in: its hand-off holds what it
	// routes until shareSnapshot has read the look-back from the history the nodes share.
	sub, unsubscribe, err := t.router.Subscribe(ctx, router.Request{Table: f.Table, Filter: f.Filter, Columns: f.Columns, Sub: f.Sub, Target: s,
		Claims: policy.NewClaims(f.Identity.Claims), Snapshot: true, Hold: t.peers != nil})
	if err != nil {
		return session.TableSubscription{}, err
	}
	if t.peers != nil {
		if unsubscribe, err = t.shareSnapshot(ctx, f, sub, unsubscribe); err != nil {
			return session.TableSubscription{}, err
		}
	}
	snap := sub.Snapshot
	ts := session.TableSubscription{Key: sub.Key, Unsubscribe: unsubscribe,
		Snapshot: func(ctx context.Context, pages session.SnapshotPages) error {
			return t.snaps.run(ctx, f.Sub, snap, pages)
		}}
	if sub.Recheck != nil {
		ts.Recheck = func(id auth.Identity) error { return sub.Recheck(policy.NewClaims(id.Claims)) }
	}
	return ts, nil
}

// watch files sub's interest under owner among the nodes: its token for identity, and its
// unlogged token (router.UnloggedToken) when it has one, as a row of its own that counts
// toward no identity's limit. The function it returns removes both.
func (t *tables) watch(ctx context.Context, owner string, sub router.Subscription, identity string) (func(), error) {
	release, err := t.peers.node.Watch(ctx, owner, sub.Token, identity)
	if err != nil || sub.Unlogged == "" {
		return release, err
	}
	second, err := t.peers.node.Watch(ctx, owner, sub.Unlogged, "")
	if err != nil {
		release()
		return nil, err
	}
	return func() { release(); second() }, nil
}

// shareSnapshot files a snapshot subscription's interest among the nodes, reads its table's
// mark (every transaction of the table after it reaches this node, as share says), and opens
// its hand-off with the look-back read from the history the nodes share: the table's
// transactions after Snapshot.Since up to the mark; the router then offers what it held that
// committed after the mark. A head the router was told of rather than routed (where it
// started following, a loss it reported) may have transactions of the table before it that
// no replicator has reached yet and that would never be offered: unless the slot has
// confirmed past it, the hand-off fails (replication_restarted) and the client subscribes
// again.
func (t *tables) shareSnapshot(ctx context.Context, f session.SubscribeRequest, sub router.Subscription, unsubscribe func()) (func(), error) {
	table := qualified(f.Table)
	owner := cluster.TableOwner(table)
	release, err := t.watch(ctx, owner, sub, f.Identity.Subject)
	if err != nil {
		unsubscribe()
		return nil, shareError(err)
	}
	m, err := t.peers.node.Mark(ctx, owner)
	if err != nil {
		unsubscribe()
		release()
		return nil, shareError(err)
	}
	mark, snap := change.LSN(m), sub.Snapshot
	both := func() { unsubscribe(); release() }
	if sub.Head.LSN > mark && sub.Routed < sub.Head.LSN {
		var c change.LSN
		if t.confirmed != nil {
			c, err = t.confirmed(ctx)
		}
		if t.confirmed == nil || err != nil || c <= sub.Head.LSN {
			snap.Handoff.Fail(handoff.ReasonReplicationRestarted, fmt.Sprintf(
				"this node started following the stream, or reported a loss, at %s, too recently to tell that every transaction before it was recorded", sub.Head.LSN), err)
			snap.Open(nil, mark)
			return both, nil
		}
	}
	txns, err := t.lookback(ctx, table, snap.Since, mark)
	if err != nil {
		var he *handoff.Error
		if errors.As(err, &he) {
			snap.Handoff.Fail(he.Reason, he.Detail, nil)
			snap.Open(nil, mark)
			return both, nil
		}
		both()
		return nil, shareError(err)
	}
	snap.Open(txns, mark)
	return both, nil
}

// lookback reads table's transactions in (after, through] from the history the nodes share,
// oldest first, a read at a time, at most the hand-off's early buffer's worth: a *handoff.Error
// (handoff_buffer_full) past it.
func (t *tables) lookback(ctx context.Context, table string, after, through change.LSN) ([]history.Txn, error) {
	var out []history.Txn
	size := 0
	for after < through {
		r, err := t.history.Read(ctx, table, after, through, replayLimit)
		if err != nil {
			return nil, err
		}
		for _, e := range r.Entries {
			txn, err := history.Decode(e.LSN, e.Data)
			if err != nil {
				return nil, fmt.Errorf("the history of %s holds an entry that does not decode: %w", table, err)
			}
			size += e.Size()
			if size > t.earlyBytes {
				return nil, &handoff.Error{Reason: handoff.ReasonBufferFull, Detail: fmt.Sprintf(
					"the look-back of %s from %s to %s holds more than %d bytes", table, after, through, t.earlyBytes)}
			}
			out = append(out, txn)
		}
		if !r.More || len(r.Entries) == 0 {
			break
		}
		after = r.Entries[len(r.Entries)-1].LSN
	}
	return out, nil
}

// share files an attached subscription's interest among the nodes and moves its start to
// where every later change reaches this node: past the table's mark, read after the row was
// filed (cluster.Node.Replicate says why that is exact). What the router handed the
// subscription meanwhile waits in cut, which then lets through only what is past the start. A
// resumed subscription is first replayed what it missed up to the start, to s, from the
// history the nodes share (resume); it then starts after its from.
func (t *tables) share(ctx context.Context, s stream.Receiver, f session.SubscribeRequest, sub router.Subscription, unsubscribe func(), cut *cutover) (stream.Position, func(), error) {
	table := f.Table
	if !strings.Contains(table, ".") {
		table = "public." + table
	}
	owner := cluster.TableOwner(table)
	release, err := t.watch(ctx, owner, sub, f.Identity.Subject)
	if err != nil {
		unsubscribe()
		return stream.Position{}, nil, shareError(err)
	}
	m, err := t.peers.node.Mark(ctx, owner)
	if err != nil {
		unsubscribe()
		release()
		return stream.Position{}, nil, shareError(err)
	}
	mark := change.LSN(m)
	start := sub.Head
	if mark > start.LSN {
		start = stream.TablePosition(mark, 0)
	}
	head := start
	if t.resume(ctx, s, table, f.From, sub, mark, start) {
		head = f.From
	}
	cut.open(start)
	return head, func() { unsubscribe(); release() }, nil
}

// replayLimit bounds what a resume reads of a table's shared history: past it the resume is a
// history_expired resync. The session holds at most its data lane's bounds of what is replayed
// before it answers (4 MiB by default) and makes the rest a lane_full resync, so reading much
// more than that is wasted; transactions the filter drops are why the bound is above it.
var replayLimit = history.Limit{Entries: 10000, Bytes: 16 << 20}

// resume replays to s what a subscription resuming from missed up to start, from the table's
// history in Redis, and reports whether it did; if not, the subscription starts after start,
// and the session reports the rest as a history_expired resync.
//
// The history holds every transaction of the table at or before mark (the replicator appends
// before it stamps), and every one after mark reaches this node live, so the replay is read up
// to mark. Past mark, up to start (the router's head, when it is later), this node's router
// routes nothing, and the table must have no transaction there. It has none when the head is
// a transaction the router routed (sub.Routed): the replicator had stamped every one before
// it. A head the router was told of instead (where it started following, a loss it reported)
// may have the table's transactions before it that no replicator has reached yet, which would
// never come; unless the slot has confirmed past the head, and so every one before it was
// stamped.
func (t *tables) resume(ctx context.Context, s stream.Receiver, table string, from stream.Position, sub router.Subscription, mark change.LSN, start stream.Position) bool {
	if t.history == nil || !from.IsTable() || !after(start, from) {
		return false // nothing to resume, or a from ahead of this node (Subscribe holds it back)
	}
	if sub.Head.LSN > mark && sub.Routed < sub.Head.LSN {
		if t.confirmed == nil {
			return false
		}
		// Strictly past it: a transaction whose commit is at the head exactly (the WAL end the
		// node was told of) ends after it.
		c, err := t.confirmed(ctx)
		if err != nil || c <= sub.Head.LSN {
			return false
		}
	}
	// After from: after its transaction, or inside it, which the replay cuts.
	since := from.LSN
	if from.Idx > 0 {
		since--
	}
	if mark <= since {
		// The table has no transaction after from that this node will not route, as its mark
		// is its last one; but no mark (Redis lost it, or the table had no change for as long
		// as a mark lives) says nothing of what came before.
		return mark > 0
	}
	r, err := t.history.Read(ctx, table, since, mark, replayLimit)
	if err != nil {
		t.log.Warn("cluster: read a table's history for a resume; it is a resync", "table", table, "from", from.String(), "error", err)
		return false
	}
	if !r.Covers(since, mark) {
		return false
	}
	txns := make([]history.Txn, 0, len(r.Entries))
	for _, e := range r.Entries {
		txn, err := history.Decode(e.LSN, e.Data)
		if err != nil {
			t.log.Warn("cluster: a table's history holds an entry that does not decode; the resume is a resync", "table", table, "error", err)
			return false
		}
		txns = append(txns, txn)
	}
	sub.Replay(s, from, txns)
	return true
}

// shareError keeps a refusal the interest index made (too many subscriptions) and turns a
// failure to reach it into unavailable.
func shareError(err error) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe
	}
	return &fault.Error{Code: fault.CodeUnavailable, Message: "the nodes' shared Redis did not answer; retry with backoff", Err: err}
}

// cutover holds what the router hands a subscription between its attaching and its start
// being known, then lets through only what is past the start. Push is called by the router
// under its lock; open by the subscribing goroutine.
type cutover struct {
	stream.Receiver
	mu      sync.Mutex
	opened  bool            // guarded by mu
	start   stream.Position // guarded by mu: items at or before it are dropped, once opened
	passed  bool            // guarded by mu: an item past start went through; every later one is
	waiting []cutItem       // guarded by mu: at most maxCutover, in order
	lost    *stream.Gap     // guarded by mu: what did not fit in waiting
}

type cutItem struct {
	sub string
	it  *stream.Item
}

// maxCutover bounds what a subscription holds while its start is read from Redis: one round
// trip's worth of changes on a busy table.
const maxCutover = 4096

func (c *cutover) Push(sub string, it *stream.Item) { c.PushDeferred(sub, it, nil) }

// PushDeferred is Push that, once open, leaves waking the session's writer to w (the router
// wakes each writer once per transaction); w nil wakes it at once.
func (c *cutover) PushDeferred(sub string, it *stream.Item, w *stream.Wakeups) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened {
		c.passLocked(sub, it, w)
		return
	}
	if len(c.waiting) < maxCutover {
		c.waiting = append(c.waiting, cutItem{sub, it})
		return
	}
	p := it.Position()
	if c.lost == nil {
		c.lost = &stream.Gap{First: p, Reason: stream.ReasonUpstreamGap}
	}
	c.lost.Last = p
	c.lost.Lost++
}

func (c *cutover) passLocked(sub string, it *stream.Item, w *stream.Wakeups) {
	if !c.passed {
		if p := it.Position(); p.IsTable() && !after(p, c.start) {
			return
		}
		c.passed = true
	}
	pushDeferred(c.Receiver, sub, it, w)
}

// pushDeferred hands it to r, leaving the wake-up to w when both can.
func pushDeferred(r stream.Receiver, sub string, it *stream.Item, w *stream.Wakeups) {
	if dr, ok := r.(stream.DeferringReceiver); ok && w != nil {
		dr.PushDeferred(sub, it, w)
		return
	}
	r.Push(sub, it)
}

// open sets the start and hands on what waited past it.
func (c *cutover) open(start stream.Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opened, c.start = true, start
	for _, w := range c.waiting {
		c.passLocked(w.sub, w.it, nil)
	}
	if c.lost != nil && len(c.waiting) > 0 {
		if after(c.lost.Last, start) {
			c.Receiver.Push(c.waiting[0].sub, stream.NewGap(c.lost))
		}
	}
	c.waiting, c.lost = nil, nil
}

// Accept, Stale and Tokens are what the cluster node asks of the router (cluster.Tables).
func (t *tables) Accept(ctx context.Context, txn *change.Txn) error { return t.router.Accept(ctx, txn) }

func (t *tables) Tokens(ctx context.Context, e *change.Event, dst []string) ([]string, error) {
	return t.router.Tokens(ctx, e, dst)
}

// Stale tells every table subscription here that changes after the last one routed, up to
// the database's WAL end now, may be lost: whatever the replicator sends after this is past
// it, or lies inside it.
func (t *tables) Stale(reason stream.Reason) {
	head := t.router.Head()
	last := head
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	end, err := t.walEnd(ctx)
	if err == nil && end <= head {
		return // nothing committed after what was routed here: nothing can be lost
	}
	if err == nil {
		last = end
	}
	t.router.GapAll(stream.TablePosition(head, 0), stream.TablePosition(last, 0), reason)
}

// floor holds back a resumed table subscription's frames at or before its from, which the
// client already has: after a restart the router re-routes what the slot had not confirmed.
// Frames come in commit order, so once one is past from, every later one is, and the floor
// is lifted. Its fields are owned by the router's Accept, which routes one transaction at a
// time under the router's lock and is the only caller of Push.
type floor struct {
	stream.Receiver
	from   stream.Position
	passed bool
}

// Push passes on an item after from: a change past it, or a gap that reaches past it.
func (f *floor) Push(sub string, it *stream.Item) { f.PushDeferred(sub, it, nil) }

// PushDeferred is Push leaving the writer's wake-up to w (see cutover.PushDeferred).
func (f *floor) PushDeferred(sub string, it *stream.Item, w *stream.Wakeups) {
	if f.holds(it.Position()) {
		return
	}
	pushDeferred(f.Receiver, sub, it, w)
}

// holds reports whether the item at pos is at or before from, and lifts the floor at the
// first one past it.
func (f *floor) holds(p stream.Position) bool {
	if f.passed {
		return false
	}
	if p.IsTable() && !after(p, f.from) {
		return true
	}
	f.passed = true
	return false
}

// after reports whether table position p comes after q: by LSN, then, within one transaction,
// by index, where index 0 stands after the whole transaction.
func after(p, q stream.Position) bool {
	switch {
	case p.LSN != q.LSN:
		return p.LSN > q.LSN
	case q.Idx == 0:
		return false
	case p.Idx == 0:
		return true
	}
	return p.Idx > q.Idx
}

// schemaTTL bounds how long what the catalog says of a table is trusted: a column added by
// ALTER TABLE, a table added to the publication or a changed replica identity is seen after at
// most this long.
const schemaTTL = 5 * time.Second

// schemaCacheMax bounds the tables whose descriptions are remembered.
const schemaCacheMax = 1024

// pgSchema describes tables from the database's catalog, as Herald's publication streams
// them, on an ordinary connection pool with the same pinned settings and password rules as
// the changefeed's.
//
// # When a table joined the publication
//
// A table added to the publication while the node runs (ALTER PUBLICATION ... ADD TABLE) may
// be written to by transactions that began before the ALTER committed, and whether the stream
// carries their changes to it has varied across Postgres releases (the decoder judges each
// change by a publication membership it may have cached before the ALTER). A snapshot of the
// table is exact only once every such transaction has ended: then each is in the snapshot's
// rows, and the hand-off skips whatever the stream carried of it. So pgSchema records, for
// each table it first sees in the publication after the stream started (Started), a
// transaction id assigned right after it saw it there (TableInfo.Joined, from
// pg_current_xact_id() in a transaction of its own): every transaction running when the table
// joined has a smaller one. A snapshot whose Xmin has not reached it is refused with
// table_not_ready (internal/snapshot, "Guards").
//
// A table already in the publication when the stream starts may have joined it while no node
// ran (an operator's ALTER, then a restart; or the publication Herald creates as it starts),
// with a writer that straddled the join still running. When or whether it joined is not
// recorded anywhere, but such a writer still holds its write lock on the table. So Started
// reads which transactions hold one on each member table (pg_locks, which every role may
// read), and records one past the largest of their ids as the table's Joined: the table is
// ready once they, and every transaction older, have ended. A table no transaction writes to
// as the stream starts is ready at once.
//
// A table is told apart from the one it was by its relation and, for a table named in the
// publication, its pg_publication_rel row: dropped and created again, or removed from the
// publication and added again, it joins anew even if no read saw it out. A table reached
// through a schema or a partition root has no row of its own; it joins anew only when a read
// saw it out of the publication between.
type pgSchema struct {
	pool        *pgxpool.Pool
	publication string
	slot        string
	ttl         time.Duration // how long a description is trusted: schemaTTL, unless a test shortened it

	mu    sync.Mutex
	cache map[string]cachedTable // guarded by mu
	// gen counts Started's calls that took effect: a description read before one is not
	// cached after it. Guarded by mu.
	gen uint64
	// started is set by Started: from then on a table seen in the publication for the first
	// time joins it. Guarded by mu.
	started bool
	// members are the tables seen in the publication since the stream started, and how each
	// is a member: at most the publication's tables, as one seen out is removed. Guarded by mu.
	members map[string]membership
}

type cachedTable struct {
	info router.TableInfo
	at   time.Time
}

// membership is how a table is in the publication, and since when.
type membership struct {
	rel int64 // the table's pg_class oid
	row int64 // its pg_publication_rel row's oid; 0 when it is a member otherwise
	// joined is TableInfo.Joined: for a table in the publication when the stream started, 0
	// unless a transaction held a write lock on it then (see pgSchema).
	joined change.XID8
}

var _ router.Schema = (*pgSchema)(nil)

func newPGSchema(ctx context.Context, url, publication, slot string) (*pgSchema, error) {
	cc, err := changefeed.ConnConfig(url, false)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("catalog pool: the database URL could not be parsed")
	}
	pc.ConnConfig.Config = *cc
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("catalog pool: %w", err)
	}
	return &pgSchema{pool: pool, publication: publication, slot: slot, ttl: schemaTTL, cache: map[string]cachedTable{}, members: map[string]membership{}}, nil
}

// membersSQL lists the tables in the publication $1 as "schema.table", with their membership
// (see membership).
const membersSQL = `SELECT t.schemaname::text || '.' || t.tablename::text, c.oid::int8, coalesce(pr.oid::int8, 0)
  FROM pg_catalog.pg_publication_tables t
  JOIN pg_catalog.pg_publication p ON p.pubname = t.pubname
  JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname
  JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
  LEFT JOIN pg_catalog.pg_publication_rel pr ON pr.prpubid = p.oid AND pr.prrelid = c.oid
 WHERE t.pubname = $1`

// memberSQL is one table's membership: its relation, and its row in publication $1's
// pg_publication_rel (0 when it has none). $2 is the table, quoted. No row: no such table.
const memberSQL = `SELECT c.oid::int8, coalesce((SELECT pr.oid::int8 FROM pg_catalog.pg_publication_rel pr
    JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = $1 AND pr.prrelid = c.oid), 0)
  FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($2)`

// nextXIDSQL assigns a transaction id, in a transaction of its own, after the read that saw a
// table in the publication: larger than every id assigned before, so than every transaction's
// running when the table joined. pg_snapshot_xmax(pg_current_snapshot()) would not do: it is
// one past the latest transaction that ended, and a transaction still running may have a
// larger id. On a standby, which assigns none (and whose snapshots the reader refuses anyway,
// snapshot_on_standby), it is the snapshot's xmax.
const nextXIDSQL = `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_snapshot_xmax(pg_current_snapshot()) ELSE pg_current_xact_id() END)::text`

// startWritersSQL lists the transactions holding a write lock on a relation of this database
// (the relation's oid, the transaction's 32-bit id: a transaction with an id holds an exclusive
// lock on it), with the current snapshot's xmax to widen the ids against. A transaction that
// holds a lock but has no id has written nothing.
const startWritersSQL = `SELECT r.relation::int8, x.transactionid::text, pg_snapshot_xmax(pg_current_snapshot())::text
  FROM pg_catalog.pg_locks r
  JOIN pg_catalog.pg_locks x ON x.virtualtransaction = r.virtualtransaction
   AND x.locktype = 'transactionid' AND x.mode = 'ExclusiveLock' AND x.granted
 WHERE r.locktype = 'relation' AND r.granted
   AND r.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND r.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')`

// startWriters returns, by relation oid, one past the largest transaction id holding a write
// lock on it now (see pgSchema).
func (p *pgSchema) startWriters(ctx context.Context) (map[int64]change.XID8, error) {
	rows, err := p.pool.Query(ctx, startWritersSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]change.XID8{}
	for rows.Next() {
		var rel int64
		var xidText, refText string
		if err := rows.Scan(&rel, &xidText, &refText); err != nil {
			return nil, err
		}
		xid, err1 := strconv.ParseUint(xidText, 10, 32)
		ref, err2 := strconv.ParseUint(refText, 10, 64)
		x, ok := change.WidenXID(uint32(xid), change.XID8(ref))
		if err1 != nil || err2 != nil || !ok {
			return nil, fmt.Errorf("transaction %q holding a lock on relation %d could not be read against %q", xidText, rel, refText)
		}
		out[rel] = max(out[rel], x+1)
	}
	return out, rows.Err()
}

// Started records the tables in the publication as the stream starts: each is ready for
// snapshots once the transactions writing to it then have ended (see pgSchema); a table seen
// there for the first time later joins it. Only the first call counts. When the tables cannot
// be read, none is taken as ready: each joins when first seen, which errs towards
// table_not_ready; the error is returned for the log.
func (p *pgSchema) Started(ctx context.Context) error {
	p.mu.Lock()
	done := p.started
	p.mu.Unlock()
	if done {
		return nil
	}
	members := map[string]membership{}
	rows, err := p.pool.Query(ctx, membersSQL, p.publication)
	if err == nil {
		for rows.Next() {
			var name string
			var m membership
			if err = rows.Scan(&name, &m.rel, &m.row); err != nil {
				break
			}
			members[name] = m
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err == nil {
		var writers map[int64]change.XID8
		if writers, err = p.startWriters(ctx); err == nil {
			for name, m := range members {
				m.joined = writers[m.rel]
				members[name] = m
			}
		}
	}
	if err != nil {
		clear(members)
		err = fmt.Errorf("read the tables of publication %s and their writers: %w", p.publication, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return nil
	}
	p.started, p.members = true, members
	p.gen++
	clear(p.cache)
	return err
}

// joined returns TableInfo.Joined for table, which a read has just seen in the publication
// (see pgSchema): 0 before the stream started and for a table in the publication then, the
// recorded id for a table that joined since and is still the member it was, else a new one.
func (p *pgSchema) joined(ctx context.Context, conn *pgxpool.Conn, table string) (change.XID8, error) {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if !started {
		return 0, nil
	}
	schema, name, _ := strings.Cut(table, ".")
	var m membership
	err := conn.QueryRow(ctx, memberSQL, p.publication, pgx.Identifier{schema, name}.Sanitize()).Scan(&m.rel, &m.row)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("read how %s is in the publication: %w", table, err)
	}
	p.mu.Lock()
	had, ok := p.members[table]
	p.mu.Unlock()
	if ok && had.rel == m.rel && had.row == m.row {
		return had.joined, nil
	}
	var text string
	if err := conn.QueryRow(ctx, nextXIDSQL).Scan(&text); err != nil {
		return 0, fmt.Errorf("assign a transaction id as %s joins the publication: %w", table, err)
	}
	x, err := strconv.ParseUint(text, 10, 64)
	if err != nil || x == 0 {
		return 0, fmt.Errorf("assign a transaction id as %s joins the publication: %q is not one", table, text)
	}
	m.joined = change.XID8(x)
	p.mu.Lock()
	defer p.mu.Unlock()
	if had, ok := p.members[table]; ok && had.rel == m.rel && had.row == m.row {
		return had.joined, nil // another read recorded it first: its id is as good, and earlier
	}
	p.members[table] = m
	return m.joined, nil
}

// left forgets table's membership: a read saw it out of the publication (or gone), so if it is
// seen there again it joins anew.
func (p *pgSchema) left(table string) {
	p.mu.Lock()
	delete(p.members, table)
	p.mu.Unlock()
}

func (p *pgSchema) Close() { p.pool.Close() }

// WALEnd returns how far the database's WAL reaches: the current write position on a primary,
// the replay position on a standby. Every commit it has made is before it.
func (p *pgSchema) WALEnd(ctx context.Context) (change.LSN, error) {
	var text *string
	err := p.pool.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`).Scan(&text)
	if err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	if text == nil {
		return 0, fmt.Errorf("read the WAL position: the standby has replayed nothing")
	}
	return change.ParseLSN(*text)
}

// Confirmed returns how far Herald's replication slot has confirmed (confirmed_flush_lsn, which
// Postgres updates at each of the replicator's status updates): every transaction that
// committed before it was handed on by a replicator. Zero while the slot has none.
func (p *pgSchema) Confirmed(ctx context.Context) (change.LSN, error) {
	var text *string
	err := p.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, p.slot).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && text == nil {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the slot's confirmed position: %w", err)
	}
	return change.ParseLSN(*text)
}

// Table describes table as Herald streams it; no columns when it does not.
func (p *pgSchema) Table(ctx context.Context, table string) (router.TableInfo, error) {
	p.mu.Lock()
	c, ok := p.cache[table]
	gen := p.gen
	p.mu.Unlock()
	if ok && time.Since(c.at) < p.ttl {
		return c.info, nil
	}
	info, err := p.read(ctx, table)
	if err != nil {
		return router.TableInfo{}, err
	}
	p.mu.Lock()
	if len(p.cache) >= schemaCacheMax {
		// Any client can name any table, existing or not: the cache must not grow with them.
		clear(p.cache)
	}
	if p.gen == gen {
		p.cache[table] = cachedTable{info: info, at: time.Now()}
	}
	p.mu.Unlock()
	return info, nil
}

func (p *pgSchema) read(ctx context.Context, table string) (router.TableInfo, error) {
	unavailable := func(err error) error {
		return &fault.Error{Code: fault.CodeUnavailable, Message: "the database did not answer a catalog query; retry with backoff", Err: err}
	}
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return router.TableInfo{}, unavailable(err)
	}
	defer conn.Release()
	shape, err := changefeed.DescribeTable(ctx, conn.Conn().PgConn(), p.publication, table)
	if err != nil {
		return router.TableInfo{}, unavailable(err)
	}
	if len(shape.Columns) == 0 {
		p.left(table)
		return router.TableInfo{}, nil
	}
	info := router.TableInfo{Key: shape.Key, Identity: identityOf(shape.Identity)}
	for _, c := range shape.Columns {
		info.Columns = append(info.Columns, filter.Column{Name: c.Name, OID: c.OID})
	}
	if info.Joined, err = p.joined(ctx, conn, table); err != nil {
		return router.TableInfo{}, unavailable(err)
	}
	return info, nil
}

// identityOf is router's name for a replica identity as ALTER TABLE spells it.
func identityOf(name string) router.Identity {
	switch name {
	case "USING INDEX":
		return router.IdentityIndex
	case "FULL":
		return router.IdentityFull
	case "NOTHING":
		return router.IdentityNothing
	}
	return router.IdentityDefault
}

// major reads the major version from a server_version like "15.4 (Debian 15.4-1)".
func major(version string) int {
	end := 0
	for end < len(version) && version[end] >= '0' && version[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(version[:end])
	return n
}
