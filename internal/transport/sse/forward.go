package sse

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/wire"
)

// Peers finds the other nodes of a cluster: where to hand a command for a stream another node
// holds. store/redis.Nodes is one, on the registry every node keeps itself in.
type Peers interface {
	// URL returns the base URL (http(s)://host:port) at which node serves, or "" when no live
	// node has that id. An error is a lookup that failed (the registry unreachable), never an
	// unknown node.
	URL(ctx context.Context, node string) (string, error)
}

// ForwardedHeader marks a command one node hands another; its value is the id of the node that
// handed it on. A node that is handed a command for a session it does not hold answers
// not_found rather than handing it on again, so a stale id bounces once, never in a loop. It
// grants nothing: the node that holds the session checks the request's token as it checks any
// other, so a client that sets it only keeps its own command from being handed on.
const ForwardedHeader = "Herald-Forwarded"

// maxRelayBytes bounds the answer to a command relayed back from the node that took it: a
// command is answered with no body (202) or one error frame.
const maxRelayBytes = 64 << 10

// ForwardOutcome is what became of a command this node handed, or tried to hand, to the node
// holding its stream. The same constant is the log attribute and the metric label.
type ForwardOutcome string

const (
	// ForwardRelayed: the holding node answered, and its answer was relayed, whatever it was.
	ForwardRelayed ForwardOutcome = "relayed"
	// ForwardUnknownNode: no live node has the id the session names: the node ended, and
	// its streams with it (404 not_found).
	ForwardUnknownNode ForwardOutcome = "unknown_node"
	// ForwardLookupFailed: the registry could not be asked (503 unavailable).
	ForwardLookupFailed ForwardOutcome = "lookup_failed"
	// ForwardUnreachable: the holding node did not answer: refused, timed out, or its
	// registered URL is not one (503 unavailable).
	ForwardUnreachable ForwardOutcome = "unreachable"
)

// ForwardOutcomes lists every ForwardOutcome, for metrics that show each one from the start.
var ForwardOutcomes = []ForwardOutcome{ForwardRelayed, ForwardUnknownNode, ForwardLookupFailed, ForwardUnreachable}

// forwardStats counts commands handed on, by outcome.
type forwardStats struct {
	relayed, unknown, lookup, unreachable atomic.Uint64
}

func (s *forwardStats) counter(o ForwardOutcome) *atomic.Uint64 {
	switch o {
	case ForwardRelayed:
		return &s.relayed
	case ForwardUnknownNode:
		return &s.unknown
	case ForwardLookupFailed:
		return &s.lookup
	default:
		return &s.unreachable
	}
}

// Forwards reports how many commands this node has handed on to the node holding their stream,
// by outcome, since it started.
func (h *Handler) Forwards() map[ForwardOutcome]uint64 {
	m := make(map[ForwardOutcome]uint64, len(ForwardOutcomes))
	for _, o := range ForwardOutcomes {
		m[o] = h.forwards.counter(o).Load()
	}
	return m
}

// newForwardClient returns the client that hands commands to other nodes. Its bounds: a dial
// fails in 2 s (a node that is down or cut off answers no sooner), the whole exchange in
// timeout. It keeps connections to each node alive between commands, and never follows a
// redirect or an environment proxy: nodes reach each other directly.
func newForwardClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// forward hands a command for a session of node, which is not this one, to node: the same
// path and query, the same body (read once, bounded as for a local command), the same
// Authorization and Content-Type, marked with ForwardedHeader; and relays its status,
// Content-Type and body. A node that cannot be found or reached is answered for it: not_found
// when no live node has its id, unavailable when the registry or the node did not answer.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, node string) {
	body, ok := readFrame(w, r, h.cfg.Session.MaxFrameBytes)
	if !ok {
		return
	}
	ctx := r.Context()
	base, err := h.cfg.Peers.URL(ctx, node)
	switch {
	case err != nil && ctx.Err() != nil:
		return // the client went away: nobody to answer
	case err != nil:
		h.forwardFailed(w, node, ForwardLookupFailed, err, &wire.Error{Code: wire.CodeUnavailable,
			Message: "the node holding this stream could not be looked up; retry with backoff, and if it persists open a new stream with GET /v1/sse"})
		return
	case base == "":
		h.forwardFailed(w, node, ForwardUnknownNode, nil, &wire.Error{Code: wire.CodeNotFound,
			Message: "node " + node + ", which held this stream, is no longer live, and the stream ended with it; open a new stream with GET /v1/sse and use its welcome's session"})
		return
	}
	target := strings.TrimSuffix(base, "/") + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err == nil && req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		err = errors.New("not an http or https URL")
	}
	if err != nil {
		h.forwardFailed(w, node, ForwardUnreachable, err, unreachable(node))
		return
	}
	for _, k := range []string{"Authorization", "Content-Type"} {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	req.Header.Set(ForwardedHeader, h.forwardedBy())
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		h.forwardFailed(w, node, ForwardUnreachable, err, unreachable(node))
		return
	}
	defer resp.Body.Close()
	h.forwards.relayed.Add(1)
	for _, k := range []string{"Content-Type", "Retry-After"} {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxRelayBytes))
}

// forwardedBy is ForwardedHeader's value: this node's id, or "1" for a node without one.
func (h *Handler) forwardedBy() string {
	if h.cfg.Node == "" {
		return "1"
	}
	return h.cfg.Node
}

func unreachable(node string) *wire.Error {
	return &wire.Error{Code: wire.CodeUnavailable,
		Message: "node " + node + ", which holds this stream, could not be reached; retry with backoff, and if it persists open a new stream with GET /v1/sse"}
}

// forwardFailed counts and logs a command that could not be handed on, and answers the client
// with we. err, the cause, goes to the log alone: it names addresses inside the cluster. The
// log says it once per outcome (and node, once the registry has named it) per interval, with
// how many it held back.
func (h *Handler) forwardFailed(w http.ResponseWriter, node string, o ForwardOutcome, err error, we *wire.Error) {
	h.forwards.counter(o).Add(1)
	if err != nil {
		// Keyed by the node only once the registry has vouched for it (unreachable): a
		// client names the node it likes, and a key must not be the client's to multiply.
		key := string(o)
		if o == ForwardUnreachable {
			key += "\x00" + node
		}
		h.forwardLog.Warn(key, "sse command not handed on", slog.String("node", node), slog.String("outcome", string(o)),
			slog.String("code", string(we.Code)), slog.String("err", err.Error()))
	}
	heraldv1.WriteHTTPError(w, we)
}
