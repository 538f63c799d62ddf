package wire

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/stream"
)

// AppendEventID appends the SSE event id of a data frame or resync of subscription sub at
// position p, on a stream whose only live subscription is sub: sub, one space, then p's text
// form, e.g. "feed 16/B374D848.3". A subscription id has no spaces and a position has none, so
// ParseEventID splits it unambiguously. A stream with more subscriptions writes the longer form
// EventID describes.
func AppendEventID(dst []byte, sub string, p Position) []byte {
	dst = append(dst, sub...)
	dst = append(dst, ' ')
	return p.AppendText(dst)
}

// EventID is what an SSE event id says: the position of each live subscription of the stream,
// as of that event. Every frame of a subscription carries one (its subscribed, changes,
// messages, resyncs, and the unsubscribed that ends it), and the events of a stream arrive in
// order, so the last id a client received says, for every subscription, the last position it
// received.
//
// Its text is space-separated tokens; a subscription with no position yet (a channel pattern
// before its first message) has "-". A stream whose only live subscription is its URL
// subscription writes two: "feed 16/B374D848.3". Any other writes an odd count: "@" and the
// stream's session id, then each live subscription's id and position, "@s1.Xy feed
// 16/B374D848.3 inbox k7Hq2x:42", or "@" and the session id alone once none is live. The session id names where the
// stream's subscriptions are kept for a reconnect to take up.
type EventID struct {
	Session string        // the stream's session, without its "@"; "" in the two-token form
	Subs    []SubPosition // each live subscription's last position, in no particular order
}

// SubPosition is one subscription's position in an EventID.
type SubPosition struct {
	Sub string
	Pos Position
}

// Position returns the position the id gives subscription sub, and whether it names sub.
func (e *EventID) Position(sub string) (Position, bool) {
	for _, sp := range e.Subs {
		if sp.Sub == sub {
			return sp.Pos, true
		}
	}
	return Position{}, false
}

// MaxEventIDBytes bounds a Last-Event-ID: a stream's subscriptions are bounded
// (limits.max_subscriptions), and so is each one's share of the id.
const MaxEventIDBytes = 64 << 10

// maxSessionIDBytes bounds the session token of an EventID: a node id, a dot, 24 characters.
const maxSessionIDBytes = 160

// ParseEventID reads a Last-Event-ID the server wrote (see EventID). What does not parse is
// bad_frame, naming what is wrong.
func ParseEventID(s string) (EventID, error) {
	bad := func(why string, err error) (EventID, error) {
		return EventID{}, &Error{Code: CodeBadFrame, Field: "Last-Event-ID", Err: err, Message: fmt.Sprintf(
			"Last-Event-ID %q %s; send the id of the last event received, unchanged", short(s), why)}
	}
	if len(s) > MaxEventIDBytes {
		return bad(fmt.Sprintf("is longer than %d bytes", MaxEventIDBytes), nil)
	}
	tokens := strings.Split(s, " ")
	var id EventID
	if len(tokens)%2 == 1 {
		session, ok := strings.CutPrefix(tokens[0], "@")
		if !ok || !validSession(session) {
			return bad(`does not start with "@" and a session id`, nil)
		}
		id.Session, tokens = session, tokens[1:]
	}
	if id.Session == "" && len(tokens) != 2 {
		return bad(`is not "<sub> <position>", like "feed 16/B374D848.3"`, nil)
	}
	id.Subs = make([]SubPosition, 0, len(tokens)/2)
	for i := 0; i < len(tokens); i += 2 {
		sub := tokens[i]
		if !validToken(sub) {
			return bad(fmt.Sprintf("names subscription %q, which is no subscription id", short(sub)), nil)
		}
		var p Position
		var err error
		if tokens[i+1] != stream.NoPositionText {
			p, err = ParsePosition(tokens[i+1])
		}
		if err != nil {
			return bad(fmt.Sprintf("gives subscription %q the position %q: %v", sub, short(tokens[i+1]), err), err)
		}
		if _, dup := id.Position(sub); dup {
			return bad(fmt.Sprintf("names subscription %q twice", sub), nil)
		}
		id.Subs = append(id.Subs, SubPosition{Sub: sub, Pos: p})
	}
	return id, nil
}

// validSession reports whether s can be a session id: printable ASCII without spaces.
func validSession(s string) bool {
	if len(s) == 0 || len(s) > maxSessionIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7E {
			return false
		}
	}
	return true
}

// The query parameters that declare an SSE stream's URL subscription. They mirror subscribe's
// fields; columns is comma-separated, filter is JSON text, from is a position's text form.
var queryParams = []string{"sub", "table", "filter", "columns", "channel", "event", "from", "mode", "durable", "snapshot"}

