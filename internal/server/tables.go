package server

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/stream"
	"github.com/heraldrt/herald/internal/wire"
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
	// replicator to route by, and it starts after the table's mark (see subscribeShared).
	peers *peers
	// unavail counts and logs what is refused as unavailable; refused counts what the policy
	// refused.
	unavail *unavailable
	refused *refusals
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
		Claims: policy.NewClaims(f.Identity.Claims)})
	if err == nil && cut != nil {
		if sub.Head, unsubscribe, err = t.share(ctx, f, sub, unsubscribe, cut); err != nil {
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
		return session.TableSubscription{}, &wire.Error{Code: wire.CodeUnavailable,
			Message: "the database did not say how far its WAL reaches, to check from; retry with backoff", Err: err}
	}
	if f.From.LSN >= end {
		unsubscribe()
		return session.TableSubscription{}, &wire.Error{Code: wire.CodeBadPosition, Field: "from", Message: fmt.Sprintf(
			"from %s is past the end of this database's change stream (its WAL ends at %s): it comes from another database or deployment; subscribe without from and re-read the view",
			f.From, end)}
	}
	return ts, nil
}

// share files an attached subscription's interest among the nodes and moves its start to
// where every later change reaches this node: past the table's mark, read after the row was
// filed (cluster.Node.Replicate says why that is exact). What the router handed the
// subscription meanwhile waits in cut, which then lets through only what is past the start.
func (t *tables) share(ctx context.Context, f session.SubscribeRequest, sub router.Subscription, unsubscribe func(), cut *cutover) (stream.Position, func(), error) {
	owner := cluster.TableOwner(qualified(f.Table))
	release, err := t.peers.node.Watch(ctx, owner, sub.Token, f.Identity.Subject)
	if err != nil {
		unsubscribe()
		return stream.Position{}, nil, shareError(err)
	}
	mark, err := t.peers.node.Mark(ctx, owner)
	if err != nil {
		unsubscribe()
		release()
		return stream.Position{}, nil, shareError(err)
	}
	head := sub.Head
	if lsn := change.LSN(mark); lsn > head.LSN {
		head = stream.TablePosition(lsn, 0)
	}
	cut.open(head)
	return head, func() { unsubscribe(); release() }, nil
}

// shareError keeps a refusal the interest index made (too many subscriptions) and turns a
// failure to reach it into unavailable.
func shareError(err error) error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe
	}
	return &wire.Error{Code: wire.CodeUnavailable, Message: "the nodes' shared Redis did not answer; retry with backoff", Err: err}
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

func (c *cutover) Push(sub string, it *stream.Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened {
		c.passLocked(sub, it)
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

func (c *cutover) passLocked(sub string, it *stream.Item) {
	if !c.passed {
		if p := it.Position(); p.IsTable() && !after(p, c.start) {
			return
		}
		c.passed = true
	}
	c.Receiver.Push(sub, it)
}

// open sets the start and hands on what waited past it.
func (c *cutover) open(start stream.Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opened, c.start = true, start
	for _, w := range c.waiting {
		c.passLocked(w.sub, w.it)
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
	from   wire.Position
	passed bool
}

// Push passes on an item after from: a change past it, or a gap that reaches past it.
func (f *floor) Push(sub string, it *stream.Item) {
	if f.holds(it.Position()) {
		return
	}
	f.Receiver.Push(sub, it)
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
func after(p, q wire.Position) bool {
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
type pgSchema struct {
	pool        *pgxpool.Pool
	publication string

	mu    sync.Mutex
	cache map[string]cachedTable // guarded by mu
}

type cachedTable struct {
	info router.TableInfo
	at   time.Time
}

var _ router.Schema = (*pgSchema)(nil)

func newPGSchema(ctx context.Context, url, publication string) (*pgSchema, error) {
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
	return &pgSchema{pool: pool, publication: publication, cache: map[string]cachedTable{}}, nil
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

// tableQuery describes one table as the publication $3 streams it: its replica identity, its
// key (the identity index's columns, else the primary key's), and its published columns in
// order, each with the OID its values decode as (a domain's base type). It returns no row for
// a table that does not exist or that the publication does not cover. Postgres 15 and later
// can publish a subset of a table's columns (pg_publication_tables.attnames); before 15 every
// column is published.
const tableQuery = `
WITH rel AS (
	SELECT c.oid, c.relreplident, pt.cols
	FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace
	JOIN LATERAL (SELECT %s AS cols FROM pg_publication_tables p
		WHERE p.pubname = $3 AND p.schemaname = n.nspname AND p.tablename = c.relname LIMIT 1) pt ON true
	WHERE c.oid = to_regclass(quote_ident($1) || '.' || quote_ident($2))
)
SELECT rel.relreplident::text,
	COALESCE((SELECT array_agg(a.attname::text ORDER BY a.attnum)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = rel.oid AND CASE WHEN rel.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END), '{}'),
	COALESCE((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
		WHERE a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped AND (rel.cols IS NULL OR a.attname = ANY (rel.cols))), '{}'),
	COALESCE((SELECT array_agg(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END ORDER BY a.attnum)
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped AND (rel.cols IS NULL OR a.attname = ANY (rel.cols))), '{}')
FROM rel`

// Table describes table as Herald streams it; no columns when it does not.
func (p *pgSchema) Table(ctx context.Context, table string) (router.TableInfo, error) {
	p.mu.Lock()
	c, ok := p.cache[table]
	p.mu.Unlock()
	if ok && time.Since(c.at) < schemaTTL {
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
	p.cache[table] = cachedTable{info: info, at: time.Now()}
	p.mu.Unlock()
	return info, nil
}

func (p *pgSchema) read(ctx context.Context, table string) (router.TableInfo, error) {
	unavailable := func(err error) error {
		return &wire.Error{Code: wire.CodeUnavailable, Message: "the database did not answer a catalog query; retry with backoff", Err: err}
	}
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return router.TableInfo{}, unavailable(err)
	}
	defer conn.Release()
	cols := "NULL::name[]"
	if major(conn.Conn().PgConn().ParameterStatus("server_version")) >= 15 {
		cols = "p.attnames"
	}
	schema, name, _ := strings.Cut(table, ".")
	var (
		ident      string
		key, names []string
		oids       []uint32
	)
	err = conn.QueryRow(ctx, fmt.Sprintf(tableQuery, cols), schema, name, p.publication).Scan(&ident, &key, &names, &oids)
	if errors.Is(err, pgx.ErrNoRows) {
		return router.TableInfo{}, nil
	}
	if err != nil {
		return router.TableInfo{}, unavailable(err)
	}
	info := router.TableInfo{Key: key, Identity: router.Identity(ident[0])}
	for i, n := range names {
		info.Columns = append(info.Columns, filter.Column{Name: n, OID: oids[i]})
	}
	return info, nil
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
