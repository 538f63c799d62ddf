package auth

import (
	"testing"
	"time"
)

func TestSignHS256IsVerified(t *testing.T) {
	v := mustNew(t, Config{Secrets: []string{hsSecret()}})
	claims := map[string]any{"sub": "bench-org_1", "org_id": "org_1", "exp": testNow.Add(time.Hour).Unix()}
	tok, err := SignHS256(hsSecret(), claims)
	if err != nil {
		t.Fatal(err)
	}
	id, err := v.Verify(tok)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if id.Subject != "bench-org_1" || id.Claims["org_id"] != "org_1" {
		t.Fatalf("identity %+v: want subject bench-org_1 and org_id org_1", id)
	}
	if _, err := mustNew(t, Config{Secrets: []string{hsSecretB()}}).Verify(tok); err == nil {
		t.Fatal("a token signed with another secret was verified")
	}
}
