package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/heraldrt/herald/internal/config"
	"github.com/heraldrt/herald/internal/policy"
)

// TestDevPolicyIsPrintedAndValid: herald dev's open rules are valid rules, and what it prints
// is them, as a config file would hold them.
func TestDevPolicyIsPrintedAndValid(t *testing.T) {
	cfg := config.Default()
	cfg.AuthSection.AllowAnonymous = true
	devPolicy(cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	p, err := policy.New(cfg.Policy(), cfg.PolicyConfig())
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	if d, err := p.Channel(policy.RulePublish, "demo/chat", policy.NewClaims(nil), "msg"); d != policy.Allow {
		t.Errorf("publish on demo/chat: %v %v, want allow", d, err)
	}
	var out bytes.Buffer
	printDevPolicy(&out, cfg)
	for _, want := range []string{"  policy:", "public.items:", `row: "true"`, `'**':`, `publish: "true"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printed policy lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPolicyNotEnforcedWarning(t *testing.T) {
	cfg := config.Default()
	if msg := policyNotEnforced(cfg); msg != "" {
		t.Errorf("no rules: warning %q, want none", msg)
	}
	devPolicy(cfg)
	if msg := policyNotEnforced(cfg); !strings.Contains(msg, "does not enforce them") {
		t.Errorf("rules: warning %q, want one saying they are not enforced", msg)
	}
}
