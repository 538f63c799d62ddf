package router

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/filter"
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

// Config configures a Router.
type Config struct {
	// Schema reads table columns. Required.
	Schema Schema
	// Tables, when set, are the only tables that may be subscribed to: those the changefeed
	// streams.
	Tables []string
	// Bus carries the items to subscribers. Required.
	Bus Bus
}

// Router routes committed changes to table subscriptions.
type Router struct {
	schema  Schema
	bus     Bus
	allowed map[string]bool // nil: any table

	mu     sync.RWMutex
	tables map[string]*table // guarded by mu
	head   change.LSN        // guarded by mu: commit LSN of the last transaction routed
	gen    uint64            // guarded by mu: the routing generation, which dedupes candidates
	rt     routing           // guarded by mu: Accept's scratch space, reused
	live   bool              // guarded by mu: the stream has gone live (Seed or Accept)

	routed    atomic.Uint64 // changes routed
	delivered atomic.Uint64 // frames handed to targets
	evals     atomic.Uint64 // filter evaluations
	gaps      atomic.Uint64 // resyncs for changes whose effect on a view could not be told
}

// New returns a router.
func New(cfg Config) (*Router, error) {
	if cfg.Schema == nil {
		return nil, fmt.Errorf("router: no schema source")
	}
	if cfg.Bus == nil {
		return nil, fmt.Errorf("router: no bus")
	}
	r := &Router{schema: cfg.Schema, bus: cfg.Bus, tables: map[string]*table{}}
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
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	r.mu.RLock()
	n := 0
	for _, t := range r.tables {
		n += t.count
	}
	r.mu.RUnlock()
	return Stats{Routed: r.routed.Load(), Delivered: r.delivered.Load(), Evaluations: r.evals.Load(), Gaps: r.gaps.Load(), Subscriptions: n}
}

// Seed sets the position subscriptions start after when the stream goes live at start (an
// end LSN it resumes after), until a transaction is routed. Every later transaction commits
// at or after start, so start-1 is strictly before all of them.
func (r *Router) Seed(start change.LSN) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live = true
	if r.head == 0 && start > 0 {
		r.head = start - 1
	}
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
}

// Subscription is an attached table subscription as its client learns it.
type Subscription struct {
	// Head is the position the subscription starts after: every change committed after it
	// is routed to it.
	Head stream.Position
	// Key names the table's key columns, which every change frame carries.
	Key []string
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
	f, err := filter.Parse(req.Filter, cols)
	if err != nil {
		return Subscription{}, nil, filterError(err)
	}
	if err := checkIdentity(table, f, &info); err != nil {
		return Subscription{}, nil, err
	}
	var project map[string]bool
	if req.Columns != nil {
		project = map[string]bool{}
		known := map[string]bool{}
		for _, c := range cols {
			known[c.Name] = true
		}
		for i, c := range req.Columns {
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
	}
	e := &entry{sub: req.Sub, target: req.Target, filter: f, columns: project, shape: shapeOf(project)}
	types := map[string]filter.Type{}
	for _, c := range cols {
		types[c.Name] = filter.TypeOf(c.OID)
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
	head := r.head
	r.mu.Unlock()

	var once sync.Once
	return Subscription{Head: stream.TablePosition(head, 0), Key: info.Key}, func() {
		once.Do(func() {
			r.mu.Lock()
			if t.remove(e) {
				delete(r.tables, table)
			}
			r.mu.Unlock()
		})
	}, nil
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
