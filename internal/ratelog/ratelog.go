// Package ratelog logs failures that can repeat at a client's rate (a dependency down, and every
// request that needs it failing) once per cause per interval: the first at once, and the rest
// counted, the next line of that cause saying how many were held back. A line is never lost
// for good: held-back ones are owed to the next line of their cause.
//
// A Limiter is safe for concurrent use. It starts no goroutine: it does its work on the
// caller's, under one short lock, and writes the line outside it.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is how often a cause is logged when Config.Interval is zero.
const DefaultInterval = 10 * time.Second

// maxCauses bounds the causes a Limiter remembers. Callers key causes by what failed (a
// site, a dependency), not by a client's input, so a few dozen is the norm; past the bound the
// oldest are forgotten, and a forgotten cause's next line goes out at once.
const maxCauses = 1024

// Config configures a Limiter. The zero value of each field means its default.
type Config struct {
	// Interval is the least time between two lines of one cause. Default DefaultInterval.
	Interval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Limiter logs each cause at most once per interval.
type Limiter struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu     sync.Mutex
	causes map[string]*cause // guarded by mu
}

// cause is one cause's record. Guarded by Limiter.mu.
type cause struct {
	last time.Time // when its last line went out
	held int       // lines held back since
}

// New returns a Limiter that writes to log.
func New(log *slog.Logger, cfg Config) *Limiter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Limiter{log: log, interval: cfg.Interval, now: cfg.Now, causes: map[string]*cause{}}
}

// Log writes msg with attrs at level, unless key's last line went out less than the interval
// ago: then it counts the line as held back, and the next line of key carries the count as
// "held_back". It reports whether it wrote.
func (l *Limiter) Log(level slog.Level, key, msg string, attrs ...slog.Attr) bool {
	if !l.log.Enabled(context.Background(), level) {
		return false
	}
	now := l.now()
	l.mu.Lock()
	c := l.causes[key]
	if c != nil && now.Sub(c.last) < l.interval {
		c.held++
		l.mu.Unlock()
		return false
	}
	held := 0
	if c == nil {
		if len(l.causes) >= maxCauses {
			l.forgetLocked(now)
		}
		c = &cause{}
		l.causes[key] = c
	} else {
		held = c.held
	}
	c.last, c.held = now, 0
	l.mu.Unlock()
	if held > 0 {
		attrs = append(attrs, slog.Int("held_back", held))
	}
	l.log.LogAttrs(context.Background(), level, msg, attrs...)
	return true
}

// Warn is Log at slog.LevelWarn.
func (l *Limiter) Warn(key, msg string, attrs ...slog.Attr) bool {
	return l.Log(slog.LevelWarn, key, msg, attrs...)
}

// forgetLocked makes room: it drops the causes whose interval has passed, whose held-back
// lines are then never told (their cause has been quiet for an interval at least), and every
// cause if that freed nothing. The caller holds mu.
func (l *Limiter) forgetLocked(now time.Time) {
	for k, c := range l.causes {
		if now.Sub(c.last) >= l.interval {
			delete(l.causes, k)
		}
	}
	if len(l.causes) >= maxCauses {
		clear(l.causes)
	}
}
