package redis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/heraldrt/herald/internal/durable"
	"github.com/redis/rueidis"
)

// Server is what one Redis server says about itself, as `herald doctor` reports it.
type Server struct {
	// Addr is the server's host:port.
	Addr string
	// Version is INFO's redis_version, e.g. "7.2.4".
	Version string
	// Cluster says the server runs in Cluster mode (cluster_enabled), and ClusterState is then
	// CLUSTER INFO's cluster_state: "ok" while every slot is served.
	Cluster      bool
	ClusterState string
	// MaxmemoryPolicy is the maxmemory-policy setting; empty when CONFIG GET was refused
	// (managed services often rename or forbid CONFIG), and PolicyErr then says why.
	MaxmemoryPolicy string
	PolicyErr       error
	// Err says why the server did not answer INFO; the other fields are then empty.
	Err error
}

// Inspect asks every server of the client (one, or each node of a Cluster) what it is, at
// once, each question bounded by ctx. It only reads: INFO, CONFIG GET and CLUSTER INFO. The
// servers come sorted by address.
func (c *Client) Inspect(ctx context.Context) []Server {
	nodes := c.rc.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	out := make([]Server, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { out[i] = inspectNode(ctx, addr, nodes[addr]) })
	}
	wg.Wait()
	return out
}

func inspectNode(ctx context.Context, addr string, n rueidis.Client) Server {
	s := Server{Addr: addr}
	info, err := n.Do(ctx, n.B().Info().Section("server", "cluster").Build()).ToString()
	if err != nil {
		s.Err = fmt.Errorf("INFO: %w", err)
		return s
	}
	fields := infoFields(info)
	s.Version = fields["redis_version"]
	s.Cluster = fields["cluster_enabled"] == "1"
	if s.Cluster {
		ci, err := n.Do(ctx, n.B().ClusterInfo().Build()).ToString()
		if err != nil {
			s.ClusterState = "unknown (CLUSTER INFO: " + err.Error() + ")"
		} else {
			s.ClusterState = infoFields(ci)["cluster_state"]
		}
	}
	policy, err := n.Do(ctx, n.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	switch {
	case err != nil:
		s.PolicyErr = fmt.Errorf("CONFIG GET maxmemory-policy: %w", err)
	case policy["maxmemory-policy"] == "":
		s.PolicyErr = fmt.Errorf("CONFIG GET maxmemory-policy answered nothing")
	default:
		s.MaxmemoryPolicy = policy["maxmemory-policy"]
	}
	return s
}

// infoFields reads the "name:value" lines of an INFO or CLUSTER INFO reply. Over RESP3 the
// reply is a verbatim string, which the client hands over with its format ("txt:") in front.
func infoFields(text string) map[string]string {
	text = strings.TrimPrefix(text, "txt:")
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// CheckLayout asks a Cluster which slot each key of a sample of every group that must share
// one hashes to (an interest owner's keys, a channel's, a presence shard's with one of its
// channels', the node registry's), built by the functions the stores build them with, and
// reports the first group whose keys do not share a slot: every script of the stores runs on
// one slot, and a Cluster refuses one whose keys are spread. It only reads (CLUSTER KEYSLOT).
// On a server that is not a Cluster every key is on the one server, and there is nothing to
// ask.
func (c *Client) CheckLayout(ctx context.Context) error {
	if !c.Cluster() {
		return nil
	}
	for _, g := range c.layoutGroups() {
		slot := int64(-1)
		for _, key := range g.keys {
			n, err := c.rc.Do(ctx, c.rc.B().ClusterKeyslot().Key(key).Build()).AsInt64()
			if err != nil {
				return fmt.Errorf("CLUSTER KEYSLOT %s: %w", key, err)
			}
			if slot >= 0 && n != slot {
				return fmt.Errorf("the keys of %s are in more than one slot (%s in %d, %s in %d): their hash tags do not hold", g.name, g.keys[0], slot, key, n)
			}
			slot = n
		}
	}
	return nil
}

// Cluster says the client speaks to a Redis Cluster.
func (c *Client) Cluster() bool { return c.rc.Mode() == rueidis.ClientModeCluster }

// layoutGroup is keys that must share a Cluster slot.
type layoutGroup struct {
	name string
	keys []string
}

// layoutGroups are a sample of each group of keys that must share a slot (see the package
// doc's key layout), from the stores' own key functions.
func (c *Client) layoutGroups() []layoutGroup {
	const owner, channel, node = "t:public.items", "docs/a/inbox", "node-a"
	in := &Interest{c: c}
	ownerKeys, _ := in.ownerKeys(owner)
	pr := &Presence{c: c}
	return []layoutGroup{
		{"an interest owner", append(ownerKeys, in.tokenKey(owner, "*"), in.socketKey(owner, node), c.key("m", ownerTag(owner)))},
		{"a channel", (&Broker{c: c}).keys(channel)},
		{"a presence shard", append(pr.channelKeys(channel), pr.leaseKey(channel))},
		{"the node registry", (&Nodes{c: c}).keys()},
		{"a durable subscription's holder", (&Durable{c: c}).keys(durable.Key{Subject: "alice", App: "web", Name: "jobs"})},
	}
}
