package policy

import (
	"github.com/heraldrt/herald/internal/problem"
	"strconv"
	"strings"
)

// stage names the step of starting a server that a compile error stops.
const stage = "policy"

// CompileError is a rule that cannot be used: it does not parse, does not type-check against its
// table's columns or its variables, or needs what the table's replica identity does not log.
// It is met by the person starting the server, so it names the rule and, for a fault in the
// rule's text, the position, and says how to fix it. A rule is configuration, not client input:
// the whole error may be logged.
type CompileError struct {
	Stage string // always "policy"
	// Rule names the rule as its config key spells it: policy.tables."public.items".row,
	// policy.channels."docs/*".publish.
	Rule string
	// Line and Column locate the fault in the rule's text, both from 1. Zero when the fault is
	// the rule as a whole (a missing row rule, a replica identity that logs too little).
	Line, Column int
	Detail       string
	Fix          string
}

func (e *CompileError) Error() string {
	var b strings.Builder
	b.WriteString(e.Stage)
	b.WriteString(": ")
	b.WriteString(e.Rule)
	if e.Line > 0 {
		b.WriteString(" at ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Column))
	}
	b.WriteString(": ")
	b.WriteString(e.Detail)
	if e.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

// EvalError is a rule that could not decide: a missing claim, a type the rule did not expect,
// an overflow, a column the row image lacks, or a cost past MaxCost. It is an outage for the
// one subscriber or request it concerns, never an answer: the decision that carries it is
// Error, never Allow.
//
// Rule may be shown to the client. Detail is for the server's log: it may name a column the
// client is not allowed to see.
type EvalError struct {
	Rule   string
	Detail string
}

func (e *EvalError) Error() string { return "policy: " + e.Rule + ": " + e.Detail }

// suggestion returns the candidate nearest to got, or "" when none is near enough to be the
// one meant: up to a third of the name may differ, at least one character.
func suggestion(got string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := distance(strings.ToLower(got), strings.ToLower(c)); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(1, len(got)/3) {
		return ""
	}
	return best
}

// distance is the optimal string alignment distance between a and b, in bytes: Levenshtein's,
// with a swap of two neighbours counting once, the commonest typo in a column name ("qyt").
// Names are short.
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Problem is the fault as the person starting the server meets it: code "policy.compile",
// the rule and the position in Detail.
func (e *CompileError) Problem() problem.Problem {
	return problem.Problem{Code: "policy.compile", Stage: e.Stage, Detail: strings.TrimPrefix(e.Error(), e.Stage+": "), Fix: e.Fix}
}

// Problem is the failure as the server's log shows it: code "policy.eval". Detail may name a
// column the subscriber may not see; it is for the log, never for the client.
func (e *EvalError) Problem() problem.Problem {
	return problem.Problem{Code: "policy.eval", Stage: "policy", Detail: e.Rule + ": " + e.Detail,
		Fix: "make the rule total over the rows and claims it meets (has() before a field that may be absent; a default for a missing claim)"}
}
