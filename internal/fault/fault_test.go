package fault

import (
	"regexp"
	"testing"
)

var snakeCase = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

func TestCodes(t *testing.T) {
	codes := Codes()
	if len(codes) != len(codeStatus) {
		t.Fatalf("Codes() has %d codes, the status table %d", len(codes), len(codeStatus))
	}
	seen := map[Code]bool{}
	for _, c := range codes {
		if seen[c] {
			t.Errorf("%s listed twice", c)
		}
		seen[c] = true
		if !c.Known() {
			t.Errorf("%s is not Known", c)
		}
		if s := c.Status(); s < 400 || s > 599 {
			t.Errorf("%s has status %d, want 4xx or 5xx", c, s)
		}
		if !snakeCase.MatchString(string(c)) {
			t.Errorf("%q is not snake_case", c)
		}
	}
	if Code("nope").Known() || Code("nope").Status() != 500 {
		t.Errorf("an unknown code must be unknown with status 500")
	}
	// The statuses the brief fixes.
	for c, want := range map[Code]int{CodeBadFrame: 400, CodeFrameTooLarge: 413, CodeUnauthorized: 401,
		CodeForbidden: 403, CodeNotFound: 404, CodeDuplicateSubscription: 409, CodeTooManySubscriptions: 429,
		CodeInternal: 500, CodeUnavailable: 503} {
		if c.Status() != want {
			t.Errorf("%s status %d, want %d", c, c.Status(), want)
		}
	}
}
