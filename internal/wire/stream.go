package wire

import "github.com/heraldrt/herald/internal/stream"

// Position is a place in one subscription's stream: stream.Position. Its text form is the
// protocol's, and AppendJSON writes its JSON form.
type Position = stream.Position

// Limits of positions, fixed by protocol v1.
const (
	MaxEpochBytes = stream.MaxEpochBytes
	MaxSafeOffset = stream.MaxSafeOffset
)

// TablePosition, ChannelPosition and ParsePosition are stream's.
var (
	TablePosition   = stream.TablePosition
	ChannelPosition = stream.ChannelPosition
	ParsePosition   = stream.ParsePosition
)

func validEpoch(s string) bool                         { return stream.ValidEpoch(s) }
func parseDecimal(s string, max uint64) (uint64, bool) { return stream.ParseDecimal(s, max) }
