package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/heraldrt/herald/internal/wire"
)

// PublishHTTP publishes through a node's HTTP API, POST /v1/publish, with an API key: how a
// backend publishes without holding a connection. baseURL is the node's URL (http://, https://,
// or ws:// and wss://, which mean the same host). hc nil means http.DefaultClient. A refusal is
// an *Error with the server's code (unauthorized for a wrong key, bad_frame, ...).
func PublishHTTP(ctx context.Context, hc *http.Client, baseURL, apiKey string, p Publication) (Position, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	u, err := httpEndpoint(baseURL, "/v1/publish")
	if err != nil {
		return Position{}, err
	}
	body, err := json.Marshal(struct {
		Channel string          `json:"channel"`
		Event   string          `json:"event,omitempty"`
		Data    json.RawMessage `json:"data"`
	}{p.Channel, p.Event, p.Data})
	if err != nil {
		return Position{}, fmt.Errorf("publish to %s: %w", p.Channel, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Position{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := hc.Do(req)
	if err != nil {
		return Position{}, fmt.Errorf("publish to %s: %w", p.Channel, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Position{}, fmt.Errorf("publish to %s: read the answer: %w", p.Channel, err)
	}
	if resp.StatusCode == http.StatusOK {
		// The answer is a published frame without an id (there is no request frame to echo),
		// which DecodeServer, strict about the id a socket reply requires, would refuse.
		var ok struct {
			Type wire.FrameType `json:"type"`
			Pos  wire.Position  `json:"pos"`
		}
		if err := json.Unmarshal(b, &ok); err != nil || ok.Type != wire.FramePublished || ok.Pos.IsZero() {
			return Position{}, fmt.Errorf("publish to %s: HTTP 200 with an unexpected body %q", p.Channel, shorten(b))
		}
		return ok.Pos, nil
	}
	f, err := wire.DecodeServer(b, 0)
	if err != nil {
		return Position{}, fmt.Errorf("publish to %s: HTTP %d: %q", p.Channel, resp.StatusCode, shorten(b))
	}
	e, ok := f.(*wire.Error)
	if !ok {
		return Position{}, unexpected("publish", f)
	}
	if e.Status == 0 {
		e.Status = resp.StatusCode
	}
	return Position{}, newError("publish", "", e)
}

// httpEndpoint is Endpoint for plain HTTP requests.
func httpEndpoint(rawURL, path string) (string, error) {
	u, err := Endpoint(rawURL, path)
	if err != nil {
		return "", err
	}
	// Endpoint gave ws or wss; the API is the same host over http or https. A base URL that
	// carried a WebSocket path keeps only its host.
	scheme, rest, _ := strings.Cut(u, "://")
	host, _, _ := strings.Cut(rest, "/")
	if scheme == "wss" {
		return "https://" + host + path, nil
	}
	return "http://" + host + path, nil
}

func shorten(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
