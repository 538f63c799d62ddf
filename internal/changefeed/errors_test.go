package changefeed

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPgErrorFixesAreActions: every fix names something a person can do or run: the action
// itself, not `herald doctor`, which would only find the same fact again.
func TestPgErrorFixesAreActions(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"network", errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), "reachable"},
		{"object in use", &pgconn.PgError{Code: "55000", Message: "x"}, "message above"},
		{"other", &pgconn.PgError{Code: "XX000", Message: "x"}, "message above"},
		{"privilege", &pgconn.PgError{Code: "42501", Message: "x"}, "grant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := pgError(StageStream, "op", tt.err)
			if !strings.Contains(fe.Fix, tt.want) || strings.Contains(fe.Fix, "herald doctor") {
				t.Errorf("fix = %q, want one that says %q and names the action, not herald doctor", fe.Fix, tt.want)
			}
		})
	}
}
