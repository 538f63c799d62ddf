package redis

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestDialRefuses(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"no URL":           {Config{}, "no URL"},
		"brace in prefix":  {Config{URL: "redis://127.0.0.1:1", Prefix: "a{b"}, "brace"},
		"not a redis URL":  {Config{URL: "http://127.0.0.1:1"}, "not a Redis URL"},
		"nobody listening": {Config{URL: "redis://127.0.0.1:1", Timeout: 200e6}, "connect"},
		"malformed URL":    {Config{URL: "redis://herald:" + urlPassword + "%zz@127.0.0.1:1"}, "not a Redis URL"},
		"escape in the password": {Config{URL: "redis://herald:" + urlPassword[:4] + "%" + urlPassword[4:] + "@127.0.0.1:1"},
			"malformed percent-escape in its password"},
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
			if strings.Contains(err.Error(), urlPassword) || strings.Contains(err.Error(), "%"+urlPassword[4:6]) {
				t.Errorf("Dial's error shows the URL's password, or part of it: %v", err)
			}
		})
	}
}

// urlPassword is a password in a URL that no error may show.
const urlPassword = "redis-pw-Qx81"

// runClient runs c.Run until the test ends.
func runClient(t *testing.T, c *Client) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return 10s after its context ended")
		}
	})
}

// waitHealthy waits until c.Healthy() satisfies ok, and returns what it last said.
func waitHealthy(t *testing.T, c *Client, what string, ok func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := c.Healthy()
		if ok(err) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s; Healthy() = %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClientHealthy(t *testing.T) {
	srv := startOwnRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{URL: srv.url(), PingInterval: 20 * time.Millisecond, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Healthy(); err != nil {
		t.Fatalf("Healthy() right after Dial = %v, want nil", err)
	}
	runClient(t, c)
	srv.kill()
	err = waitHealthy(t, c, "Redis killed, still healthy", func(err error) bool { return err != nil })
	if !strings.Contains(err.Error(), srv.addr()) {
		t.Fatalf("Healthy() = %v, want the cause to name the node, %s", err, srv.addr())
	}
	srv.start()
	waitHealthy(t, c, "Redis back, still unhealthy", func(err error) bool { return err == nil })
}

func TestClientHealthyWithoutRun(t *testing.T) {
	targets(t, func(t *testing.T, url string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, Config{URL: url, PingInterval: 10 * time.Millisecond, Timeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		err = waitHealthy(t, c, "healthy long after Dial with no Run", func(err error) bool { return err != nil })
		if !strings.Contains(err.Error(), "Run is not running") {
			t.Fatalf("Healthy() = %v, want it to say Run is not running", err)
		}
		runClient(t, c) // every node of a Cluster pinged
		waitHealthy(t, c, "Run running, still unhealthy", func(err error) bool { return err == nil })
	})
}
