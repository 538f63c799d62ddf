package config

import (
	"errors"
	"fmt"
	"testing"
)

const exampleFile = "../../examples/herald.yaml"

func TestExampleFileLoads(t *testing.T) {
	c, err := Load(exampleFile, nil)
	if err != nil {
		t.Fatalf("Load(%s): %v", exampleFile, err)
	}
	if !c.ChangefeedEnabled() {
		t.Errorf("the example does not enable the changefeed")
	}
	// The example holds no secret: they belong in the environment.
	r := c.Redacted()
	for _, k := range Keys() {
		if k.Secret && k.Format(r) != k.Format(c) {
			t.Errorf("the example sets %s to a secret; leave it to %s", k.Name, k.Env)
		}
	}
	// With the secrets the comments point to, it still loads.
	c, err = Load(exampleFile, []string{secretFromEnv, "HERALD_API_KEYS=" + testAPIKey})
	if err != nil {
		t.Fatalf("Load(%s) with secrets in the environment: %v", exampleFile, err)
	}
	if got := c.AuthSection.Secrets; len(got) != 1 {
		t.Errorf("auth.secrets = %d entries, want 1 from the environment", len(got))
	}
}

// Example shows how a misspelt variable is met: by name, with the one that was meant.
func Example() {
	_, err := Load("", []string{"HERALD_AUTH_ALLOW_ANONYMOUS=true", "HERALD_LIMITS_MAX_CONECTIONS=5000"})
	var e *Error
	if errors.As(err, &e) {
		fmt.Println(e.Key)
		fmt.Println(e.Fix)
	}
	// Output:
	// HERALD_LIMITS_MAX_CONECTIONS
	// did you mean HERALD_LIMITS_MAX_CONNECTIONS? Otherwise unset HERALD_LIMITS_MAX_CONECTIONS; docs/CONFIG.md lists every variable
}
