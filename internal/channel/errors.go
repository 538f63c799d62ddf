package channel

import (
	"github.com/heraldrt/herald/internal/problem"
	"strconv"
	"strings"
)

// Reason is why a channel name, subscription pattern or event name was refused. The same
// constant is the log attribute and the metric label; the session maps it to the client's error
// code, so the set is closed and the strings are stable.
type Reason string

// The closed set of reasons.
const (
	// ReasonBadName: a channel name to publish to does not follow the name grammar (see
	// CheckName), including one that holds a wildcard.
	ReasonBadName Reason = "bad_channel"
	// ReasonBadPattern: a subscription's channel pattern does not follow the pattern grammar
	// (see ParsePattern).
	ReasonBadPattern Reason = "bad_pattern"
	// ReasonBadEvent: an event name, published or filtered on, does not follow the event grammar
	// (see CheckEvent).
	ReasonBadEvent Reason = "bad_event"
)

// Reasons returns every Reason, for metrics that pre-create their labels.
func Reasons() []Reason { return []Reason{ReasonBadName, ReasonBadPattern, ReasonBadEvent} }

// String returns the reason's stable text.
func (r Reason) String() string { return string(r) }

// Error is a channel name, pattern or event name that was refused. Everything in it came from
// the client or is about the grammar, so the whole error may be logged and shown to the client.
//
// Match the reason with errors.Is against ErrBadName, ErrBadPattern or ErrBadEvent, or read
// Reason after errors.As.
type Error struct {
	Reason Reason
	// Value is the refused input, cut to maxErrorValue bytes.
	Value string
	// Detail says what is wrong with it, e.g. `segment 2 is empty`.
	Detail string
	// Fix says what a valid one looks like.
	Fix string
}

// Sentinels for errors.Is: an *Error matches the sentinel of its Reason.
var (
	ErrBadName    = &Error{Reason: ReasonBadName}
	ErrBadPattern = &Error{Reason: ReasonBadPattern}
	ErrBadEvent   = &Error{Reason: ReasonBadEvent}
)

func (e *Error) Error() string {
	var b strings.Builder
	switch e.Reason {
	case ReasonBadName:
		b.WriteString("channel name ")
	case ReasonBadPattern:
		b.WriteString("channel pattern ")
	case ReasonBadEvent:
		b.WriteString("event name ")
	default:
		b.WriteString(string(e.Reason) + " ")
	}
	b.WriteString(strconv.Quote(e.Value))
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(e.Fix)
		b.WriteString(")")
	}
	return b.String()
}

// Is reports whether target is the sentinel of e's reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Value == "" && t.Detail == "" && t.Reason == e.Reason
}

// maxErrorValue bounds how much of a refused input an Error repeats: enough to recognise it in
// a log line, not a second copy of a 64 KiB frame.
const maxErrorValue = 80

func newError(r Reason, value, detail, fix string) *Error {
	if len(value) > maxErrorValue {
		value = value[:maxErrorValue] + "..."
	}
	return &Error{Reason: r, Value: value, Detail: detail, Fix: fix}
}

// Problem is the refusal as a person meets it (a publish through the API, in a log): code
// "channel.<reason>".
func (e *Error) Problem() problem.Problem {
	return problem.Problem{Code: "channel." + string(e.Reason), Stage: "channel", Detail: e.Error(), Fix: e.Fix}
}
