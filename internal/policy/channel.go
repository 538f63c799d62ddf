package policy

import (
	"strings"

	"github.com/google/cel-go/common/types"
)

// Channel decides action (RuleSubscribe, RulePublish or RulePresence) for an identity on a
// channel: a channel name, or for a subscription the pattern subscribed to. event is the
// publication's event name, for publish.
//
// Every configured pattern that matches the channel applies, and all must allow: a pattern
// without a rule for the action denies on the channels it matches. A channel that no single
// pattern covers whole is closed: a subscription to "docs/**" needs a pattern that matches
// every channel below docs/, not one that matches some. Deny outranks Error, and Error
// outranks Allow.
func (p *Policy) Channel(action RuleName, ch string, c *Claims, event string) (Decision, error) {
	covered := false
	var firstErr error
	decision := Allow
	act := activation{auth: c.val, name: types.String(ch), nameVar: varChannel}
	if action == RulePublish {
		act.event = types.String(event)
	}
	for _, e := range p.channels {
		pat := e.pattern.String()
		if !overlaps(pat, ch) {
			continue
		}
		rule := e.rules[action]
		if rule == nil {
			return Deny, nil
		}
		if covers(pat, ch) {
			covered = true
		}
		d, err := rule.decide(&act)
		switch d {
		case Deny:
			return Deny, nil
		case Error:
			if firstErr == nil {
				decision, firstErr = Error, err
			}
		}
	}
	if !covered {
		return Deny, nil
	}
	return decision, firstErr
}

// covers reports whether every channel pattern s matches, pattern p matches too. Either may be
// a plain channel name. "*" is one segment and "**", last only, one or more.
func covers(p, s string) bool {
	ps, ss := strings.Split(p, "/"), strings.Split(s, "/")
	for i, seg := range ps {
		if seg == "**" {
			return len(ss) > i
		}
		if i >= len(ss) || ss[i] == "**" {
			return false
		}
		if seg != "*" && (ss[i] == "*" || ss[i] != seg) {
			return false
		}
	}
	return len(ps) == len(ss)
}

// overlaps reports whether some channel matches both patterns.
func overlaps(p, s string) bool {
	ps, ss := strings.Split(p, "/"), strings.Split(s, "/")
	for i := 0; ; i++ {
		switch {
		case i == len(ps) || i == len(ss):
			return len(ps) == len(ss)
		case ps[i] == "**":
			return true // s has a segment at i
		case ss[i] == "**":
			return true
		case ps[i] == "*" || ss[i] == "*" || ps[i] == ss[i]:
			continue
		}
		return false
	}
}
