package router

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/wire"
)

// Target receives a subscription's frames: the session.
type Target interface {
	// Deliver queues one change frame body of sub; the target adds its head.
	Deliver(sub string, body []byte, pos string)
	// DeliverFrame queues one whole frame of sub (a resync), in order with its data, standing
	// for count items from first to pos; count is 0 when unknown.
	DeliverFrame(sub string, frame []byte, first, pos string, count uint64)
}

// Schema tells the router a table's columns, to validate filters and column lists.
type Schema interface {
	Columns(ctx context.Context, table string) ([]filter.Column, error)
}

// Config configures a Router.
type Config struct {
	// Schema reads table columns. Required.
	Schema Schema
	// Tables, when set, are the only tables that may be subscribed to: those the changefeed
	// streams.
	Tables []string
}

// Router routes committed changes to table subscriptions.
type Router struct {
	schema  Schema
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
}

// New returns a router.
func New(cfg Config) (*Router, error) {
	if cfg.Schema == nil {
		return nil, fmt.Errorf("router: no schema source")
	}
	r := &Router{schema: cfg.Schema, tables: map[string]*table{}}
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
	Subscriptions                  int
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	r.mu.RLock()
	n := 0
	for _, t := range r.tables {
		n += t.count
	}
	r.mu.RUnlock()
	return Stats{Routed: r.routed.Load(), Delivered: r.delivered.Load(), Evaluations: r.evals.Load(), Subscriptions: n}
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
	Target  Target
}

// Subscribe validates req against the table's columns and attaches it. It returns the
// position the subscription starts after (every change committed after it will be routed to
// it) and how to detach. Errors are *wire.Error.
func (r *Router) Subscribe(ctx context.Context, req Request) (wire.Position, func(), error) {
	table := req.Table
	if !strings.Contains(table, ".") {
		table = "public." + table
	}
	if schema, _, _ := strings.Cut(table, "."); r.allowed == nil && (schema == "pg_catalog" || schema == "information_schema" || schema == "pg_toast") {
		// With no table list, the publication decides what streams; the system catalogs never
		// do, and their columns are nobody's business.
		return wire.Position{}, nil, &wire.Error{Code: wire.CodeUnknownTable, Field: "table",
			Message: fmt.Sprintf("table %q is not streamed by this server", req.Table)}
	}
	if r.allowed != nil && !r.allowed[table] {
		return wire.Position{}, nil, &wire.Error{Code: wire.CodeUnknownTable, Field: "table",
			Message: fmt.Sprintf("table %q is not streamed by this server; streamed tables: %s (changefeed.tables)", req.Table, r.tableList())}
	}
	cols, err := r.schema.Columns(ctx, table)
	if err != nil {
		return wire.Position{}, nil, err
	}
	if len(cols) == 0 {
		return wire.Position{}, nil, &wire.Error{Code: wire.CodeUnknownTable, Field: "table",
			Message: fmt.Sprintf("table %q does not exist; name it as schema.table", req.Table)}
	}
	f, err := filter.Parse(req.Filter, cols)
	if err != nil {
		return wire.Position{}, nil, filterError(err)
	}
	var project map[string]bool
	if req.Columns != nil {
		project = map[string]bool{}
		known := map[string]bool{}
		for _, c := range cols {
			known[c.Name] = true
		}
		for _, c := range req.Columns {
			if !known[c] {
				return wire.Position{}, nil, &wire.Error{Code: wire.CodeUnknownColumn, Field: "columns",
					Message: fmt.Sprintf("table %s has no column %q", table, c)}
			}
			project[c] = true
		}
	}
	e := &entry{sub: req.Sub, target: req.Target, filter: f, columns: project, shape: shapeOf(req.Columns)}
	types := map[string]filter.Type{}
	for _, c := range cols {
		types[c.Name] = filter.TypeOf(c.OID)
	}

	r.mu.Lock()
	if !r.live {
		r.mu.Unlock()
		// Until the stream is live there is no position a subscription could honestly start
		// after: a resume could not be checked, nor a later change be promised.
		return wire.Position{}, nil, &wire.Error{Code: wire.CodeUnavailable,
			Message: "the change stream is not live yet (the replication stream is starting); retry with backoff"}
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
	return wire.TablePosition(head, 0), func() {
		once.Do(func() {
			r.mu.Lock()
			if t.remove(e) {
				delete(r.tables, table)
			}
			r.mu.Unlock()
		})
	}, nil
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
		return &wire.Error{Code: wire.CodeBadFilter, Field: "filter", Message: err.Error()}
	}
	code := wire.CodeBadFilter
	if fe.Code == filter.CodeUnknownColumn {
		code = wire.CodeUnknownColumn
	}
	msg := fe.Error()
	return &wire.Error{Code: code, Field: "filter", Message: msg, Err: err}
}

// shapeOf names a column list, so subscribers with the same one share encoded bodies.
func shapeOf(cols []string) string {
	if cols == nil {
		return ""
	}
	return "\x00" + strings.Join(cols, "\x00")
}
