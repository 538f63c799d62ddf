package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The nodes' counters of items between them, by kind (channel, table, presence): one per item
// and destination node on the sending side, one per item on the receiving side.
const (
	metricItemsSent     = "herald_cluster_items_sent_total"
	metricItemsReceived = "herald_cluster_items_received_total"
)

// clusterCounters are the items the nodes sent to each other and received, summed over the
// nodes, by kind. ok is false when no node exposes them (nodes without Redis).
type clusterCounters struct {
	sent, received map[string]int64
	ok             bool
}

// readClusterCounters reads the counters from every node's /metrics. A node that does not
// answer makes it fail: a sum that misses a node would read as fewer items.
func readClusterCounters(ctx context.Context, bases []string) (clusterCounters, error) {
	c := clusterCounters{sent: map[string]int64{}, received: map[string]int64{}}
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, base := range bases {
		if err := scrapeItems(ctx, hc, httpBase(base), &c); err != nil {
			return c, fmt.Errorf("bench: read the items between nodes from %s/metrics: %w", httpBase(base), err)
		}
	}
	return c, nil
}

func scrapeItems(ctx context.Context, hc *http.Client, base string, c *clusterCounters) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var into map[string]int64
		switch {
		case strings.HasPrefix(line, metricItemsSent+"{"):
			into = c.sent
		case strings.HasPrefix(line, metricItemsReceived+"{"):
			into = c.received
		default:
			continue
		}
		kind, value, ok := parseKindSample(line)
		if !ok {
			return fmt.Errorf("unreadable sample %q", line)
		}
		into[kind] += value
		c.ok = true
	}
	return sc.Err()
}

// parseKindSample reads `name{kind="channel"} 12` (integer counters, which Prometheus's text
// format may print as 1.2e+06).
func parseKindSample(line string) (kind string, value int64, ok bool) {
	_, rest, ok := strings.Cut(line, `kind="`)
	if !ok {
		return "", 0, false
	}
	kind, rest, ok = strings.Cut(rest, `"`)
	if !ok {
		return "", 0, false
	}
	_, num, ok := strings.Cut(rest, "} ")
	if !ok {
		return "", 0, false
	}
	fields := strings.Fields(num)
	if len(fields) == 0 {
		return "", 0, false
	}
	f, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", 0, false
	}
	return kind, int64(f), true
}

// sub is c minus an earlier reading: what was counted between them.
func (c clusterCounters) sub(earlier clusterCounters) (sent, received map[string]int64) {
	sent, received = map[string]int64{}, map[string]int64{}
	for k, v := range c.sent {
		if d := v - earlier.sent[k]; d != 0 {
			sent[k] = d
		}
	}
	for k, v := range c.received {
		if d := v - earlier.received[k]; d != 0 {
			received[k] = d
		}
	}
	return sent, received
}
