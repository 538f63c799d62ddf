package doctor

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
)

// redisConf is a config whose Redis is at u.
func redisConf(u, prefix string) string {
	return open + fmt.Sprintf("redis:\n  url: %s\n  prefix: %s\n", strconv.Quote(u), strconv.Quote(prefix))
}

// TestRedisDown: a URL where nothing listens fails redis.connect with the command that tells
// whether Redis answers there, and checks nothing else of Redis.
func TestRedisDown(t *testing.T) {
	const password = "Redis-Secret-Not-Shown-5"
	port := closedPort(t)
	r := run(t, redisConf("redis://:"+password+"@127.0.0.1:"+port+"/0", "herald"), nil, password)
	want(t, r, "redis.connect", "", Fail, "redis-cli -h 127.0.0.1 -p "+port+" ping", "redis.url")
	for _, id := range []string{"redis.version", "redis.cluster", "redis.maxmemory_policy", "redis.key_layout"} {
		none(t, r, id)
	}
	if !r.Failed() {
		t.Error("the report did not fail")
	}
}

func TestRedisHealthy(t *testing.T) {
	r := run(t, redisConf(testenv.RedisURL(t), "herald-doctor-test"), nil)
	for _, id := range []string{"redis.connect", "redis.version", "redis.cluster", "redis.key_layout"} {
		want(t, r, id, "", OK)
	}
	if c := want(t, r, "redis.cluster", "", OK); !strings.Contains(c.Detail, "not a Redis Cluster") {
		t.Errorf("redis.cluster detail %q, want one server", c.Detail)
	}
}

func TestRedisCluster(t *testing.T) {
	r := run(t, redisConf(testenv.RedisClusterURL(t), "herald-doctor-test"), nil)
	if c := want(t, r, "redis.cluster", "", OK); !strings.Contains(c.Detail, "Redis Cluster of") {
		t.Errorf("redis.cluster detail %q, want a Cluster", c.Detail)
	}
	if c := want(t, r, "redis.key_layout", "", OK); !strings.Contains(c.Detail, "one slot") {
		t.Errorf("redis.key_layout detail %q, want every group in one slot", c.Detail)
	}
	if c := want(t, r, "redis.connect", "", OK); !strings.Contains(c.Detail, "servers answered") {
		t.Errorf("redis.connect detail %q, want every server of the Cluster", c.Detail)
	}
}

// TestRedisEvicts runs a Redis of its own that evicts keys under memory pressure.
func TestRedisEvicts(t *testing.T) {
	port := closedPort(t)
	cmd := exec.Command(testenv.RedisServer(t), "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--maxmemory-policy", "allkeys-lru")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for !pings("127.0.0.1:" + port) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %s did not answer within 10s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := run(t, redisConf("redis://127.0.0.1:"+port+"/0", "herald"), nil)
	c := want(t, r, "redis.maxmemory_policy", "", Warn, "config set maxmemory-policy noeviction", "redis.conf")
	if !strings.Contains(c.Detail, "allkeys-lru") {
		t.Errorf("detail %q does not name the policy", c.Detail)
	}
	if r.Failed() {
		t.Errorf("a warning failed the report:\n%s", text(r))
	}
}

func pings(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.TrimSpace(line) == "+PONG"
}

// TestRedisPrefixWithABrace: a brace in the prefix would move every key's hash tag. The config
// refuses it, and the key layout says what it would do.
func TestRedisPrefixWithABrace(t *testing.T) {
	r := run(t, redisConf(testenv.RedisURL(t), "a{b"), nil)
	want(t, r, "config.values", "redis.prefix", Fail, "HERALD_REDIS_PREFIX")
	want(t, r, "redis.key_layout", "", Fail, "redis.prefix")
	want(t, r, "redis.connect", "", OK)
}
