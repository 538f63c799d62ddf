package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// Beacon is a value one node announces and the others read, that lives only as long as its
// announcer renews it: which node replicates the database, and from where its stream went
// live. Announce is a SET with a TTL, Read a GET.
type Beacon struct {
	c   *Client // read-only
	key string  // read-only
}

// NewBeacon returns the beacon called name on c.
func NewBeacon(c *Client, name string) *Beacon {
	return &Beacon{c: c, key: c.key("b", "{b:"+name+"}")}
}

// Announce sets the beacon to value for ttl.
func (b *Beacon) Announce(ctx context.Context, value string, ttl time.Duration) error {
	cmd := b.c.rc.B().Set().Key(b.key).Value(value).Px(ttl).Build()
	if err := b.c.rc.Do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("beacon %s: announce: %w", b.key, err)
	}
	return nil
}

// Read returns the beacon's value; ok is false when nobody announces it.
func (b *Beacon) Read(ctx context.Context) (value string, ok bool, err error) {
	v, err := b.c.rc.Do(ctx, b.c.rc.B().Get().Key(b.key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("beacon %s: read: %w", b.key, err)
	}
	return v, true, nil
}
