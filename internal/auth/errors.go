package auth

import (
	"fmt"
	"github.com/heraldrt/herald/internal/problem"
	"strings"
)

// Reason is why a connection was not given an identity. The same constant is the log attribute,
// the metric label and what the session maps to a client close code, so the set is closed and
// the strings are stable.
type Reason string

// The closed set of reasons.
const (
	// ReasonMissing: the client sent no token where one is required.
	ReasonMissing Reason = "token_missing"
	// ReasonExpired: the token was genuine and otherwise valid, but its exp has passed. It is the
	// one failure a client can fix by refreshing the token and reconnecting, so it has its own
	// reason (and close code).
	ReasonExpired Reason = "token_expired"
	// ReasonNotYetValid: the token was genuine and otherwise valid, but its nbf or iat is
	// still ahead, beyond the leeway: the issuer's clock runs ahead of ours. Like an expired
	// token, a fresh one (or the same one, later) cures it, so the client is told
	// "token expired", not "invalid".
	ReasonNotYetValid Reason = "token_not_yet_valid"
	// ReasonInvalid: everything else about a token: malformed, refused alg, unknown key, bad
	// signature, wrong issuer or audience, a missing or mistyped claim, an nbf after its exp.
	ReasonInvalid Reason = "token_invalid"
	// ReasonAnonymousNotAllowed: the client connected without a token, and auth.allow_anonymous
	// is false.
	ReasonAnonymousNotAllowed Reason = "anonymous_not_allowed"
)

// String returns the reason's stable text.
func (r Reason) String() string { return string(r) }

// Stage is the step of verification that failed. Reason says what the client may do about it;
// Stage tells a person reading the log where to look.
type Stage string

// String returns the stage's name.
func (s Stage) String() string { return string(s) }

// The stages, in the order Verify runs them.
const (
	StageDecode    Stage = "decode"    // splitting and decoding the compact JWS, reading its header
	StageAlg       Stage = "alg"       // the header's alg against the algorithms the keys allow
	StageKey       Stage = "key"       // choosing the candidate keys by alg family and kid
	StageSignature Stage = "signature" // the signature against those keys
	StageClaims    Stage = "claims"    // exp, nbf, iat, iss, aud and the claim types
	StageConnect   Stage = "connect"   // a connection without a token
)

// Error is a token that did not yield an identity, or a connection without a token that could not
// have one. Detail names what failed and Fix how to fix it; neither ever holds the token, a
// secret or key material, so the whole error may be logged and shown to the client.
//
// Match the reason with errors.Is against ErrMissing, ErrExpired, ErrNotYetValid, ErrInvalid
// or ErrAnonymousNotAllowed, or read Reason after errors.As.
type Error struct {
	Stage  Stage
	Reason Reason
	Detail string
	Fix    string
	// Err is the underlying jwt-go error where there is one (for errors.Is against
	// jwt.ErrTokenSignatureInvalid and the like). Its text is deliberately left out of Error():
	// decoder messages can quote bytes of the token.
	Err error
}

// Sentinels for errors.Is: an *Error matches the sentinel of its Reason.
var (
	ErrMissing             = &Error{Reason: ReasonMissing}
	ErrExpired             = &Error{Reason: ReasonExpired}
	ErrNotYetValid         = &Error{Reason: ReasonNotYetValid}
	ErrInvalid             = &Error{Reason: ReasonInvalid}
	ErrAnonymousNotAllowed = &Error{Reason: ReasonAnonymousNotAllowed}
)

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("auth")
	if e.Stage != "" {
		b.WriteString(" ")
		b.WriteString(string(e.Stage))
	}
	b.WriteString(": ")
	b.WriteString(string(e.Reason))
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

// Unwrap returns the underlying library error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Stage == "" && t.Detail == "" && t.Reason == e.Reason
}

// ConfigError is a Config that cannot work, or a key source that could not be loaded. It is met
// by the operator at start or reload, so it names the config key to change. Detail never holds a
// secret or key material: a bad secret is named by its index, never its value.
type ConfigError struct {
	Stage  string // "config" from Validate, "load" from reading and parsing keys in New or Reload
	Key    string // the config key at fault, e.g. "auth.secrets[1]" or "auth.jwks_file"
	Detail string
	Fix    string
	Err    error // an I/O or parse error underneath, if any
}

func (e *ConfigError) Error() string {
	s := fmt.Sprintf("auth %s: %s: %s", e.Stage, e.Key, e.Detail)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Fix != "" {
		s += " (fix: " + e.Fix + ")"
	}
	return s
}

// Unwrap returns the I/O or parse error underneath, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// Problem is the refusal as a person reading the logs meets it: code "auth.<reason>". A
// token's bytes are never in it.
func (e *Error) Problem() problem.Problem {
	return problem.Problem{Code: "auth." + string(e.Reason), Stage: string(e.Stage), Detail: e.Detail, Fix: e.Fix}
}

// Problem is the configuration fault as a person starting the node meets it: code
// "auth.config".
func (e *ConfigError) Problem() problem.Problem {
	d := e.Detail
	if e.Key != "" {
		d = e.Key + ": " + d
	}
	return problem.Problem{Code: "auth.config", Stage: e.Stage, Detail: d, Fix: e.Fix}
}
