package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newLimiter(buf *bytes.Buffer, c *clock) *Limiter {
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	return New(log, Config{Interval: 10 * time.Second, Now: c.Now})
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestOncePerIntervalWithCount(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	l := newLimiter(&buf, c)
	for i := range 5 {
		wrote := l.Warn("redis", "redis down", slog.Int("i", i))
		if wrote != (i == 0) {
			t.Errorf("line %d: wrote %v, want %v", i, wrote, i == 0)
		}
	}
	if got := lines(&buf); len(got) != 1 || !strings.Contains(got[0], "i=0") || strings.Contains(got[0], "held_back") {
		t.Fatalf("first burst logged %q, want one line, the first, without held_back", got)
	}
	// Another cause is not held back by the first.
	l.Warn("pg", "pg down")
	if got := lines(&buf); len(got) != 1 || !strings.Contains(got[0], "pg down") {
		t.Fatalf("another cause logged %q, want its line", got)
	}
	c.add(9 * time.Second)
	if l.Warn("redis", "redis down") {
		t.Error("a line within the interval was written")
	}
	c.add(time.Second)
	if !l.Warn("redis", "redis down", slog.Int("i", 9)) {
		t.Error("the first line past the interval was held back")
	}
	if got := lines(&buf); len(got) != 1 || !strings.Contains(got[0], "held_back=5") || !strings.Contains(got[0], "level=WARN") {
		t.Fatalf("after the interval logged %q, want one WARN line with held_back=5", got)
	}
	c.add(time.Minute)
	l.Warn("redis", "redis down")
	if got := lines(&buf); len(got) != 1 || strings.Contains(got[0], "held_back") {
		t.Fatalf("after a quiet minute logged %q, want one line without held_back", got)
	}
}

func TestDisabledLevelCountsNothing(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), Config{})
	if l.Warn("k", "m") || buf.Len() != 0 {
		t.Fatalf("a disabled level wrote %q", buf.String())
	}
	if len(l.causes) != 0 {
		t.Errorf("a disabled level kept %d causes", len(l.causes))
	}
}

func TestCausesBounded(t *testing.T) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	l := newLimiter(&buf, c)
	for i := range 3 * maxCauses {
		if !l.Warn(fmt.Sprint("cause-", i), "m") {
			t.Fatalf("cause %d, new, was held back", i)
		}
		if len(l.causes) > maxCauses {
			t.Fatalf("%d causes remembered, more than %d", len(l.causes), maxCauses)
		}
	}
}

func TestConcurrent(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	c := &clock{t: time.Unix(1000, 0)}
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	l := New(log, Config{Interval: time.Hour, Now: c.Now})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Warn("k", "m")
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Errorf("%d lines for one cause within an interval, want 1", n)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
