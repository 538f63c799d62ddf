package heraldv1

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/channel"
	"github.com/heraldrt/herald/internal/wire"
)

// Refusal is the error frame that answers request id with err, and the one place herald.v1
// decides the code a client sees for a refusal a component made (a producer, a store, the
// server's adapters): a client-facing error (*fault.Error, *wire.Error) keeps its own code,
// field and message; the channel hub's refusals are named here; anything else is internal,
// its cause kept for the log and never sent. field names what the request named, for a
// grammar refusal (a channel, an event). The WebSocket and SSE transports and the HTTP publish
// API answer through it.
func Refusal(id string, err error, field string) *wire.Error {
	if we, ok := wire.AsError(err); ok {
		c := *we // a copy: err may be answered again, with another id
		c.ID = id
		return &c
	}
	we := &wire.Error{ID: id, Code: wire.CodeInternal, Err: err, Message: "the server failed to answer this request; retry, and report it if it persists"}
	var busy *channel.BusyError
	var ce *channel.Error
	switch {
	case errors.As(err, &busy):
		we.Code, we.Message = wire.CodeUnavailable, fmt.Sprintf(
			"the node is handing publications to subscribers more slowly than they are published (the fan-out queue stayed full for %s); retry with backoff, or publish less often", busy.Waited)
	case errors.Is(err, channel.ErrBroker):
		we.Code, we.Message = wire.CodeUnavailable, "the channel broker (the nodes' shared Redis) did not answer, and nothing was done; retry with backoff"
	case errors.Is(err, channel.ErrHubClosed):
		we.Code, we.Message = wire.CodeUnavailable, "the node is shutting down; publish to another node or retry"
	case errors.As(err, &ce):
		we.Code, we.Field, we.Message = wire.CodeBadFrame, field, ce.Error()
		if ce.Reason == channel.ReasonBadEvent {
			we.Field = "event"
		}
		if ce.Fix != "" {
			we.Message += "; " + ce.Fix
		}
	}
	return we
}

// errorFrame is Refusal for a request a session answers.
func errorFrame(id string, err error, field string) *wire.Error { return Refusal(id, err, field) }

// AuthError is the error frame for a token that did not verify: token_expired for one that has
// expired or is not valid yet (a fresh token cures both), unauthorized otherwise. At connect it
// is followed by the close code AuthCloseCode gives.
func AuthError(id string, err error) *wire.Error {
	var ae *auth.Error
	msg := "the token did not verify"
	if errors.As(err, &ae) {
		msg = ae.Detail
		if ae.Fix != "" {
			msg += "; " + ae.Fix
		}
	}
	code := wire.CodeUnauthorized
	if errors.Is(err, auth.ErrExpired) || errors.Is(err, auth.ErrNotYetValid) {
		code = wire.CodeTokenExpired
	}
	return &wire.Error{ID: id, Code: code, Field: "token", Message: msg}
}

// AuthCloseCode is the close code that follows AuthError's frame e at connect: 4100 with
// token_expired, 4101 otherwise, so the frame and the close always say the same.
func AuthCloseCode(e *wire.Error) wire.CloseCode {
	if e.Code == wire.CodeTokenExpired {
		return wire.CloseTokenExpired
	}
	return wire.CloseAuthFailed
}

// WriteHTTPError answers an HTTP request with e as an error frame and its status: a refused
// upgrade, a refused SSE stream or command, a refused publish.
func WriteHTTPError(w http.ResponseWriter, e *wire.Error) {
	b, err := wire.AppendFrame(nil, e)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"type": "error", "code": string(wire.CodeInternal)})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.StatusCode())
	_, _ = w.Write(b)
}
