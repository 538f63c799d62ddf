package config

import (
	"fmt"
	"github.com/heraldrt/herald/internal/problem"
	"strings"
)

// Error is a config that cannot be read or cannot work. It is met by the person starting the
// server, so it names the key at fault, where its value came from, and the fix: the key to set,
// its environment variable and a valid example. Detail and Fix never hold a secret.
type Error struct {
	Stage string // always "config": the stage of starting a server that failed
	// Key is the config key at fault, e.g. "limits.max_connections" or "auth.secrets[1]"; for
	// an unknown environment variable, the variable; empty for a file that cannot be read or
	// parsed at all.
	Key string
	// Source is where the value came from: "herald.yaml:14" or "env HERALD_LISTEN". Empty for
	// a default, or a Config built in code.
	Source string
	Detail string
	Fix    string
	Err    error // the error underneath (I/O, or another package's config error), if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Stage)
	if e.Key != "" {
		b.WriteString(": ")
		b.WriteString(e.Key)
	}
	if e.Source != "" {
		fmt.Fprintf(&b, " (%s)", e.Source)
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

// Unwrap returns the error underneath, if any.
func (e *Error) Unwrap() error { return e.Err }

const stage = "config"

// suggest returns the candidate nearest to got, or "" when none is near enough to be the one
// meant. Case is ignored: "Listen" is a typo of "listen", not a different key.
func suggest(got string, candidates []string) string {
	g := strings.ToLower(got)
	best, bestD := "", -1
	for _, c := range candidates {
		d := distance(g, strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	// Up to a third of the name may be wrong, at least one character: "max_conections" is
	// meant as max_connections, "port" is not meant as "slot".
	if bestD < 0 || bestD > max(1, len(got)/3) {
		return ""
	}
	return best
}

// distance is the optimal string alignment distance between a and b, in bytes: Levenshtein's,
// with a swap of two neighbours counting once, the commonest typo ("slto" for slot). Names are
// short ASCII.
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

// Problem is the fault as the person starting the server meets it: code "config.invalid",
// with the key at fault and where its value came from in Detail.
func (e *Error) Problem() problem.Problem {
	d := e.Detail
	switch {
	case e.Key != "" && e.Source != "":
		d = e.Key + " (" + e.Source + "): " + d
	case e.Key != "":
		d = e.Key + ": " + d
	}
	return problem.Problem{Code: "config.invalid", Stage: e.Stage, Detail: d, Fix: e.Fix}
}
