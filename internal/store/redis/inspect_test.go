package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/heraldrt/herald/internal/testenv"
)

// TestInspect asks the private Redis and the private Cluster what they are: every node answers
// with its version, a Cluster says so and that its slots are served, and maxmemory-policy is
// read.
func TestInspect(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		servers := c.Inspect(ctx)
		wantCluster := strings.Contains(url, "addr=")
		if wantCluster && len(servers) < 3 || !wantCluster && len(servers) != 1 {
			t.Fatalf("Inspect found %d servers at %s", len(servers), url)
		}
		if c.Cluster() != wantCluster {
			t.Errorf("Cluster() = %v, want %v", c.Cluster(), wantCluster)
		}
		for _, s := range servers {
			if s.Err != nil {
				t.Fatalf("%s: %v", s.Addr, s.Err)
			}
			if s.Version == "" || s.Cluster != wantCluster {
				t.Errorf("%s: version %q cluster %v, want a version and cluster %v", s.Addr, s.Version, s.Cluster, wantCluster)
			}
			if wantCluster && s.ClusterState != "ok" {
				t.Errorf("%s: cluster_state %q, want ok", s.Addr, s.ClusterState)
			}
			if s.MaxmemoryPolicy == "" && s.PolicyErr == nil {
				t.Errorf("%s: no maxmemory-policy and no reason", s.Addr)
			}
		}
	})
}

// TestCheckLayout: the keys of every group the stores' scripts take together share a slot on
// the Cluster, as Redis counts it; and the check finds a group that does not.
func TestCheckLayout(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		c := dial(t, url)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.CheckLayout(ctx); err != nil {
			t.Fatalf("CheckLayout: %v", err)
		}
		for _, g := range c.layoutGroups() {
			if len(g.keys) < 2 {
				t.Errorf("group %s has %d keys: nothing to compare", g.name, len(g.keys))
			}
		}
	})
	t.Run("a prefix that moves the tag", func(t *testing.T) {
		c := dial(t, testenv.RedisClusterURL(t))
		// Dial refuses a brace in the prefix; set one behind its back to see the check fail.
		c.prefix = "{x"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := c.CheckLayout(ctx)
		if err == nil || !strings.Contains(err.Error(), "more than one slot") {
			t.Fatalf("CheckLayout with prefix %q = %v, want the keys found in more than one slot", c.prefix, err)
		}
	})
}
