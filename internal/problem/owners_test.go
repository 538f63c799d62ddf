package problem_test

import (
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/devpg"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/policy"
	"github.com/heraldrt/herald/internal/problem"
	redisstore "github.com/heraldrt/herald/internal/store/redis"
)

// TestEveryOwnerExplainsItself: each package's error a person meets has the one shape, with
// a code in its owner's namespace, and its detail and fix carried over.
func TestEveryOwnerExplainsItself(t *testing.T) {
	for _, tt := range []struct {
		err  problem.Explainer
		code string
	}{
		{&auth.Error{Stage: auth.StageClaims, Reason: auth.ReasonExpired, Detail: "d", Fix: "f"}, "auth.token_expired"},
		{&auth.ConfigError{Stage: "config", Key: "auth.secrets[0]", Detail: "d", Fix: "f"}, "auth.config"},
		{&changefeed.Error{Stage: changefeed.StageSlot, Detail: "d", Fix: "f"}, "changefeed.slot"},
		{&changefeed.Error{Stage: changefeed.StageSlot, Detail: "d", Fix: "f", Permanent: true}, "changefeed.slot.permanent"},
		{&channel.Error{Reason: channel.ReasonBadName, Value: "a//b", Detail: "d", Fix: "f"}, "channel." + string(channel.ReasonBadName)},
		{&config.Error{Stage: "config", Key: "listen", Source: "env HERALD_LISTEN", Detail: "d", Fix: "f"}, "config.invalid"},
		{&devpg.Error{Stage: devpg.StageInitdb, Detail: "d", Fix: "f"}, "devpg.initdb"},
		{&filter.Error{Code: filter.Code("bad_filter"), Path: "and[0]", Detail: "d", Fix: "f"}, "filter.bad_filter"},
		{&policy.CompileError{Stage: "policy", Rule: "policy.tables.\"t\".row", Line: 1, Column: 2, Detail: "d", Fix: "f"}, "policy.compile"},
		{&redisstore.DialError{Stage: "ping", Detail: "d", Fix: "f"}, "redis.ping"},
		{&redisstore.NodeTakenError{Node: "a", URL: "http://x"}, "redis.node_taken"},
	} {
		p := tt.err.Problem()
		if p.Code != tt.code {
			t.Errorf("%T: code %q, want %q", tt.err, p.Code, tt.code)
		}
		if p.Stage == "" || p.Detail == "" || p.Fix == "" {
			t.Errorf("%T: %+v: every problem has a stage, a detail and a fix", tt.err, p)
		}
		if !strings.Contains(p.Detail, "d") && tt.code != "redis.node_taken" {
			t.Errorf("%T: detail %q lost the owner's detail", tt.err, p.Detail)
		}
	}
}
