package sse

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/auth"
	"github.com/heraldrt/herald/internal/heraldv1"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
)

// kept are ended streams' subscriptions, by session id, for a reconnect whose Last-Event-ID
// names the stream (wire.EventID's long form) to take them up: each subscription named in the
// id resumes after its position there, exactly as a subscribe with from does. An entry lives
// for the window and is taken once; past max entries the oldest is let go. Safe for
// concurrent use.
type kept struct {
	window time.Duration // read-only
	max    int           // read-only
	now    func() time.Time

	mu      sync.Mutex
	streams map[string]*keptStream // guarded by mu
	order   []keptRef              // guarded by mu: when each was kept, oldest first; entries taken meanwhile stay until they reach the front
}

type keptStream struct {
	owner string            // the identity the stream was opened for (ownerOf)
	defs  []*wire.Subscribe // its subscriptions' subscribe frames, without ids or from
	at    time.Time
}

type keptRef struct {
	session string
	at      time.Time
}

func newKept(window time.Duration, max int) *kept {
	if window <= 0 {
		return nil
	}
	if max <= 0 {
		max = 10000
	}
	return &kept{window: window, max: max, now: time.Now, streams: map[string]*keptStream{}}
}

// ownerOf is the key of the identity a kept stream belongs to: a reconnect must prove the same.
func ownerOf(id auth.Identity) string {
	if id.Anonymous {
		return "\x00anonymous"
	}
	return id.Subject
}

// keep records an ended stream's subscriptions. A stream with none is not kept.
func (k *kept) keep(session, owner string, defs []*wire.Subscribe) {
	if k == nil || len(defs) == 0 {
		return
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(now)
	for len(k.streams) >= k.max && len(k.order) > 0 {
		k.dropFrontLocked()
	}
	k.streams[session] = &keptStream{owner: owner, defs: defs, at: now}
	k.order = append(k.order, keptRef{session, now})
}

// take returns and forgets the stream kept under session, if it is there, within the window,
// and was opened for owner: another identity gets nothing, as if it were never kept.
func (k *kept) take(session, owner string) *keptStream {
	if k == nil {
		return nil
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(now)
	ks := k.streams[session]
	if ks == nil || ks.owner != owner {
		return nil
	}
	delete(k.streams, session)
	return ks
}

// len is how many streams are kept.
func (k *kept) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.streams)
}

func (k *kept) expireLocked(now time.Time) {
	for len(k.order) > 0 && now.Sub(k.order[0].at) > k.window {
		k.dropFrontLocked()
	}
}

// dropFrontLocked lets go of the oldest entry of order, and of its stream if it is still the
// one kept then (not taken, nor kept again since).
func (k *kept) dropFrontLocked() {
	ref := k.order[0]
	k.order[0] = keptRef{}
	k.order = k.order[1:]
	if ks := k.streams[ref.session]; ks != nil && ks.at.Equal(ref.at) {
		delete(k.streams, ref.session)
	}
	if len(k.order) == 0 {
		k.order = nil // let the backing array go
	}
}

// def returns the kept subscribe frame of sub.
func (ks *keptStream) def(sub string) *wire.Subscribe {
	if ks == nil {
		return nil
	}
	for _, d := range ks.defs {
		if d.Sub == sub {
			return d
		}
	}
	return nil
}

// resume takes up, on c, the subscriptions the Last-Event-ID last names, other than urlSub
// (the URL's, already subscribed): each resumes after its position in last, from the stream
// kept under last's session, here or, when the session names another node, there (fetchKept,
// with the reconnect's own token). One that cannot be taken up is ended at once with an
// unprompted unsubscribed saying why, so the client never believes a subscription live that is
// not: not_found when the stream is not kept (its window passed, its node is gone, or another
// identity asks), and a subscription's own refusal otherwise (a pattern, which has no one
// position; a policy that no longer allows it). A subscription whose subscribed never reached
// the client is not in last, and is not taken up: the client subscribes to it again.
func (h *Handler) resume(ctx context.Context, c *heraldv1.Conn, last *wire.EventID, owner, token, urlSub string) {
	ks := h.kept.take(last.Session, owner)
	if node := session.NodeOf(last.Session); ks == nil && h.cfg.Peers != nil && node != "" && node != h.cfg.Node {
		ks = h.fetchKept(ctx, node, last.Session, token)
	}
	for _, sp := range last.Subs {
		if sp.Sub == urlSub {
			continue
		}
		d := ks.def(sp.Sub)
		if d == nil {
			c.Send(&wire.Unsubscribed{Sub: sp.Sub, Code: wire.CodeNotFound, Message: fmt.Sprintf(
				"the stream's subscriptions are no longer kept (limits.sse_resume_window), so %q cannot resume; subscribe again", sp.Sub)})
			continue
		}
		f := *d
		f.From = sp.Pos
		switch {
		case f.Durable:
			// A durable subscription resumes from its own queue, not from a position.
			f.From = wire.Position{}
		case f.Snapshot && f.From.IsZero():
			// Taken up before its live: it reads the rows again.
		case f.Snapshot:
			// After its live: the client holds the view at its position, and resumes.
			f.Snapshot = false
		case f.From.IsZero() || strings.ContainsAny(f.Channel, "*"):
			c.Send(&wire.Unsubscribed{Sub: sp.Sub, Code: wire.CodeBadPosition, Message: fmt.Sprintf(
				"subscription %q spans channels, so it has no one position to resume from; subscribe again, and re-read what it shows", sp.Sub)})
			continue
		}
		if we := c.Subscribe(ctx, &f); we != nil {
			c.Send(&wire.Unsubscribed{Sub: sp.Sub, Code: we.Code, Message: we.Message})
		}
	}
}

