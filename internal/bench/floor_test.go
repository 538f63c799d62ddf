package bench

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFloor runs a floor's server and client in this process: each message reaches as many
// subscribers as its group names, and the run ends done with every one counted.
func TestFloor(t *testing.T) {
	for _, tc := range []struct {
		name                string
		subs, events, group int
		rate                float64
		want                int64
	}{
		{"every subscriber", 5, 20, 0, 0, 100},
		{"groups in turn", 5, 7, 2, 0, 14},
		{"group past the subscribers", 3, 4, 10, 0, 12},
		// Paced slower than the drain: the quiet between messages is not taken for the end.
		{"paced past the drain", 2, 3, 0, 2, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := FloorConfig{Subs: tc.subs, Events: tc.events, Group: tc.group, Rate: tc.rate, Drain: 300 * time.Millisecond}
			pr, pw := io.Pipe()
			served := make(chan error, 1)
			go func() { served <- FloorServe(ctx, cfg, pw); pw.Close() }()
			addr, err := bufio.NewReader(pr).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, pr)
			cfg.Addr, cfg.ServerPID = strings.TrimSpace(addr), os.Getpid()
			rep, err := Floor(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-served; err != nil {
				t.Fatalf("server: %v", err)
			}
			if rep.Stopped != StoppedDone || rep.Expected != tc.want || rep.Received != tc.want {
				t.Fatalf("stopped %s, received %d of %d; want done, %d", rep.Stopped, rep.Received, rep.Expected, tc.want)
			}
		})
	}
}

func TestFloorConfigValidate(t *testing.T) {
	for _, c := range []FloorConfig{{Subs: 0, Events: 1}, {Subs: 1, Events: 0}, {Subs: 1, Events: 1, Rate: -1}, {Subs: 1, Events: 1, Group: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (FloorConfig{Subs: 1, Events: 1}).Validate(); err != nil {
		t.Errorf("a valid run refused: %v", err)
	}
}

// TestPredatesPolicy: the refusal of a build from before the policy gate, as it prints it, is
// recognised, and a node's other failures are not.
func TestPredatesPolicy(t *testing.T) {
	old := "herald serve: config: policy (/tmp/herald-bench-1/herald.yaml:1): unknown key (fix: remove it, or correct its name. The top-level keys are listen, ...)"
	if !predatesPolicy(old) {
		t.Errorf("not recognised: %s", old)
	}
	for _, other := range []string{
		"herald serve: config: listen (/tmp/x.yaml:1): unknown key (fix: ...)",
		"herald serve: policy: tables.public.t.row: undeclared reference to 'rw' (1:1)",
	} {
		if predatesPolicy(other) {
			t.Errorf("taken for an old build: %s", other)
		}
	}
}
