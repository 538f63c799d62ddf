package channel

import (
	"fmt"
	"strings"
)

// Pattern is a parsed subscription pattern: which channels a subscription receives, and
// optionally which event name. Build one with ParsePattern. Patterns are values, comparable
// with ==; the zero Pattern matches nothing and Hub.Subscribe refuses it.
//
// A pattern has an anchor: its literal segments before the first wildcard, or the whole
// pattern when it has none (an exact pattern). The hub indexes subscriptions by anchor, so a
// publish finds its candidates with one lookup per ancestor of the channel name.
type Pattern struct {
	glob   string // the channel pattern as written, which is also its canonical form
	anchor int    // bytes of glob that make the anchor; len(glob) for an exact pattern, 0 for a root anchor
	depth  uint8  // segments in the anchor
	exact  bool   // no wildcard: the pattern is one channel name
	event  string // the event filter; "" for every event
}

// ParsePattern parses a subscription's channel pattern and event filter (empty for every
// event). It returns an *Error of reason ReasonBadPattern or ReasonBadEvent when either does
// not follow its grammar.
//
// The grammar:
//
//	pattern  = segment-or-wild *( "/" segment-or-wild ) [ "/" "**" ] / "**"
//	segment-or-wild = segment / "*"       ; segment as in CheckName
//
// with the limits of a name: 1 to MaxDepth segments ("*" and "**" count as one each), at most
// MaxNameBytes bytes. Its meaning:
//
//   - A literal segment matches itself, byte for byte.
//   - "*" matches exactly one segment, whatever it is: "docs/*/inbox" matches
//     "docs/alice/inbox" but not "docs/inbox" or "docs/a/b/inbox".
//   - "**" matches one or more segments, and may only end the pattern: "docs/alice/**"
//     matches "docs/alice/inbox" and "docs/alice/a/b", but not "docs/alice" itself. Subscribe
//     to both to get both. "Below" means strictly below, as NATS's ">" does; it keeps a
//     channel and its sub-tree separate things a policy can grant separately.
//   - A wildcard is a whole segment: "room*" is refused, not taken literally, so that a
//     later version may give it a meaning.
//   - "**" in the middle ("a/**/z") is refused: it would make matching backtrack, with a cost
//     that grows with the depth of the name times that of the pattern. Every pattern here
//     matches in one pass over the name.
//   - A pattern may begin with a wildcard ("*/inbox", "**"). Its anchor is then the root, and
//     every publish on the node is a candidate for it; policy decides who may hold one.
//   - The event filter, when not empty, is an event name (see CheckEvent) matched exactly.
//
// A pattern without wildcards is exact: it matches the one channel it names, and Hub.Subscribe
// reports the channel's position for it.
func ParsePattern(channel, event string) (Pattern, error) {
	if event != "" {
		if e := checkEvent(event); e != nil {
			return Pattern{}, e
		}
	}
	p, e := parseGlob(channel)
	if e != nil {
		return Pattern{}, e
	}
	p.event = event
	return p, nil
}

func parseGlob(s string) (Pattern, *Error) {
	bad := func(format string, args ...any) (Pattern, *Error) {
		return Pattern{}, newError(ReasonBadPattern, s, fmt.Sprintf(format, args...), patternFix)
	}
	if s == "" {
		return bad("it is empty")
	}
	if len(s) > MaxNameBytes {
		return bad("it is %d bytes; the most is %d", len(s), MaxNameBytes)
	}
	p := Pattern{glob: s, anchor: -1}
	depth, start := 1, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '/' {
			continue
		}
		seg := s[start:i]
		switch {
		case seg == "*" || seg == "**":
			if p.anchor < 0 {
				p.anchor = max(start-1, 0)
				p.depth = uint8(depth - 1)
			}
			if seg == "**" && i < len(s) {
				return bad(`segment %d is "**", which may only end a pattern; use "*" for one segment`, depth)
			}
		default:
			for j := start; j < i; j++ {
				if segmentChars[s[j]] {
					continue
				}
				if s[j] == '*' {
					return bad(`segment %d is %q: a wildcard is a whole segment, "*" or "**"`, depth, seg)
				}
				return bad("%s", badByte(s, j))
			}
			if detail := badSegment(seg, depth); detail != "" {
				return bad("%s", detail)
			}
		}
		if i < len(s) {
			if depth == MaxDepth {
				return bad("it has more than %d segments", MaxDepth)
			}
			depth++
			start = i + 1
		}
	}
	if p.anchor < 0 {
		p.anchor, p.depth, p.exact = len(s), uint8(depth), true
	}
	return p, nil
}

// String returns the channel pattern as written, which ParsePattern parses back to p together
// with p.Event().
func (p Pattern) String() string { return p.glob }

// Event returns the event filter: the one event name p receives, or "" for every event.
func (p Pattern) Event() string { return p.event }

// Anchor returns p's anchor token: the literal segments before its first wildcard ("docs" for
// "docs/*/inbox", "" for "**"), or the whole name for an exact pattern.
func (p Pattern) Anchor() string { return p.glob[:p.anchor] }

// IsExact reports whether p names one channel: it has no wildcard.
func (p Pattern) IsExact() bool { return p.exact }

// IsZero reports whether p is the zero Pattern, which ParsePattern never returns.
func (p Pattern) IsZero() bool { return p.glob == "" }

// Match reports whether a publication to the channel name with event name event reaches a
// subscription with pattern p. name is assumed valid (see CheckName).
func (p Pattern) Match(name, event string) bool {
	if p.glob == "" || name == "" || !p.wants(event) {
		return false
	}
	if p.exact {
		return name == p.glob
	}
	below := name
	if p.anchor > 0 {
		if len(name) <= p.anchor || name[p.anchor] != '/' || name[:p.anchor] != p.glob[:p.anchor] {
			return false
		}
		below = name[p.anchor+1:]
	}
	return matchBelow(p.below(), below)
}

// matchAt is Match for the hub, without the event filter. The hub has already found that p's
// anchor is an ancestor of the published name, or the name itself (at); below is the part of
// the name under the anchor, empty when at.
func (p *Pattern) matchAt(at bool, below string) bool {
	if p.exact {
		return at
	}
	return !at && matchBelow(p.below(), below)
}

// wants reports whether p's event filter lets through a publication with event name event.
func (p *Pattern) wants(event string) bool { return p.event == "" || p.event == event }

// below returns the part of a non-exact pattern under its anchor: "*/inbox" for
// "docs/*/inbox".
func (p *Pattern) below() string {
	if p.anchor == 0 {
		return p.glob
	}
	return p.glob[p.anchor+1:]
}

// matchBelow reports whether name, one or more segments, matches glob, a pattern's part under
// its anchor. It walks both once, left to right, and allocates nothing.
func matchBelow(glob, name string) bool {
	// Invariant: name is not empty. It holds on entry, and after each step because a name has
	// no empty segments.
	for {
		g, gRest, gMore := strings.Cut(glob, "/")
		if g == "**" {
			return true // the parser put it last, and it takes the one or more segments left
		}
		n, nRest, nMore := strings.Cut(name, "/")
		if g != "*" && g != n {
			return false
		}
		if !gMore || !nMore {
			return gMore == nMore
		}
		glob, name = gRest, nRest
	}
}
