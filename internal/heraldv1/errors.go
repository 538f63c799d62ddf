package heraldv1

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/wire"
)

// errorFrame is the error frame that answers request id with err: err's own code, field and
// message when it is a client-facing error (a *wire.Error or a *fault.Error), and bad_frame
// naming field otherwise, as a producer's refusal of what the request named (a channel) is.
func errorFrame(id string, err error, field string) *wire.Error {
	we, ok := wire.AsError(err)
	if !ok {
		we = &wire.Error{Code: wire.CodeBadFrame, Field: field, Message: err.Error(), Err: err}
	}
	we.ID = id
	return we
}

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
