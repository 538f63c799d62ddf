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
