// Package problem is the one shape of every error a person meets: an operator starting a
// node, reading its logs, or running herald doctor. A Problem says where it happened (Stage),
// what failed (Detail), how to fix it (Fix: a command, a config line, a SQL statement), and
// carries a stable Code to search for, alert on and match in tests.
//
// Each package still owns its errors (changefeed.Error, config.Error, auth.Error, ...): each
// implements Explainer, and whoever shows an error to a person reads it with Of, whatever
// wraps it. The errors a client meets are another set, decided at the protocol edge
// (internal/fault). LEAF: the standard library only.
package problem

import (
	"errors"
	"log/slog"
)

// Problem is an error as a person meets it.
type Problem struct {
	// Code is stable and namespaced by the package that owns the error: "changefeed.slot",
	// "config.value", "auth.token_expired". docs/OPERATIONS.md lists them.
	Code string
	// Stage is the step that failed, in the owner's words ("preflight", "connect").
	Stage string
	// Detail says what failed, with the values that matter; never a secret.
	Detail string
	// Fix says how to make it work: a command, a config key and value, a SQL statement.
	Fix string
}

// Explainer is an error that can say what went wrong as a Problem.
type Explainer interface {
	error
	Problem() Problem
}

// Of returns the Problem of the first error in err's chain that explains itself.
func Of(err error) (Problem, bool) {
	var e Explainer
	if err == nil || !errors.As(err, &e) {
		return Problem{}, false
	}
	return e.Problem(), true
}

// Attr is err as one log attribute: a group "problem" with its code, stage, detail and fix
// when it explains itself, otherwise "error" with its text.
func Attr(err error) slog.Attr {
	p, ok := Of(err)
	if !ok {
		return slog.Any("error", err)
	}
	attrs := []any{slog.String("code", p.Code), slog.String("stage", p.Stage), slog.String("detail", p.Detail)}
	if p.Fix != "" {
		attrs = append(attrs, slog.String("fix", p.Fix))
	}
	return slog.Group("problem", attrs...)
}
