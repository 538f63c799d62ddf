package bus

import (
	"testing"

	"github.com/heraldrt/herald/internal/bus/bustest"
)

func TestMemoryConformance(t *testing.T) {
	bustest.Run(t, func(*testing.T) bustest.Bus { return NewMemory() })
}
