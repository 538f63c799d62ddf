package client

import (
	"math/rand/v2"
	"time"
)

// ReconnectDelay is how long to wait before reconnect attempt n (0 for the first retry):
// exponential backoff with full jitter, a uniformly random wait between 0 and
// min(30 s, 1 s × 2^n), as docs/PROTOCOL.md "Reconnecting" prescribes. The jitter is the
// point: clients dropped together (a node restart, a network blip) spread their returns over
// the whole window instead of arriving in waves that overflow the server's listen backlog.
// After close 4001 (too_many_connections) start at n = 3, a window of 8 s, so the wait is
// about 10 s at most as the protocol asks, still jittered.
func ReconnectDelay(n int) time.Duration {
	const base, ceiling = time.Second, 30 * time.Second
	window := ceiling
	if n < 5 {
		window = base << max(n, 0)
	}
	return rand.N(window + 1)
}
