package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/handoff"
	"github.com/heraldrt/herald/internal/history"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/stream"
)

// Bus carries the router's items to the subscriptions they reach: the local fan-out on one
// node, Redis across nodes. Accept hands it every item of a transaction, then flushes, and
// returns only then, so the changefeed confirms a transaction once the bus has it.
type Bus interface {
	// Deliver hands it to subscription sub of r, after everything delivered to r's sub
	// before. It must not block on the receiver.
	Deliver(r stream.Receiver, sub string, it *stream.Item)
	// DeliverDeferred is Deliver, except that the receiver may defer waking its writer to w,
	// which Accept wakes once it has routed the transaction.
	DeliverDeferred(r stream.Receiver, sub string, it *stream.Item, w *stream.Wakeups)
	// Flush returns once every item delivered before it is with its receivers (locally
	// queued, or durably on the bus between nodes).
	Flush(ctx context.Context) error
}

// Schema tells the router what it needs to know of a table to check a subscription.
type Schema interface {
	// Table describes a schema-qualified table as Herald streams it: no columns when it does
	// not exist or is outside Herald's publication. Errors are *fault.Error.
	Table(ctx context.Context, table string) (TableInfo, error)
}

// TableInfo is a table as Herald's publication streams it.
type TableInfo struct {
	// Columns are the published columns in table order, each with the OID its values decode
	// as. None: Herald does not stream the table (it does not exist, or the publication does
	// not cover it).
	Columns []filter.Column
	// Key names the columns that identify a row, in table order: the replica identity
	// index's under REPLICA IDENTITY USING INDEX, else the primary key's. None when the table
	// has neither.
	Key []string
	// Identity is the table's replica identity: what Postgres logs of the old row of an
	// UPDATE or DELETE.
	Identity Identity
	// Joined is set for a table first seen in Herald's publication after the stream started:
	// a transaction id assigned once it was seen there, so every transaction running when it
	// joined has a smaller one, and may have written to it unseen by the stream. A snapshot of
	// the table is refused (table_not_ready) until each of those has ended: until the
	// snapshot's Xmin reaches Joined (Snapshot.Joined). For a table in the publication when the
	// stream started, one past the largest id of the transactions holding a write lock on it
	// then (any of them may have written to it before it joined), or 0 when none did.
	Joined change.XID8
}

// Identity is a table's replica identity, as pg_class.relreplident spells it.
type Identity byte

// The replica identities.
const (
	IdentityDefault Identity = 'd' // the primary key
	IdentityIndex   Identity = 'i' // the columns of one unique index
	IdentityFull    Identity = 'f' // the whole row
	IdentityNothing Identity = 'n' // nothing
)

// String names the identity as ALTER TABLE ... REPLICA IDENTITY does.
func (i Identity) String() string {
	switch i {
	case IdentityDefault:
		return "DEFAULT"
	case IdentityIndex:
		return "USING INDEX"
	case IdentityFull:
		return "FULL"
	case IdentityNothing:
		return "NOTHING"
	}
	return fmt.Sprintf("unknown (%q)", byte(i))
}

// logged reports whether Postgres logs column col in the old image of an UPDATE or DELETE of
// a table with this info.
func (t *TableInfo) logged(col string) bool {
	switch t.Identity {
	case IdentityFull:
		return true
	case IdentityDefault, IdentityIndex:
		return slices.Contains(t.Key, col)
	}
	return false
}

// Gate gives each table's compiled policy (internal/policy).
type Gate interface {
	// Table returns the rules of a schema-qualified table: nil for a table without rules,
	// which is closed. An error (a *fault.Error) when the rules cannot be told yet, such as
	// before they were compiled against the tables' columns.
	Table(table string) (*policy.TablePolicy, error)
}

// Config configures a Router.
type Config struct {
	// Schema reads table columns. Required.
	Schema Schema
	// Gate, when set, is the policy every subscription and every row passes through: a table
	// without rules is closed. Without one, every table is open to everyone, every row and
	// every column: for tests of the routing alone.
	Gate Gate
	// Tables, when set, are the only tables that may be subscribed to: those the changefeed
	// streams.
	Tables []string
	// Bus carries the items to subscribers. Required.
	Bus Bus
	// History, when set, keeps what was routed so a subscription with a from inside it is
	// handed what it missed. Nil: a from before the head is a history_expired resync. A
	// snapshot subscription's hand-off is offered its look-back from it too.
	History *History
	// Handoff configures snapshot subscriptions' hand-offs.
	Handoff HandoffConfig
}