// SubscribeFromQuery reads the subscription an SSE stream's URL declares, as
// GET /v1/sse?sub=feed&table=public.items&filter={...}. It returns nil, nil when the URL
// declares none. last is the request's Last-Event-ID, parsed (the header, or the last_event_id
// parameter a client without headers sends), nil when absent: it resumes the URL subscription
// after the last event the client received, and takes precedence over from. One that does not
// name the URL's subscription, or in its two-token form comes with a URL that declares none,
// is bad_position: resuming elsewhere, or not at all, would lose items silently.
//
// The returned Subscribe has no ID: its subscribed frame answers no request. Errors are *Error
// values with the same codes and checks as Decode's; the offending parameter is Field.
func SubscribeFromQuery(q url.Values, last *EventID) (*Subscribe, error) {
	declared := false
	for _, name := range queryParams {
		vs := q[name]
		if len(vs) > 1 {
			return nil, &Error{Code: CodeBadFrame, Field: name, Message: fmt.Sprintf(
				"the %s parameter appears %d times; a stream declares one subscription, so give it once", name, len(vs))}
		}
		if len(vs) == 1 && name != "sub" {
			declared = true
		}
	}
	if !declared {
		if q.Has("sub") {
			return nil, &Error{Code: CodeBadFrame, Field: "table", Message: "the URL names a sub but no table or channel; add table=public.items or channel=rooms/1"}
		}
		if last != nil && last.Session == "" {
			// The two-token form is written only while the URL subscription is the stream's
			// one subscription, so a URL without it has nothing to resume: ignoring the id
			// would lose items silently.
			return nil, &Error{Code: CodeBadPosition, Field: "Last-Event-ID", Message: fmt.Sprintf(
				"Last-Event-ID names subscription %q but this stream's URL declares none; reconnect with the URL the events came from", short(last.Subs[0].Sub))}
		}
		return nil, nil
	}
	bad := func(field, format string, args ...any) (*Subscribe, error) {
		return nil, &Error{Code: CodeBadFrame, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	for _, name := range queryParams {
		if v := q.Get(name); !utf8.ValidString(v) {
			return bad(name, "the %s parameter is not valid UTF-8", name)
		}
	}
	f := &Subscribe{
		Sub:     q.Get("sub"),
		Table:   q.Get("table"),
		Channel: q.Get("channel"),
		Event:   q.Get("event"),
		Mode:    Mode(q.Get("mode")),
	}
	if !validToken(f.Sub) {
		return bad("sub", "the sub parameter must be 1 to %d printable ASCII characters without spaces, like sub=feed", MaxIDBytes)
	}
	if f.Mode == "" {
		f.Mode = ModeBroadcast
	}
	switch q.Get("durable") {
	case "", "false":
	case "true":
		f.Durable = true
	default:
		return bad("durable", "the durable parameter is true or false, like durable=true")
	}
	if f.Mode == ModeSingle {
		f.Durable = true
	}
	if q.Has("filter") {
		v := []byte(q.Get("filter"))
		if !validJSON(v, maxNesting) {
			return bad("filter", "the filter parameter must be JSON text, URL-encoded")
		}
		f.Filter = change.AppendCompactJSON(nil, v)
	}
	if q.Has("columns") {
		f.Columns = strings.Split(q.Get("columns"), ",")
		for i, c := range f.Columns {
			if c == "" {
				return bad("columns", "the columns parameter is a comma-separated list of names, like columns=id,title; name %d is empty", i+1)
			}
		}
	}
	switch q.Get("snapshot") {
	case "", "0", "false":
	case "1", "true":
		f.Snapshot = true
	default:
		return bad("snapshot", "the snapshot parameter is 1 (or true) to read the table's rows first, or 0 (false)")
	}
	if s := q.Get("from"); s != "" {
		p, err := ParsePosition(s)
		if err != nil {
			return nil, &Error{Code: CodeBadFrame, Field: "from", Err: err, Message: "the from parameter: " + err.Error()}
		}
		f.From = p
	}
	if last != nil {
		p, ok := last.Position(f.Sub)
		if !ok {
			return nil, &Error{Code: CodeBadPosition, Field: "Last-Event-ID", Message: fmt.Sprintf(
				"Last-Event-ID does not name this stream's subscription %q; reconnect with the URL the events came from", f.Sub)}
		}
		// A durable subscription resumes from its own queue, whatever the client last saw. A
		// snapshot subscription has a position from its live on: the client holds the view at
		// it, so it resumes rather than reads the rows again. Before its live it has none
		// ("-"), and reads them again.
		if !f.Durable {
			f.From = p
			if !p.IsZero() {
				f.Snapshot = false
			}
		}
	}
	if err := validateSubscribe(f); err != nil {
		return nil, err
	}
	return f, nil
}

// short cuts client input echoed in a message to 80 bytes, on a UTF-8 boundary, so an error
// frame never grows with what it complains about.
func short(s string) string {
	if len(s) <= 80 {
		return s
	}
	s = s[:80]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}
