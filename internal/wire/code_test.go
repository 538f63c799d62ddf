package wire

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/heraldrt/herald/internal/stream"
)

var snakeCase = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

func TestCloseCodes(t *testing.T) {
	want := map[CloseCode]Reaction{
		CloseNormal: Stop, CloseFrameTooLarge: Reconnect, CloseInternal: Reconnect, CloseShuttingDown: Reconnect,
		CloseTooSlow: Reconnect, CloseTooManyConnections: Reconnect, CloseConnectTimeout: Reconnect,
		ClosePingTimeout:  Reconnect,
		CloseTokenExpired: Reauthenticate, CloseAuthFailed: Reauthenticate,
		CloseBadFrame: Stop, ClosePolicy: Stop,
	}
	codes := CloseCodes()
	if len(codes) != len(want) || len(codes) != len(closeNames) {
		t.Fatalf("CloseCodes() has %d, the test %d, the names %d", len(codes), len(want), len(closeNames))
	}
	names := map[string]bool{}
	for _, c := range codes {
		if got := c.Reaction(); got != want[c] {
			t.Errorf("%d (%s) reaction %s, want %s", c, c, got, want[c])
		}
		if !c.Known() || !snakeCase.MatchString(c.String()) || names[c.String()] {
			t.Errorf("%d: name %q not known, not snake_case or repeated", c, c)
		}
		names[c.String()] = true
		if (c < 1000 || c > 1015) && (c < 4000 || c > 4999) {
			t.Errorf("%d is neither a standard code nor in the private range", c)
		}
	}
	// Codes a newer server may send are answered by range.
	for c, r := range map[CloseCode]Reaction{
		1001: Reconnect, 1006: Reconnect, 1013: Reconnect, 4050: Reconnect, 4150: Reauthenticate,
		4300: Reconnect, 4600: Stop, 4999: Stop,
	} {
		if c.Known() {
			t.Errorf("%d should not be known", c)
		}
		if got := c.Reaction(); got != r {
			t.Errorf("unknown %d reaction %s, want %s", c, got, r)
		}
	}
	if CloseCode(4321).String() != "close_4321" {
		t.Errorf("unknown close code name %q", CloseCode(4321).String())
	}
	for _, r := range []Reaction{Reconnect, Reauthenticate, Stop, 0} {
		if r.String() == "" {
			t.Errorf("Reaction(%d) has no name", r)
		}
	}
}

func TestCloseReason(t *testing.T) {
	if got := CloseReason(CloseTooSlow, ""); got != "too_slow" {
		t.Errorf("CloseReason without message = %q", got)
	}
	if got := CloseReason(CloseTokenExpired, "refresh before exp"); got != "token_expired: refresh before exp" {
		t.Errorf("CloseReason = %q", got)
	}
	for _, msg := range []string{strings.Repeat("x", 500), strings.Repeat("é", 100), strings.Repeat("😀", 60)} {
		got := CloseReason(ClosePolicy, msg)
		if len(got) > 123 || !utf8.ValidString(got) || !strings.HasPrefix(got, "policy: ") {
			t.Errorf("CloseReason(long) = %q (%d bytes)", got, len(got))
		}
		if len(got) < 119 {
			t.Errorf("CloseReason cut too much: %d bytes", len(got))
		}
	}
}

func TestResyncReasonsCoverDelivery(t *testing.T) {
	for _, r := range stream.Reasons() {
		if !slices.Contains(ResyncReasons(), ResyncReason(r)) {
			t.Errorf("delivery's reason %q is not a ResyncReason", r)
		}
	}
	for _, r := range ResyncReasons() {
		if !snakeCase.MatchString(string(r)) {
			t.Errorf("%q is not snake_case", r)
		}
	}
}

func TestFrameTypes(t *testing.T) {
	seen := map[FrameType]bool{}
	clients := 0
	for _, ft := range FrameTypes() {
		if seen[ft] {
			t.Errorf("%s twice", ft)
		}
		seen[ft] = true
		if ft.FromClient() {
			clients++
		}
	}
	if clients != 9 {
		t.Errorf("%d client frame types, want 9", clients)
	}
}