// Router routes committed changes to table subscriptions.
type Router struct {
	schema  Schema
	bus     Bus
	gate    Gate            // nil: no policy
	allowed map[string]bool // nil: any table

	mu     sync.RWMutex
	tables map[string]*table // guarded by mu
	head   change.LSN        // guarded by mu: commit LSN of the last transaction routed
	// accepted is the commit LSN of the last transaction Accept routed: head, unless head came
	// from Seed or GapAll, past transactions this router never saw. Guarded by mu.
	accepted change.LSN
	gen      uint64   // guarded by mu: the routing generation, which dedupes candidates
	rt       routing  // guarded by mu: Accept's scratch space, reused
	live     bool     // guarded by mu: the stream has gone live (Seed or Accept)
	hist     *History // nil: none; its fields are guarded by mu
	handoff  HandoffConfig
	// handoffs are the snapshot subscriptions whose hand-off is in progress, offered every
	// transaction Accept routes. Guarded by mu.
	handoffs []*handoffEntry
	// samples are when the router routed what, oldest first: for a held hand-off's
	// look-back (Snapshot.Since). Guarded by mu.
	samples []sample
	empty   handoff.Txn[*stream.Item] // guarded by mu: offerLocked's scratch for an empty offer

	routed    atomic.Uint64 // changes routed
	delivered atomic.Uint64 // frames handed to targets
	evals     atomic.Uint64 // filter evaluations
	gaps      atomic.Uint64 // resyncs for changes whose effect on a view could not be told
	ruleEvals atomic.Uint64 // row rule evaluations
	ruleErrs  atomic.Uint64 // row rule evaluations that failed: policy_error resyncs
	lookbacks atomic.Uint64 // transactions of the history offered to hand-offs as their look-back
	// By table name, each a *atomic.Uint64: rows a row rule withheld, and row rule
	// evaluations that failed. Their keys are tables routed, which changefeed.tables and the
	// publication bound.
	denied, ruleErrsBy sync.Map
}

// New returns a router.
func New(cfg Config) (*Router, error) {
	if cfg.Schema == nil {
		return nil, fmt.Errorf("router: no schema source")
	}
	if cfg.Bus == nil {
		return nil, fmt.Errorf("router: no bus")
	}
	r := &Router{schema: cfg.Schema, bus: cfg.Bus, gate: cfg.Gate, tables: map[string]*table{}, hist: cfg.History, handoff: cfg.Handoff}
	if len(cfg.Tables) > 0 {
		r.allowed = map[string]bool{}
		for _, t := range cfg.Tables {
			if !strings.Contains(t, ".") {
				t = "public." + t
			}
			r.allowed[t] = true
		}
	}
	return r, nil
}

// Stats counts the router's work.
type Stats struct {
	Routed, Delivered, Evaluations uint64
	// Gaps counts resyncs sent because Postgres did not log enough of a row to tell how a
	// change affected a subscriber's view.
	Gaps          uint64
	Subscriptions int
	// RuleEvaluations counts row rule evaluations, one per group of subscribers sharing a
	// filter and the claim values the rule reads; RuleErrors those that failed.
	RuleEvaluations, RuleErrors uint64
	// RowsDenied counts, by table, the row rule evaluations that withheld a row image from a
	// group of subscribers whose filter let it through. Groups the rule's index equality rules
	// out are not evaluated, nor counted.
	RowsDenied map[string]uint64
	// RuleErrorsByTable is RuleErrors by table.
	RuleErrorsByTable map[string]uint64
	// Handoffs is the snapshot subscriptions whose hand-off is in progress; Lookbacks counts
	// the transactions of the history offered to hand-offs as their look-back.
	Handoffs  int
	Lookbacks uint64
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	r.mu.RLock()
	n := 0
	for _, t := range r.tables {
		n += t.count
	}
	handoffs := len(r.handoffs)
	r.mu.RUnlock()
	byTable := func(m *sync.Map) map[string]uint64 {
		out := map[string]uint64{}
		m.Range(func(k, v any) bool {
			out[k.(string)] = v.(*atomicCounter).Load()
			return true
		})
		return out
	}
	return Stats{Routed: r.routed.Load(), Delivered: r.delivered.Load(), Evaluations: r.evals.Load(), Gaps: r.gaps.Load(),
		Subscriptions: n, RuleEvaluations: r.ruleEvals.Load(), RuleErrors: r.ruleErrs.Load(),
		RowsDenied: byTable(&r.denied), RuleErrorsByTable: byTable(&r.ruleErrsBy), Handoffs: handoffs, Lookbacks: r.lookbacks.Load()}
}

