package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// Decision is what a rule says. The zero Decision is Deny, so a Decision left unset denies.
type Decision uint8

// The three outcomes. Error is never Allow: a rule that could not decide is an outage for the
// one subscriber or request it concerns, reported as such, and never a permission change.
const (
	// Deny: the rule answered false, or there is no rule (closed). For a row: invisible, never
	// sent, counted. For a subscribe or publish: refused with forbidden.
	Deny Decision = iota
	// Allow: the rule answered true.
	Allow
	// Error: the rule could not answer (a missing claim, a type it did not expect, an
	// overflow, a column absent from the image, its cost bound). The error says which rule.
	Error
)

func (d Decision) String() string {
	switch d {
	case Deny:
		return "deny"
	case Allow:
		return "allow"
	}
	return "error"
}

// Claims are an identity's verified claims, made ready for rules once, when the identity is
// verified, and shared by every evaluation for it. Immutable; safe for concurrent use.
type Claims struct {
	raw map[string]any
	val ref.Val
}

// NewClaims wraps a token's claims as encoding/json decodes them (auth.Identity.Claims). The
// map is retained and must not be modified. nil is the empty claims of an anonymous identity.
func NewClaims(claims map[string]any) *Claims {
	if claims == nil {
		claims = map[string]any{}
	}
	return &Claims{raw: claims, val: types.DefaultTypeAdapter.NativeToValue(claims)}
}

// lookup finds the value at path p. ok is false when a key on the way is absent or a value on
// the way is not an object.
func (c *Claims) lookup(p Path) (any, bool) {
	var v any = c.raw
	for _, k := range p {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// activation holds one evaluation's variables. Each is set for the rules that have it; a rule
// reads only its own, which its environment declares.
type activation struct {
	auth     ref.Val
	row, old ref.Val
	name     ref.Val // table or channel
	filter   ref.Val
	columns  ref.Val
	event    ref.Val
	nameVar  string // "table" or "channel"
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varAuth:
		return a.auth, a.auth != nil
	case varRow:
		return a.row, a.row != nil
	case varOld:
		return a.old, a.old != nil
	case varFilter:
		return a.filter, a.filter != nil
	case varColumns:
		return a.columns, a.columns != nil
	case varEvent:
		return a.event, a.event != nil
	case a.nameVar:
		return a.name, a.name != nil
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// activations pools the activations of row rules, evaluated once per group per change: the
// program does not keep its activation after Eval returns.
var activations = sync.Pool{New: func() any { return new(activation) }}

// decide runs a decision rule: true is Allow, false Deny, and anything else Error.
func (c *compiled) decide(act *activation) (Decision, error) {
	out, _, err := c.prg.Eval(act)
	if err != nil {
		return Error, c.evalError(err)
	}
	switch out {
	case types.True:
		return Allow, nil
	case types.False:
		return Deny, nil
	}
	return Error, &EvalError{Rule: c.ref, Detail: "the rule gave a " + out.Type().TypeName() + ", not true or false"}
}

// evalError words an evaluation error for the log.
func (c *compiled) evalError(err error) *EvalError {
	msg := err.Error()
	if strings.Contains(msg, "cost limit exceeded") {
		msg = "the rule's cost passed its bound (policy.max_cost); it visits too many elements"
	}
	var ee *EvalError
	if errors.As(err, &ee) {
		return ee
	}
	return &EvalError{Rule: c.ref, Detail: msg}
}

// jsonValue decodes a JSON document into a CEL value; nil or empty is null.
func jsonValue(raw json.RawMessage) (ref.Val, error) {
	if len(raw) == 0 {
		return types.NullValue, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return types.DefaultTypeAdapter.NativeToValue(v), nil
}
