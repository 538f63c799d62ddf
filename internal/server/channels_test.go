package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/wire"
)

// A publication the hub could not take, because its fan-out queue stayed full or the node is
// stopping, is answered 503 unavailable, with a fix; a grammar refusal stays a bad_frame. The
// adapter hands the hub's refusals on as they are, for the protocol edge to name.
func TestClientErrorForRefusedPublications(t *testing.T) {
	for _, tt := range []struct {
		err    error
		code   wire.Code
		status int
	}{
		{fmt.Errorf("publish: %w", &channel.BusyError{Channel: "rooms/1", Waited: 10 * time.Second, Queued: 32, MaxQueue: 32}), wire.CodeUnavailable, 503},
		{channel.ErrHubClosed, wire.CodeUnavailable, 503},
		{fmt.Errorf("%w: %w", channel.ErrBroker, errors.New("dial tcp: connection refused")), wire.CodeUnavailable, 503},
		{&channel.Error{Reason: channel.ReasonBadName, Value: "a//b"}, wire.CodeBadFrame, 400},
	} {
		we := heraldv1.Refusal("p", tt.err, "channel")
		if we.Code != tt.code || we.StatusCode() != tt.status || we.Message == "" || we.ID != "p" {
			t.Errorf("Refusal(%v) = %s %d %q, want %s %d with a message", tt.err, we.Code, we.StatusCode(), we.Message, tt.code, tt.status)
		}
	}
}