// Seed sets the position subscriptions start after when the stream goes live at start (an
// end LSN it resumes after), until a transaction is routed. Every later transaction commits
// at or after start, so start-1 is strictly before all of them.
//
// Seed is called each time the stream goes live; past the first, the stream restarted, and
// every hand-off in progress fails (replication_restarted): the new stream may come from
// another server than the one its snapshot was read from.
func (r *Router) Seed(start change.LSN) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live && len(r.handoffs) > 0 {
		r.failHandoffsLocked(handoff.ReasonReplicationRestarted, fmt.Sprintf("the replication stream restarted after %s", start))
	}
	r.live = true
	if r.head == 0 && start > 0 {
		r.head = start - 1
	}
	r.noteLocked(time.Now(), r.head)
	if r.hist != nil {
		r.hist.seed(r.head)
	}
}

// Live reports whether the stream has gone live (Seed or Accept): until then a subscription
// is refused with unavailable.
func (r *Router) Live() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.live
}

// Head is the commit LSN of the last transaction routed.
func (r *Router) Head() change.LSN {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.head
}

// Request is one table subscription to attach.
type Request struct {
	Table   string
	Filter  json.RawMessage
	Columns []string
	Sub     string
	Target  stream.Receiver
	// Claims are the subscriber's verified claims, which the table's policy judges. nil reads
	// as the anonymous identity's.
	Claims *policy.Claims
	// From, when set, is the position the subscription resumes after: when the history holds
	// everything after it, the changes it missed are routed to it first (Subscription.Replayed).
	From stream.Position
	// Snapshot asks for the table's rows first: the subscription attaches with a hand-off
	// (Subscription.Snapshot) that holds its changes until its rows are read and sent, then
	// delivers exactly those the rows do not hold, then a Live item. Not with From.
	Snapshot bool
	// Hold, with Snapshot, is for a router without the History a look-back needs (a node among
	// many): the hand-off holds what the router routes until its caller reads the look-back
	// from the history the nodes share and gives it Snapshot.Open.
	Hold bool
}

// Subscription is an attached table subscription as its client learns it.
type Subscription struct {
	// Head is the position the subscription starts after: every change committed after it
	// is routed to it.
	Head stream.Position
	// Key names the table's key columns, which every change frame carries.
	Key []string
	// Recheck judges the subscription again for new claims (a token refresh): nil when they
	// still allow it, and it then follows them; a *fault.Error (forbidden, policy_error) when
	// they do not, and the caller ends it. Safe to call until the subscription is detached.
	Recheck func(c *policy.Claims) error
	// Token is the interest token the subscription is filed under among nodes (see
	// InterestToken).
	Token string
	// Unlogged, when set, is a second token the subscription is filed under among nodes
	// (UnloggedToken): its filter pins a column outside the table's identity key.
	Unlogged string
	// Replayed is set when the request's From was inside the history: the changes after it
	// were routed to the subscription before any live one, and Head is From.
	Replayed bool
	// Routed is the commit LSN of the last transaction this router routed when the
	// subscription attached: Head's, unless Head came from where the stream went live (Seed)
	// or from a loss every subscription was told of (GapAll), past transactions this router
	// never saw, and a transaction at or before Head that comes later is not routed.
	Routed change.LSN
	// Replay routes txns, the transactions of the subscription's table it missed after from
	// (oldest first, as a shared history kept them), to receiver to, through the
	// subscription's own filter, column list and policy exactly as live changes go: for a
	// resume whose history was read elsewhere, outside the router's lock. It takes the lock
	// for the routing alone. A detached subscription is replayed nothing.
	Replay func(to stream.Receiver, from stream.Position, txns []history.Txn)
	// Snapshot is set for a subscription asked with Request.Snapshot: its hand-off, and what
	// its reader needs. Nothing reaches the subscription's target but through the hand-off.
	Snapshot *Snapshot
}

