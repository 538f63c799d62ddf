package channel

import (
	"fmt"
	"strconv"
)

// Limits of the name grammar. They are part of the protocol: a client may rely on every name
// within them being accepted by every Herald node.
const (
	// MaxNameBytes bounds a channel name and a subscription pattern. A name is a key in the
	// hub's maps, in the Redis store and in every message frame; 255 bytes holds any sensible
	// hierarchy and keeps a frame's head small.
	MaxNameBytes = 255
	// MaxDepth bounds the segments of a name or pattern. Dispatch does one map lookup per
	// ancestor of a published name, so this bounds the work one publish does before it finds
	// its subscribers, whatever the number of subscriptions.
	MaxDepth = 16
	// MaxEventBytes bounds an event name. Event names are short labels ("chat", "user.joined"),
	// carried in every message frame.
	MaxEventBytes = 64
)

// segmentChars are the bytes a name segment and an event name may hold: A-Z a-z 0-9 and
// "-_.~:@=".
//
// ASCII only, so two names that look alike are the same bytes (no Unicode normalisation to get
// wrong) and a name needs no escaping in a log line or a metric label. Out on purpose:
// "/" separates segments; "*" is the wildcard of patterns, and an event filter may grow one
// later; "{" and "}" delimit Redis hash tags, which the Redis store builds its keys from;
// "%", "?", "#", "&", "+" and space change meaning in the URL query an SSE subscription travels
// in; "|" and "," separate fields in store keys and lists. Anything else can be added later
// without breaking a client; taking a character away could not.
var segmentChars = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-_.~:@=" {
		t[c] = true
	}
	return t
}()

const (
	nameFix    = `a channel name is 1 to 16 segments of A-Z a-z 0-9 - _ . ~ : @ = separated by "/", like "docs/alice/inbox"`
	patternFix = `a pattern is a channel name whose segments after the first literal ones may be "*" (any one segment), ending with "**" (one or more segments) if you like, like "docs/*/inbox" or "docs/alice/**"`
	eventFix   = `an event name is 1 to 64 characters of A-Z a-z 0-9 - _ . ~ : @ =, like "chat" or "user.joined"`
)

// CheckName reports whether s is a valid channel name to publish to, with an *Error of reason
// ReasonBadName when it is not.
//
// The grammar:
//
//	name    = segment *( "/" segment )    ; 1 to MaxDepth segments, at most MaxNameBytes bytes
//	segment = 1*( ALPHA / DIGIT / "-" / "_" / "." / "~" / ":" / "@" / "=" ), but not "." or ".."
//
// Names are case-sensitive and compared as bytes. "." and ".." are refused: channel names are
// not paths, but a name that reads like a relative path invites a proxy, a log tool or a
// person to resolve it. A name never holds "*": a publication goes to one channel, and only a
// subscription pattern spans many.
func CheckName(s string) error {
	if e := checkName(s); e != nil {
		return e
	}
	return nil
}

// checkName is CheckName returning the concrete type, so callers on the hot path pay for no
// interface conversion of a nil error.
func checkName(s string) *Error {
	if s == "" {
		return newError(ReasonBadName, s, "it is empty", nameFix)
	}
	if len(s) > MaxNameBytes {
		return newError(ReasonBadName, s, fmt.Sprintf("it is %d bytes; the most is %d", len(s), MaxNameBytes), nameFix)
	}
	depth, start := 1, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '/' {
			if !segmentChars[s[i]] {
				if s[i] == '*' {
					return newError(ReasonBadName, s, fmt.Sprintf("byte %d is '*': a publication names one channel, and wildcards belong in subscription patterns", i+1), nameFix)
				}
				return newError(ReasonBadName, s, badByte(s, i), nameFix)
			}
			continue
		}
		if detail := badSegment(s[start:i], depth); detail != "" {
			return newError(ReasonBadName, s, detail, nameFix)
		}
		if i < len(s) {
			if depth == MaxDepth {
				return newError(ReasonBadName, s, fmt.Sprintf("it has more than %d segments", MaxDepth), nameFix)
			}
			depth++
			start = i + 1
		}
	}
	return nil
}

// badSegment describes what is wrong with seg, the n-th segment of a name, or returns "". Its
// bytes have been checked already.
func badSegment(seg string, n int) string {
	switch seg {
	case "":
		return fmt.Sprintf(`segment %d is empty: separate segments with one "/", with none at either end`, n)
	case ".", "..":
		return fmt.Sprintf(`segment %d is %q: "." and ".." are not channel segments`, n, seg)
	}
	return ""
}

// badByte describes the byte at i of s, which is not a segment character.
func badByte(s string, i int) string {
	c := s[i]
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("byte %d is %s, which is not allowed", i+1, strconv.QuoteRune(rune(c)))
	}
	return fmt.Sprintf("byte %d is 0x%02X: only printable ASCII is allowed", i+1, c)
}

// CheckEvent reports whether s is a valid event name, with an *Error of reason ReasonBadEvent
// when it is not. An event name is 1 to MaxEventBytes bytes of the characters of a name
// segment. The empty string means "no event name" and is for the caller to allow: Publish
// takes it as a publication without one, and ParsePattern as "every event".
func CheckEvent(s string) error {
	if e := checkEvent(s); e != nil {
		return e
	}
	return nil
}

func checkEvent(s string) *Error {
	switch {
	case s == "":
		return newError(ReasonBadEvent, s, "it is empty", eventFix)
	case len(s) > MaxEventBytes:
		return newError(ReasonBadEvent, s, fmt.Sprintf("it is %d bytes; the most is %d", len(s), MaxEventBytes), eventFix)
	}
	for i := 0; i < len(s); i++ {
		if !segmentChars[s[i]] {
			return newError(ReasonBadEvent, s, badByte(s, i), eventFix)
		}
	}
	return nil
}
