package wire

import (
	"errors"
	"net/url"
	"testing"
)

// FuzzSubscribeFromQuery: an SSE request's query and Last-Event-ID are untrusted. Whatever they
// hold, SubscribeFromQuery returns a subscription that encodes, nothing, or an *Error with a
// client-facing code; a Last-Event-ID is never silently ignored.
func FuzzSubscribeFromQuery(f *testing.F) {
	f.Add("sub=feed&table=public.items&from=16/B374D848.2", "")
	f.Add("sub=feed&channel=rooms/1", "feed k7:3")
	f.Add("access_token=x", "feed 2/0.7")
	f.Add("", "garbage")
	f.Add("sub=feed&channel=rooms/*&event=e&mode=single", "other e:1")
	f.Add("sub=feed&table=a.b", "@n1.abc feed 2/0.7 inbox k7:3")
	f.Add("", "@n1.abc")
	f.Add("", "@n1.abc feed 2/0 feed 2/1")
	f.Fuzz(func(t *testing.T, query, lastEventID string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		s, err := parseQuery(q, lastEventID)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Code != CodeBadFrame && e.Code != CodeBadPosition) || e.Message == "" {
				t.Fatalf("SubscribeFromQuery(%q, %q) = %v, want a bad_frame or bad_position *Error with a message", query, lastEventID, err)
			}
			return
		}
		if s == nil {
			// Only the long form, which names the stream's session, may come without a URL
			// subscription: the stream's kept subscriptions take it up.
			if id, _ := ParseEventID(lastEventID); lastEventID != "" && id.Session == "" {
				t.Fatalf("SubscribeFromQuery(%q, %q) ignored the Last-Event-ID", query, lastEventID)
			}
			return
		}
		if lastEventID != "" {
			id, _ := ParseEventID(lastEventID)
			if p, _ := id.Position(s.Sub); p != s.From {
				t.Fatalf("SubscribeFromQuery(%q, %q) resumes from %v, not the id's position %v", query, lastEventID, s.From, p)
			}
		}
		if _, err := AppendFrame(nil, s); err != nil {
			t.Fatalf("SubscribeFromQuery(%q, %q) = %+v, which does not encode: %v", query, lastEventID, s, err)
		}
	})
}

// parseQuery is SubscribeFromQuery on a Last-Event-ID as text ("" for none), as the SSE edge
// reads it.
func parseQuery(q url.Values, lastEventID string) (*Subscribe, error) {
	if lastEventID == "" {
		return SubscribeFromQuery(q, nil)
	}
	id, err := ParseEventID(lastEventID)
	if err != nil {
		return nil, err
	}
	return SubscribeFromQuery(q, &id)
}

// FuzzParseEventID: a Last-Event-ID is untrusted. Whatever it holds, ParseEventID returns an
// id whose text the server could have written (the same tokens, in order), or bad_frame.
func FuzzParseEventID(f *testing.F) {
	for _, s := range []string{"feed 16/B374D848.3", "@n1.Xy feed 1/2 inbox k7:42", "@n1.Xy", "n1.Xy", "", "a b c d", "x  y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseEventID(s)
		if err != nil {
			if CodeOf(err) != CodeBadFrame {
				t.Fatalf("ParseEventID(%q) = %v, want bad_frame", s, err)
			}
			return
		}
		var b []byte
		if id.Session != "" {
			b = append(append(b, '@'), id.Session...)
		}
		for _, sp := range id.Subs {
			if len(b) > 0 {
				b = append(b, ' ')
			}
			if sp.Pos.IsZero() {
				b = append(append(b, sp.Sub...), " -"...)
				continue
			}
			b = AppendEventID(b, sp.Sub, sp.Pos)
		}
		if back, err := ParseEventID(string(b)); err != nil || back.Session != id.Session || len(back.Subs) != len(id.Subs) {
			t.Fatalf("ParseEventID(%q) = %+v, whose text %q reads back as %+v, %v", s, id, b, back, err)
		}
	})
}