// Interest tokens. Among many nodes, a table subscription is filed in the interest index
// under one token, and the replicator routes each change to the nodes holding a token of its
// rows: "k:<column>=<key>" when the filter pins one column to one value (filter.IndexKeys with
// one key), so a change reaches only the nodes that hold that value; "*" otherwise, which
// every change of the table reaches. A subscription pinning a column outside the identity key
// is filed under "u:<column>" too (UnloggedToken), which an UPDATE or DELETE that does not log
// the column's old value reaches.

// AnyToken is the token of a subscription no single value indexes.
const AnyToken = "*"

// InterestToken returns the token a subscription with filter f (nil: every row) is filed
// under.
func InterestToken(f *filter.Filter) string {
	if f == nil {
		return AnyToken
	}
	if col, keys, ok := f.IndexKeys(); ok && len(keys) == 1 {
		return "k:" + col + "=" + keys[0]
	}
	return AnyToken
}

// UnloggedToken returns the second token a subscription with filter f is filed under, or ""
// for none: "u:<column>" when the filter pins one column to one value and the column is
// outside key, the table's identity key. Such a filter is allowed only while the table is
// REPLICA IDENTITY FULL; should the identity drop, an UPDATE or DELETE no longer logs the
// column's old value, its "k:" token cannot be named, and the change is routed by this one
// instead (Tokens), so that the subscription still hears of a row leaving its filter.
func UnloggedToken(f *filter.Filter, key []string) string {
	if f == nil {
		return ""
	}
	if col, keys, ok := f.IndexKeys(); ok && len(keys) == 1 && !slices.Contains(key, col) {
		return "u:" + col
	}
	return ""
}

// Tokens appends the interest tokens a change is routed by to dst: AnyToken, one per column of
// its new and old images whose value has an index key, and, for an UPDATE or DELETE whose old
// image leaves a column out (its table's identity is not FULL), that column's UnloggedToken.
// The column types come from the schema; an error reading it is returned, and the caller must
// then route the change as if every token matched. So is ErrCatalogBehind when the change has
// a column the schema does not (a column added since the schema was read, which a
// subscription on another node, with a newer read, may pin): its token cannot be named.
func (r *Router) Tokens(ctx context.Context, e *change.Event, dst []string) ([]string, error) {
	dst = append(dst, AnyToken)
	if e.Op == change.Truncate {
		return dst, nil
	}
	info, err := r.schema.Table(ctx, e.Table)
	if err != nil {
		return dst, err
	}
	var seen [2]int // of each image's columns, how many the schema has
	for _, c := range info.Columns {
		t := filter.TypeOf(c.OID)
		for i, row := range [2]change.Row{e.After, e.Before} {
			if v, ok := row.Get(c.Name); ok {
				seen[i]++
				if key, ok := filter.Key(t, v); ok {
					tok := "k:" + c.Name + "=" + key
					if len(dst) == 0 || dst[len(dst)-1] != tok {
						dst = append(dst, tok)
					}
				}
			}
		}
	}
	// The old image holds e.Key's columns, every column under FULL (then nothing is left out,
	// and nothing is looked up on the replicator's path per change); an UPDATE that kept its
	// key has no old image, its old key being the new one.
	if (e.Op == change.Update || e.Op == change.Delete) && len(e.Key) < len(info.Columns) {
		for _, c := range info.Columns {
			if !slices.Contains(e.Key, c.Name) {
				dst = append(dst, "u:"+c.Name)
			}
		}
	}
	if seen[0] < len(e.After) || seen[1] < len(e.Before) {
		return dst, ErrCatalogBehind
	}
	return dst, nil
}

// ErrCatalogBehind is Tokens' answer for a change with a column the schema it read lacks.
var ErrCatalogBehind = errors.New("the change has a column the catalog read for its table lacks (added since)")