// keptPath is the path under which a node hands over a stream it keeps to the node a
// reconnect reached: POST /v1/sse/{session}/kept, with the reconnect's token.
const keptPath = "/kept"

// maxKeptBytes bounds a kept stream as one node hands it to another: its subscribe frames, at
// most limits.max_subscriptions of them, each within limits.max_frame_bytes.
const maxKeptBytes = 8 << 20

// keptBody is what Kept answers: the kept stream's subscribe frames, as clients send them.
type keptBody struct {
	Subs []json.RawMessage `json:"subs"`
}

// Kept serves POST /v1/sse/{session}/kept: it hands the stream this node keeps under session
// to the caller (another node, which a reconnect reached), and forgets it, when the request's
// token is the stream's identity's; not_found otherwise, whether or not one is kept. It grants
// nothing a client does not have: the subscribe frames are the ones its own identity sent.
func (h *Handler) Kept(w http.ResponseWriter, r *http.Request) {
	ident, err := h.auth.Authenticate(bearer(r))
	if err != nil {
		heraldv1.WriteHTTPError(w, authError(err))
		return
	}
	ks := h.kept.take(r.PathValue("session"), ownerOf(ident))
	if ks == nil {
		heraldv1.WriteHTTPError(w, &wire.Error{Code: wire.CodeNotFound, Message: "this node keeps no such stream for this identity"})
		return
	}
	var body keptBody
	for _, d := range ks.defs {
		f := *d
		f.ID = "kept" // a subscribe frame has an id; the taker clears it
		b, err := wire.AppendFrame(nil, &f)
		if err != nil {
			continue // a kept frame was decoded from a client's, and encodes
		}
		body.Subs = append(body.Subs, b)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// fetchKept asks node for the stream it keeps under session, with the reconnect's token; nil
// when it keeps none for that identity, or cannot be asked (logged, once per interval).
func (h *Handler) fetchKept(ctx context.Context, node, session, token string) *keptStream {
	fail := func(err error) *keptStream {
		if ctx.Err() == nil {
			h.forwardLog.Warn("kept\x00"+node, "sse: the node that kept a stream could not hand it over; its subscriptions are told not_found",
				slog.String("node", node), slog.String("err", err.Error()))
		}
		return nil
	}
	base, err := h.cfg.Peers.URL(ctx, node)
	if err != nil {
		return fail(err)
	}
	if base == "" {
		return nil // the node is gone, and what it kept with it
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/v1/sse/"+url.PathEscape(session)+keptPath, nil)
	if err == nil && req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		err = fmt.Errorf("%q is not an http or https URL", base)
	}
	if err != nil {
		return fail(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(ForwardedHeader, h.forwardedBy())
	resp, err := h.client.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxKeptBytes+1))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("answered %d: %s", resp.StatusCode, bytes.TrimSpace(raw[:min(len(raw), 200)]))
	}
	if err == nil && len(raw) > maxKeptBytes {
		err = fmt.Errorf("answered more than %d bytes", maxKeptBytes)
	}
	var body keptBody
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err != nil {
		return fail(err)
	}
	ks := &keptStream{}
	for _, b := range body.Subs {
		f, err := wire.Decode(b, maxKeptBytes)
		if err != nil {
			return fail(fmt.Errorf("a kept subscription does not decode: %w", err))
		}
		d, ok := f.(*wire.Subscribe)
		if !ok {
			return fail(fmt.Errorf("a kept subscription is a %T, not a subscribe", f))
		}
		d.ID = ""
		ks.defs = append(ks.defs, d)
	}
	return ks
}
