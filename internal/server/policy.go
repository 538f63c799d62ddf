package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/fault"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
)

// gate is the node's policy (internal/policy): the channel rules, compiled at New, and the
// table rules, compiled against the tables' columns once the database reports them (load). A
// table or channel without rules is closed.
type gate struct {
	p *policy.Policy
	// refused counts what the policy refused, for metrics.
	refused *refusals

	mu     sync.RWMutex
	loaded bool                           // guarded by mu: the table rules are compiled
	tables map[string]*policy.TablePolicy // guarded by mu
}

var (
	_ router.Gate    = (*gate)(nil)
	_ session.Policy = (*gate)(nil)
)

// Table is the router's Gate: nil for a table without rules. Until the table rules are
// compiled, a subscription is refused as unavailable, which a client retries.
func (g *gate) Table(table string) (*policy.TablePolicy, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.loaded {
		return nil, &fault.Error{Code: fault.CodeUnavailable,
			Message: "the policy rules are not compiled against the tables yet (the replication stream is starting); retry with backoff"}
	}
	return g.tables[table], nil
}

// policyLoadTimeout bounds reading the tables' columns to compile their rules.
const policyLoadTimeout = 30 * time.Second

// load compiles every configured table's rules against the table as Postgres reports it
// through Herald's publication: its columns, its key and its replica identity. It runs once
// the stream is live, when the publication is known to exist. An error stops the node: a
// *policy.CompileError names the rule, where and how to fix it.
func (g *gate) load(ctx context.Context, schema router.Schema) error {
	g.mu.RLock()
	loaded := g.loaded
	g.mu.RUnlock()
	if loaded {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, policyLoadTimeout)
	defer cancel()
	tables := map[string]*policy.TablePolicy{}
	for _, name := range g.p.Tables() {
		info, err := schema.Table(ctx, name)
		if err != nil {
			return fmt.Errorf("policy: read the columns of %s to compile its rules: %w", name, err)
		}
		tp, err := g.p.Table(name, policy.Table{Columns: info.Columns, Key: info.Key, Identity: info.Identity.String()})
		if err != nil {
			return err
		}
		tables[name] = tp
	}
	g.mu.Lock()
	g.tables, g.loaded = tables, true
	g.mu.Unlock()
	return nil
}

// Channel is the sessions' Policy: a channel subscription or a client's publication.
func (g *gate) Channel(action, ch, event string, id auth.Identity) error {
	name := policy.RuleSubscribe
	switch action {
	case "publish":
		name = policy.RulePublish
	case "presence":
		name = policy.RulePresence
	}
	d, err := g.p.Channel(name, ch, policy.NewClaims(id.Claims), event)
	switch d {
	case policy.Allow:
		return nil
	case policy.Error:
		g.refused.channelRefused(action, refusedError)
		rule := "a channel rule"
		var ee *policy.EvalError
		if errors.As(err, &ee) {
			rule = ee.Rule
		}
		return &fault.Error{Code: fault.CodePolicyError, Field: "channel",
			Message: rule + " could not decide for this identity (a server configuration problem, not a denial); retry later, and report it if it persists",
			Err:     err}
	}
	g.refused.channelRefused(action, refusedForbidden)
	verb := "subscribe to"
	switch name {
	case policy.RulePublish:
		verb = "publish on"
	case policy.RulePresence:
		verb = "track presence on"
	}
	return &fault.Error{Code: fault.CodeForbidden, Field: "channel",
		Message: fmt.Sprintf("no policy rule lets this identity %s channel %q", verb, ch)}
}

// refusals counts what the policy refused, for metrics: channel requests by action and table
// subscriptions by table, each by code (forbidden: a rule said no, or none lets it;
// policy_error: a rule could not decide).
type refusals struct {
	channel [len(channelActions)][2]atomic.Uint64 // by actionIndex, by refusedForbidden/refusedError
	// tables holds a counter pair for every table with rules, and one under "" for any other
	// table a client names: clients name what they like, and a label must stay bounded. Made
	// by newRefusals, read-only after.
	tables map[string]*[2]atomic.Uint64
}

// The codes a refusal is counted under.
const (
	refusedForbidden = iota
	refusedError
)

// refusedCodes are the metric labels of refusedForbidden and refusedError.
var refusedCodes = [2]string{string(fault.CodeForbidden), string(fault.CodePolicyError)}

// channelActions are the actions gate.Channel decides: the metric's action labels.
var channelActions = [...]string{"subscribe", "publish", "presence"}

func actionIndex(action string) int {
	for i, a := range channelActions {
		if a == action {
			return i
		}
	}
	return 0
}

func newRefusals(tables []string) *refusals {
	r := &refusals{tables: map[string]*[2]atomic.Uint64{"": new([2]atomic.Uint64)}}
	for _, t := range tables {
		r.tables[t] = new([2]atomic.Uint64)
	}
	return r
}

// channelRefused counts a channel request for action refused under code (refusedForbidden,
// refusedError).
func (r *refusals) channelRefused(action string, code int) {
	if r != nil {
		r.channel[actionIndex(action)][code].Add(1)
	}
}

// table counts err, the answer to a subscription to table (schema-qualified), if the policy
// refused it.
func (r *refusals) table(table string, err error) {
	if r == nil {
		return
	}
	fe, ok := wire.AsError(err)
	if !ok {
		return
	}
	i := refusedForbidden
	switch fe.Code {
	case fault.CodeForbidden:
	case fault.CodePolicyError:
		i = refusedError
	default:
		return
	}
	c := r.tables[table]
	if c == nil {
		c = r.tables[""]
	}
	c[i].Add(1)
}