// GapAll tells every table subscription on this node that items from first to last may not
// have reached it, for reason: a loss before this node (the bus between nodes).
func (r *Router) GapAll(first, last stream.Position, reason stream.Reason) {
	it := stream.NewGap(&stream.Gap{First: first, Last: last, Reason: reason})
	r.mu.Lock()
	defer r.mu.Unlock()
	// A hand-off can no longer tell what it was offered complete: it fails, and its client
	// reads the rows again. One already live is settled first, and told like the others.
	r.failHandoffsLocked(handoff.ReasonReplicationRestarted, fmt.Sprintf("the stream reported a loss (%s) from %s to %s", reason, first, last))
	// What comes later at or before last lies inside the gap: the subscribers re-read past it.
	// A subscription attached later starts after it.
	if last.LSN > r.head {
		r.head = last.LSN
	}
	for _, t := range r.tables {
		t.each(func(e *entry) {
			r.bus.Deliver(e.target, e.sub, it)
			r.delivered.Add(1)
		})
	}
	r.gaps.Add(1)
}

// Subscribe validates req against the table and attaches it. It returns where the
// subscription starts and how to detach. Errors are *fault.Error.
func (r *Router) Subscribe(ctx context.Context, req Request) (Subscription, func(), error) {
	table := req.Table
	if !strings.Contains(table, ".") {
		table = "public." + table
	}
	if schema, _, _ := strings.Cut(table, "."); r.allowed == nil && (schema == "pg_catalog" || schema == "information_schema" || schema == "pg_toast") {
		// With no table list, the publication decides what streams; the system catalogs never
		// do, and their columns are nobody's business.
		return Subscription{}, nil, &fault.Error{Code: fault.CodeUnknownTable, Field: "table",
			Message: fmt.Sprintf("table %q is not streamed by this server", req.Table)}
	}
	if r.allowed != nil && !r.allowed[table] {
		return Subscription{}, nil, &fault.Error{Code: fault.CodeUnknownTable, Field: "table",
			Message: fmt.Sprintf("table %q is not streamed by this server; streamed tables: %s (changefeed.tables)", req.Table, r.tableList())}
	}
	// Before the catalog too: until the stream is live the changefeed may not have created its
	// publication yet, and a table it is about to stream would read as unknown, a refusal a
	// client does not retry.
	r.mu.RLock()
	live := r.live
	r.mu.RUnlock()
	if !live {
		return Subscription{}, nil, errNotLive()
	}
	var tp *policy.TablePolicy
	if r.gate != nil {
		var err error
		if tp, err = r.gate.Table(table); err != nil {
			return Subscription{}, nil, err
		}
		if tp == nil {
			// Closed: no rules. The same answer whether or not the table exists.
			return Subscription{}, nil, &fault.Error{Code: fault.CodeForbidden, Field: "table",
				Message: fmt.Sprintf("no policy rule lets this identity subscribe to table %q", req.Table)}
		}
	}
	info, err := r.schema.Table(ctx, table)
	if err != nil {
		return Subscription{}, nil, err
	}
	cols := info.Columns
	if len(cols) == 0 {
		// One answer whether the table is missing or merely unpublished: a client learns
		// nothing about tables Herald does not stream, not even that they exist.
		return Subscription{}, nil, &fault.Error{Code: fault.CodeUnknownTable, Field: "table",
			Message: fmt.Sprintf("table %q is not streamed by this server: name it as schema.table, or ask the operator to add it to Herald's publication", req.Table)}
	}
	claims := req.Claims
	if claims == nil {
		claims = policy.NewClaims(nil)
	}
	// The columns this identity may see are the table as far as it is concerned: its filter
	// and its column list are checked against them alone, so a hidden column is refused as
	// one that does not exist, and no message names it.
	visible, err := visibleColumns(tp, claims, cols)
	if err != nil {
		return Subscription{}, nil, err
	}
	// Under a policy that hides columns from this identity, a refusal never echoes a column
	// name the table lacks: a hidden column and a missing one are refused alike, and neither
	// is named, so the answer cannot tell them apart.
	hides := len(visible) < len(cols)
	f, err := filter.Parse(req.Filter, visible)
	if err != nil {
		if fe, ok := err.(*filter.Error); ok && hides && fe.Code == filter.CodeUnknownColumn {
			return Subscription{}, nil, &fault.Error{Code: fault.CodeUnknownColumn, Field: "filter",
				Message: fmt.Sprintf("filter at %s names a column that is not one this identity may read; the columns are: %s", fe.Path, columnNames(visible))}
		}
		return Subscription{}, nil, filterError(err)
	}
	if err := checkIdentity(table, f, &info); err != nil {
		return Subscription{}, nil, err
	}
	var project map[string]bool
	if req.Columns != nil {
		project = map[string]bool{}
		known := map[string]bool{}
		for _, c := range visible {
			known[c.Name] = true
		}
		for i, c := range req.Columns {
			if !known[c] && hides {
				return Subscription{}, nil, &fault.Error{Code: fault.CodeUnknownColumn, Field: fmt.Sprintf("columns[%d]", i),
					Message: fmt.Sprintf("columns[%d] is not a column this identity may read; the columns are: %s", i, columnNames(visible))}
			}
			if !known[c] {
				return Subscription{}, nil, &fault.Error{Code: fault.CodeUnknownColumn, Field: fmt.Sprintf("columns[%d]", i),
					Message: fmt.Sprintf("table %s has no column %q", table, c)}
			}
			project[c] = true
		}
		// The key columns always go out: a client applies changes by key, and a delete or a
		// leave carries nothing else.
		for _, k := range info.Key {
			project[k] = true
		}
	} else if len(visible) < len(cols) {
		project = map[string]bool{}
		for _, c := range visible {
			project[c.Name] = true
		}
	}
	if err := subscribeRule(tp, claims, req); err != nil {
		return Subscription{}, nil, err
	}
	if req.Snapshot {
		if err := checkSnapshot(table, req, &info); err != nil {
			return Subscription{}, nil, err
		}
	}
	e := &entry{sub: req.Sub, target: req.Target, filter: f, columns: project, shape: shapeOf(project)}
	if tp != nil {
		e.rule, e.claims = tp.Row(), claims
		e.gkey = e.rule.GroupKey(claims)
	}
	types := map[string]filter.Type{}
	for _, c := range cols {
		types[c.Name] = filter.TypeOf(c.OID)
	}
	var ho *handoffEntry
	var snap *Snapshot
	if req.Snapshot {
		// Until the hand-off is live the entry routes into collect, which Accept offers it.
		ho = &handoffEntry{e: e, table: table, types: types, target: req.Target, holding: req.Hold}
		e.target = collect{ho}
		snap = &Snapshot{Table: table, Columns: cols, Key: info.Key, Filter: f, Keep: keeper(e), Joined: info.Joined}
	}

	r.mu.Lock()
	if !r.live {
		r.mu.Unlock()
		return Subscription{}, nil, errNotLive()
	}
	t := r.tables[table]
	if t == nil {
		t = newTable()
		r.tables[table] = t
	}
	t.add(e, types)
	head := stream.TablePosition(r.head, 0)
	accepted := r.accepted
	replayed := false
	if ho != nil {
		ho.t = t
		r.startHandoffLocked(ho)
		snap.Handoff = ho.h
		if req.Hold {
			lookback := r.handoff.Lookback
			if lookback <= 0 {
				lookback = DefaultLookback
			}
			snap.Since = r.sinceLocked(time.Now().Add(-lookback))
			snap.Open = func(txns []history.Txn, through change.LSN) {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.openLocked(ho, txns, through)
			}
		}
	} else if replayed = r.replayLocked(e, table, types, req.From); replayed {
		head = req.From
	}
	r.mu.Unlock()

	var once sync.Once
	sub := Subscription{Head: head, Key: info.Key, Token: InterestToken(f), Unlogged: UnloggedToken(f, info.Key), Replayed: replayed, Routed: accepted, Snapshot: snap,
		Replay: func(to stream.Receiver, from stream.Position, txns []history.Txn) {
			r.replay(e, table, types, to, from, txns)
		}}
	if tp != nil {
		sub.Recheck = func(c *policy.Claims) error {
			return r.recheck(tp, t, e, req, cols, visible, c, types)
		}
	}
	return sub, func() {
		once.Do(func() {
			r.mu.Lock()
			e.detached = true
			if ho != nil {
				r.dropHandoffLocked(ho)
			}
			if t.remove(e) {
				delete(r.tables, table)
			}
			r.mu.Unlock()
		})
	}, nil
}

