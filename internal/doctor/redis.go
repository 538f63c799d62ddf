package doctor

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/heraldrt/herald/internal/config"
	redisstore "github.com/heraldrt/herald/internal/store/redis"
)

// redisURLKey names the key and variable of the Redis URL, for a fix.
const redisURLKey = "redis.url (HERALD_REDIS_URL)"

// minRedisMajor is the oldest Redis Herald supports (docs/OPERATIONS.md, Many nodes).
const minRedisMajor = 7

// checkRedis reports the redis.* checks against the Redis the nodes share, asking only what
// reads: PING, INFO, CONFIG GET, CLUSTER INFO and CLUSTER KEYSLOT.
func checkRedis(ctx context.Context, r *Report, c *config.Config) {
	prefix := c.Redis.Prefix
	braced := strings.ContainsAny(prefix, "{}")
	if braced {
		// The client refuses it; the other checks do not depend on it, and key_layout says why.
		prefix = redisstore.DefaultPrefix
	}
	client, err := redisstore.Dial(ctx, redisstore.Config{URL: c.Redis.URL, Prefix: prefix})
	if err != nil {
		fix := "check that Redis is up and reachable from this host"
		if u, perr := url.Parse(c.Redis.URL); perr == nil && u.Hostname() != "" {
			port := u.Port()
			if port == "" {
				port = "6379"
			}
			fix = fmt.Sprintf("check that Redis answers at %s: redis-cli -h %s -p %s ping", u.Host, u.Hostname(), port)
		}
		r.fail("redis.connect", "", err.Error(), fix+"; the URL is "+redisURLKey)
		return
	}
	defer client.Close()

	servers := client.Inspect(ctx)
	var addrs []string
	answered := true
	for _, s := range servers {
		addrs = append(addrs, s.Addr)
		if s.Err != nil {
			answered = false
			r.fail("redis.connect", s.Addr, s.Err.Error(), fmt.Sprintf("check that Redis answers at %s, and that the URL's user may run INFO; the URL is %s", s.Addr, redisURLKey))
		}
	}
	if !answered {
		return
	}
	r.ok("redis.connect", "", fmt.Sprintf("%d %s answered: %s", len(servers), plural(len(servers), "server", "servers"), strings.Join(addrs, ", ")))

	var versions []string
	for _, s := range servers {
		if !slices.Contains(versions, s.Version) {
			versions = append(versions, s.Version)
		}
		if major(s.Version) < minRedisMajor {
			r.fail("redis.version", s.Addr, fmt.Sprintf("%s runs Redis %s; Herald needs %d or newer (its scripts and streams use commands and options from 7)", s.Addr, s.Version, minRedisMajor),
				fmt.Sprintf("upgrade Redis at %s to %d or newer", s.Addr, minRedisMajor))
		}
	}
	if len(r.Find("redis.version", "")) == 0 {
		r.ok("redis.version", "", fmt.Sprintf("Redis %s: %d or newer", strings.Join(versions, ", "), minRedisMajor))
	}

	checkRedisCluster(r, client, servers)
	checkEviction(r, servers)

	switch {
	case braced:
		r.fail("redis.key_layout", "", fmt.Sprintf("redis.prefix %q holds a brace, which would move the hash tag of every key: on a Cluster, the keys a script takes together would land in different slots", c.Redis.Prefix),
			"set redis.prefix (HERALD_REDIS_PREFIX) to letters, digits, - or _, e.g. redis: {prefix: herald}")
	case client.Cluster():
		if err := client.CheckLayout(ctx); err != nil {
			r.fail("redis.key_layout", "", err.Error(), "set redis.prefix (HERALD_REDIS_PREFIX) to letters, digits, - or _; and let the URL's user run CLUSTER KEYSLOT")
			return
		}
		r.ok("redis.key_layout", "", fmt.Sprintf("every group of keys under prefix %q that a script takes together hashes to one slot", prefix))
	default:
		r.ok("redis.key_layout", "", fmt.Sprintf("one server holds every key under prefix %q, which holds no brace; hash tags matter only on a Cluster", prefix))
	}
}

// checkRedisCluster reports redis.cluster: one server or a Cluster, and a Cluster's slots all
// served.
func checkRedisCluster(r *Report, client *redisstore.Client, servers []redisstore.Server) {
	if !client.Cluster() {
		r.ok("redis.cluster", "", "one server, not a Redis Cluster")
		return
	}
	bad := false
	for _, s := range servers {
		if s.ClusterState != "ok" {
			bad = true
			r.fail("redis.cluster", s.Addr, fmt.Sprintf("%s reports cluster_state %q: some slots are not served, and commands on their keys fail", s.Addr, s.ClusterState),
				fmt.Sprintf("redis-cli -h %s cluster info; then assign or recover the slots: redis-cli --cluster check %s, redis-cli --cluster fix %s", hostOf(s.Addr), s.Addr, s.Addr))
		}
	}
	if !bad {
		r.ok("redis.cluster", "", fmt.Sprintf("a Redis Cluster of %d nodes, every one reporting cluster_state ok", len(servers)))
	}
}

// checkEviction reports redis.maxmemory_policy: Herald's keys are its state, and an evicted key
// is lost state (docs/OPERATIONS.md, Many nodes).
func checkEviction(r *Report, servers []redisstore.Server) {
	subject := func(s redisstore.Server) string {
		if len(servers) == 1 {
			return ""
		}
		return s.Addr
	}
	warned := false
	for _, s := range servers {
		switch {
		case s.PolicyErr != nil:
			warned = true
			r.warn("redis.maxmemory_policy", subject(s), fmt.Sprintf("maxmemory-policy of %s could not be read (%v); it must be noeviction", s.Addr, s.PolicyErr),
				"check it with the provider's console or CONFIG GET maxmemory-policy, and set it to noeviction")
		case s.MaxmemoryPolicy != "noeviction":
			warned = true
			r.warn("redis.maxmemory_policy", subject(s), fmt.Sprintf("maxmemory-policy of %s is %s: under memory pressure Redis evicts keys, and Herald's keys are its state (positions, subscriptions, presence, the streams between nodes)", s.Addr, s.MaxmemoryPolicy),
				fmt.Sprintf("redis-cli -h %s config set maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf", hostOf(s.Addr)))
		}
	}
	if !warned {
		r.ok("redis.maxmemory_policy", "", "maxmemory-policy is noeviction")
	}
}

// major reads the major version from "7.2.4"; 0 when there is none.
func major(version string) int {
	n, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	return n
}

func hostOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return strings.Trim(addr[:i], "[]") + " -p " + addr[i+1:]
	}
	return addr
}
