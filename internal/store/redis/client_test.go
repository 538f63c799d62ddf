package redis

import (
	"context"
	"strings"
	"testing"
)

func TestDialRefuses(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"no URL":           {Config{}, "no URL"},
		"brace in prefix":  {Config{URL: "redis://127.0.0.1:1", Prefix: "a{b"}, "brace"},
		"not a redis URL":  {Config{URL: "http://127.0.0.1:1"}, "parse URL"},
		"nobody listening": {Config{URL: "redis://127.0.0.1:1", Timeout: 200e6}, "connect"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Dial(ctx, tc.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("Dial(%+v): no error", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Dial(%+v) = %v, want an error about %q", tc.cfg, err, tc.want)
			}
		})
	}
}
