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
	f.Fuzz(func(t *testing.T, query, lastEventID string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		s, err := SubscribeFromQuery(q, lastEventID)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Code != CodeBadFrame && e.Code != CodeBadPosition) || e.Message == "" {
				t.Fatalf("SubscribeFromQuery(%q, %q) = %v, want a bad_frame or bad_position *Error with a message", query, lastEventID, err)
			}
			return
		}
		if s == nil {
			if lastEventID != "" {
				t.Fatalf("SubscribeFromQuery(%q, %q) ignored the Last-Event-ID", query, lastEventID)
			}
			return
		}
		if _, err := AppendFrame(nil, s); err != nil {
			t.Fatalf("SubscribeFromQuery(%q, %q) = %+v, which does not encode: %v", query, lastEventID, s, err)
		}
	})
}