// replayLocked routes the history after from to the new entry e of table, when the history
// holds all of it, and reports whether it did. It runs under mu, right after e joined the
// table, so the first live change it gets comes after the last replayed one.
func (r *Router) replayLocked(e *entry, table string, types map[string]filter.Type, from stream.Position) bool {
	if r.hist == nil || !from.IsTable() || from.LSN > r.head || !r.hist.covers(from.LSN) {
		return false
	}
	// A table of e alone: the history's changes go through e's filter and policy exactly as
	// live ones would, and reach nobody else.
	solo := newTable()
	solo.add(e, types)
	rt := &r.rt
	rt.r = r
	r.hist.after(from.LSN, from.Idx, func(lsn change.LSN, h *histEvent) {
		if h.ev.Table == table {
			h.ev.LSN = lsn
			rt.event(solo, &h.ev, h.idx)
		}
	})
	rt.wakes.Wake()
	return true
}

// replay routes txns, what e of table missed after from, to receiver to through a copy of e
// alone, under mu: the changes go through e's filter, columns and policy (as its claims are
// now) exactly as live ones would, and reach nobody else.
func (r *Router) replay(e *entry, table string, types map[string]filter.Type, to stream.Receiver, from stream.Position, txns []history.Txn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.detached {
		return
	}
	c := *e
	c.target = to
	solo := newTable()
	solo.add(&c, types)
	rt := &r.rt
	rt.r = r
	for i := range txns {
		txn := &txns[i]
		if txn.LSN < from.LSN || txn.LSN == from.LSN && (from.Idx == 0 || txn.Overflow != nil) {
			continue
		}
		if of := txn.Overflow; of != nil {
			if n, ok := of.Tables[table]; ok {
				r.overflowTable(solo, txn.LSN, of, n)
			}
			continue
		}
		for k := range txn.Events {
			h := &txn.Events[k]
			if h.Table != table || txn.LSN == from.LSN && h.Idx <= from.Idx {
				continue
			}
			h.Event.LSN = txn.LSN
			rt.event(solo, &h.Event, h.Idx)
		}
	}
	rt.wakes.Wake()
}

