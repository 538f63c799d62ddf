package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/testenv"
)

// targets are the servers a test runs against: the private Redis always, and the private
// Cluster too. Both are required under CI=true.
func targets(t *testing.T, run func(t *testing.T, url string)) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		run(t, testenv.RedisURL(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		run(t, testenv.RedisClusterURL(t))
	})
}

// dial returns a client whose keys start with a prefix of their own, so tests run in parallel
// on one server, and deletes every key under it when the test ends.
func dial(t *testing.T, url string) *Client { return dialB(t, url) }

func dialB(t testing.TB, url string) *Client {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "herald-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, k := range keysUnder(t, ctx, c) {
			if err := c.rc.Do(ctx, c.rc.B().Del().Key(k).Build()).Error(); err != nil {
				t.Logf("cleanup: del %s: %v", k, err)
			}
		}
		c.Close()
	})
	return c
}

// keysUnder lists every key under c's prefix, on every node of a Cluster.
func keysUnder(t testing.TB, ctx context.Context, c *Client) []string {
	t.Helper()
	var keys []string
	for addr, node := range c.rc.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(c.prefix+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				if _, ok := rueidis.IsRedisErr(err); ok {
					break // a replica refusing SCAN
				}
				t.Fatalf("scan %s: %v", addr, err)
			}
			keys = append(keys, e.Elements...)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return keys
}
