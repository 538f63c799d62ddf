package wire

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/change"
)

// AppendEventID appends the SSE event id of a data frame or resync of subscription sub at
// position p: sub, one space, then p's text form, e.g. "feed 16/B374D848.3". A subscription id
// has no spaces and a position has none, so ParseLastEventID splits it unambiguously. The
// server sets event ids only on the frames of a stream's URL subscription; see
// SubscribeFromQuery.
func AppendEventID(dst []byte, sub string, p Position) []byte {
	dst = append(dst, sub...)
	dst = append(dst, ' ')
	return p.AppendText(dst)
}

// ParseLastEventID reads a Last-Event-ID that AppendEventID wrote.
func ParseLastEventID(s string) (sub string, p Position, err error) {
	sub, pos, ok := strings.Cut(s, " ")
	if !ok || !validToken(sub) {
		return "", Position{}, &Error{Code: CodeBadFrame, Field: "Last-Event-ID", Message: fmt.Sprintf(
			`Last-Event-ID %q is not "<sub> <position>", like "feed 16/B374D848.3"; send the id of the last event received, unchanged`,
			short(s))}
	}
	p, err = ParsePosition(pos)
	if err != nil {
		return "", Position{}, &Error{Code: CodeBadFrame, Field: "Last-Event-ID", Err: err, Message: fmt.Sprintf(
			"Last-Event-ID %q: %v", short(s), err)}
	}
	return sub, p, nil
}

// The query parameters that declare an SSE stream's URL subscription. They mirror subscribe's
// fields; columns is comma-separated, filter is JSON text, from is a position's text form.
var queryParams = []string{"sub", "table", "filter", "columns", "channel", "event", "from", "mode", "snapshot"}

// SubscribeFromQuery reads the subscription an SSE stream's URL declares, as
// GET /v1/sse?sub=feed&table=public.items&filter={...}. It returns nil, nil when the URL
// declares none and there is no lastEventID. lastEventID is the request's Last-Event-ID (the
// header, or the last_event_id parameter a client without headers sends), "" when absent: it
// resumes the URL subscription after the last event the client received, and takes precedence
// over from. One that does not parse is bad_frame; one that names another subscription, or
// comes with a URL that declares none, is bad_position.
//
// The returned Subscribe has no ID: its subscribed frame answers no request. Errors are *Error
// values with the same codes and checks as Decode's; the offending parameter is Field.
func SubscribeFromQuery(q url.Values, lastEventID string) (*Subscribe, error) {
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
		if lastEventID != "" {
			// The server sets event ids only on a URL subscription's frames, so a stream
			// without one has nothing to resume: ignoring the id would lose items silently.
			sub, _, err := ParseLastEventID(lastEventID)
			if err != nil {
				return nil, err
			}
			return nil, &Error{Code: CodeBadPosition, Field: "Last-Event-ID", Message: fmt.Sprintf(
				"Last-Event-ID names subscription %q but this stream's URL declares none; reconnect with the URL the events came from", short(sub))}
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
	if lastEventID != "" {
		sub, p, err := ParseLastEventID(lastEventID)
		if err != nil {
			return nil, err
		}
		if sub != f.Sub {
			return nil, &Error{Code: CodeBadPosition, Field: "Last-Event-ID", Message: fmt.Sprintf(
				"Last-Event-ID names subscription %q but this stream's is %q; reconnect with the URL the events came from", sub, f.Sub)}
		}
		// A snapshot subscription's events carry an id only from its live on: the client
		// holds the view at that position, so it resumes rather than reads the rows again.
		f.From, f.Snapshot = p, false
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