// HistoryStats returns the history's size; the zero value without one.
func (r *Router) HistoryStats() HistoryStats {
	if r.hist == nil {
		return HistoryStats{}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.hist.stats()
}

// visibleColumns returns the columns of cols the identity may see: every one without a policy.
func visibleColumns(tp *policy.TablePolicy, c *policy.Claims, cols []filter.Column) ([]filter.Column, error) {
	if tp == nil {
		return cols, nil
	}
	names, d, err := tp.Columns(c)
	switch d {
	case policy.Deny:
		return nil, &fault.Error{Code: fault.CodeForbidden, Message: "no policy rule lets this identity see the table's columns"}
	case policy.Error:
		return nil, policyError(err)
	}
	out := make([]filter.Column, 0, len(names))
	for _, col := range cols {
		if slices.Contains(names, col.Name) {
			out = append(out, col)
		}
	}
	return out, nil
}

// subscribeRule asks the table's subscribe rule.
func subscribeRule(tp *policy.TablePolicy, c *policy.Claims, req Request) error {
	if tp == nil {
		return nil
	}
	d, err := tp.Subscribe(c, req.Filter, req.Columns)
	switch d {
	case policy.Deny:
		return &fault.Error{Code: fault.CodeForbidden,
			Message: fmt.Sprintf("the policy's subscribe rule for table %q does not let this identity subscribe with this filter and column list", req.Table)}
	case policy.Error:
		return policyError(err)
	}
	return nil
}

// policyError is a rule that could not decide, as the client learns it: the rule's name, never
// the detail, which may name a column the client may not see (the detail goes to the log).
func policyError(err error) error {
	rule := "a policy rule"
	if ee, ok := err.(*policy.EvalError); ok {
		rule = ee.Rule
	}
	return &fault.Error{Code: fault.CodePolicyError,
		Message: rule + " could not decide for this identity (a server configuration problem, not a denial); retry later, and report it if it persists",
		Err:     err}
}

// recheck judges a subscription again for new claims: its columns, then its subscribe rule.
// When they still allow it, the subscription follows the new claims from the next change on
// (its row rule's group is the new claims'). The columns it may see must be those it was made
// with: its filter and its rows were checked against them.
func (r *Router) recheck(tp *policy.TablePolicy, t *table, e *entry, req Request, cols, was []filter.Column, c *policy.Claims, types map[string]filter.Type) error {
	visible, err := visibleColumns(tp, c, cols)
	if err != nil {
		return err
	}
	if !slices.EqualFunc(visible, was, func(a, b filter.Column) bool { return a.Name == b.Name }) {
		return &fault.Error{Code: fault.CodeForbidden,
			Message: fmt.Sprintf("the columns of table %q this identity may see changed with the new token; subscribe again", req.Table)}
	}
	if err := subscribeRule(tp, c, req); err != nil {
		return err
	}
	gkey := e.rule.GroupKey(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.detached {
		return nil
	}
	if gkey == e.gkey {
		// Same answer on every row; the group's claims stand for the new ones too.
		return nil
	}
	t.remove(e)
	e.claims, e.gkey = c, gkey
	t.add(e, types)
	return nil
}

// errNotLive refuses a subscription until the stream is live: there is no position it could
// honestly start after, so a resume could not be checked, nor a later change be promised.
func errNotLive() error {
	return &fault.Error{Code: fault.CodeUnavailable,
		Message: "the change stream is not live yet (the replication stream is starting); retry with backoff"}
}

func (r *Router) tableList() string {
	var out []string
	for t := range r.allowed {
		out = append(out, t)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// filterError turns a filter refusal into the client's error.
func filterError(err error) error {
	fe, ok := err.(*filter.Error)
	if !ok {
		return &fault.Error{Code: fault.CodeBadFilter, Field: "filter", Message: err.Error()}
	}
	code := fault.CodeBadFilter
	if fe.Code == filter.CodeUnknownColumn {
		code = fault.CodeUnknownColumn
	}
	msg := fe.Error()
	return &fault.Error{Code: code, Field: "filter", Message: msg, Err: err}
}

// checkIdentity refuses a filter that reads a column Postgres does not log in the old image
// of an UPDATE. With the old value unknown, the router cannot tell which subscribers had a row
// that an update moved out of their filter: it could only tell every subscriber of the column
// "remove it if you have it", on every update of the table, which defeats the index; or say
// nothing, which leaves views silently stale. A filter on the identity's columns is exact:
// Postgres logs the old key whenever it changes.
func checkIdentity(table string, f *filter.Filter, info *TableInfo) error {
	var unlogged []string
	for _, c := range f.Columns() {
		if !info.logged(c) {
			unlogged = append(unlogged, strconv.Quote(c))
		}
	}
	if len(unlogged) == 0 {
		return nil
	}
	logged := "no column"
	if info.Identity != IdentityNothing && len(info.Key) > 0 {
		logged = "only its key (" + strings.Join(info.Key, ", ") + ")"
	}
	return &fault.Error{Code: fault.CodeBadFilter, Field: "filter",
		Message: fmt.Sprintf("the filter reads %s, but table %s has REPLICA IDENTITY %s, so Postgres logs %s of a row's old values, "+
			"and a row an update moves out of the filter could not be reported; filter on the key columns only, "+
			"or ask the operator to run ALTER TABLE %s REPLICA IDENTITY FULL", strings.Join(unlogged, ", "), table, info.Identity, logged, table)}
}

// shapeOf names a column list, so subscribers with the same one share encoded bodies.
func shapeOf(cols map[string]bool) string {
	if cols == nil {
		return ""
	}
	names := make([]string, 0, len(cols))
	for c := range cols {
		names = append(names, c)
	}
	slices.Sort(names)
	return "\x00" + strings.Join(names, "\x00")
}

// atomicCounter is one table's count: its rows_denied, or its rule errors.
type atomicCounter = atomic.Uint64

// counterFor returns table's counter in m (denied, ruleErrsBy).
func (r *Router) counterFor(m *sync.Map, table string) *atomicCounter {
	if c, ok := m.Load(table); ok {
		return c.(*atomicCounter)
	}
	c, _ := m.LoadOrStore(table, new(atomicCounter))
	return c.(*atomicCounter)
}

// columnNames lists columns' names for a message.
func columnNames(cols []filter.Column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}
