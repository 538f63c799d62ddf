package client

import (
	"testing"
	"time"
)

func TestReconnectDelayIsFullJitter(t *testing.T) {
	for _, tt := range []struct {
		n      int
		window time.Duration
	}{{-1, time.Second}, {0, time.Second}, {1, 2 * time.Second}, {4, 16 * time.Second}, {5, 30 * time.Second}, {40, 30 * time.Second}} {
		var lo, hi time.Duration = tt.window, 0
		for range 2000 {
			d := ReconnectDelay(tt.n)
			if d < 0 || d > tt.window {
				t.Fatalf("ReconnectDelay(%d) = %v, outside [0, %v]", tt.n, d, tt.window)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Full jitter spreads over the whole window, not a band near its end.
		if lo > tt.window/10 || hi < tt.window*9/10 {
			t.Errorf("ReconnectDelay(%d) over 2000 draws spans [%v, %v]; want most of [0, %v]", tt.n, lo, hi, tt.window)
		}
	}
}
