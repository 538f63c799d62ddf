package problem

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

type owned struct{ stage, detail string }

func (e *owned) Error() string { return e.stage + ": " + e.detail }
func (e *owned) Problem() Problem {
	return Problem{Code: "test." + e.stage, Stage: e.stage, Detail: e.detail, Fix: "do the thing"}
}

func TestOfReadsThroughWrapping(t *testing.T) {
	err := fmt.Errorf("start: %w", fmt.Errorf("connect: %w", &owned{"slot", "the slot is lost"}))
	p, ok := Of(err)
	if !ok || p.Code != "test.slot" || p.Detail != "the slot is lost" || p.Fix != "do the thing" {
		t.Fatalf("Of = %+v, %v; want the wrapped error's problem", p, ok)
	}
	if _, ok := Of(errors.New("plain")); ok {
		t.Fatal("a plain error explained itself")
	}
	if _, ok := Of(nil); ok {
		t.Fatal("nil explained itself")
	}
}

func TestAttr(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Error("failed", Attr(fmt.Errorf("x: %w", &owned{"slot", "lost"})))
	log.Error("failed", Attr(errors.New("plain")))
	out := buf.String()
	for _, want := range []string{"problem.code=test.slot", "problem.stage=slot", "problem.detail=lost", `problem.fix="do the thing"`, "error=plain"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}
