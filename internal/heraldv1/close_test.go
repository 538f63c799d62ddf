package heraldv1

import (
	"testing"

	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
)

// TestCloseCodes: every reason a session ends for has a herald.v1 close code of the same name,
// a different one each, and the code maps back to it.
func TestCloseCodes(t *testing.T) {
	seen := map[wire.CloseCode]session.CloseReason{}
	for _, r := range session.CloseReasons() {
		c, ok := closeCodes[r]
		if !ok {
			t.Errorf("reason %s has no close code", r)
			continue
		}
		if c.String() != string(r) {
			t.Errorf("reason %s closes with %s (%d), want the code of the same name", r, c, uint16(c))
		}
		if other, dup := seen[c]; dup {
			t.Errorf("reasons %s and %s share close code %d", other, r, uint16(c))
		}
		seen[c] = r
		if got := reasonOf(c); got != r {
			t.Errorf("reasonOf(%d) = %s, want %s", uint16(c), got, r)
		}
	}
	if len(closeCodes) != len(session.CloseReasons()) {
		t.Errorf("%d reasons mapped, %d defined", len(closeCodes), len(session.CloseReasons()))
	}
	if got := CloseCode("no_such_reason"); got != wire.CloseInternal {
		t.Errorf("an unknown reason closes with %s, want internal", got)
	}
}

// TestDefaultMaxFrameBytes: the session's default frame bound is herald.v1's.
func TestDefaultMaxFrameBytes(t *testing.T) {
	if session.DefaultMaxFrameBytes != wire.DefaultMaxFrameBytes {
		t.Errorf("session.DefaultMaxFrameBytes %d, wire.DefaultMaxFrameBytes %d", session.DefaultMaxFrameBytes, wire.DefaultMaxFrameBytes)
	}
}
