package delivery

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for the zero value of each Config field.
const (
	// DefaultMaxDataFrames and DefaultMaxDataBytes bound the data lane. A connection that is this
	// far behind is better served by a marker and a resync than by more queue: a browser that
	// has not read 1024 changes will not catch up by being sent them later.
	DefaultMaxDataFrames = 1024
	DefaultMaxDataBytes  = 4 << 20

	// DefaultMaxControlFrames and DefaultMaxControlBytes bound the control lane. Control frames
	// are replies to the client's own requests, so the lane only fills when the client sends
	// requests faster than it reads replies.
	DefaultMaxControlFrames = 256
	DefaultMaxControlBytes  = 256 << 10

	// DefaultMaxBatchFrames and DefaultMaxBatchBytes bound one Next. They cap how long the writer
	// holds the lock while it copies slots out, and how long a control frame that arrives mid
	// batch waits behind data.
	DefaultMaxBatchFrames = 64
	DefaultMaxBatchBytes  = 64 << 10
)

// Config configures one connection's Lanes. The zero value of every field but EncodeMarker means
// the default documented at it.
type Config struct {
	// MaxDataFrames is the most data frames queued at once. Default DefaultMaxDataFrames.
	MaxDataFrames int
	// MaxDataBytes is the most data bytes (len(Head)+len(Body) summed) queued at once. A frame
	// larger than this can never be queued and is lost with ReasonTooLarge. Default
	// DefaultMaxDataBytes.
	MaxDataBytes int

	// MaxControlFrames is the most control frames queued at once. Default
	// DefaultMaxControlFrames.
	MaxControlFrames int
	// MaxControlBytes is the most control bytes queued at once. Default DefaultMaxControlBytes.
	MaxControlBytes int

	// MaxBatchFrames is the most frames one Next returns. Default DefaultMaxBatchFrames.
	MaxBatchFrames int
	// MaxBatchBytes is the most bytes one Next returns, unless its first frame alone is larger:
	// a batch always holds at least one frame so a large frame cannot wedge the writer. Default
	// DefaultMaxBatchBytes.
	MaxBatchBytes int

	// EncodeMarker appends the wire form of m to dst and returns the extended slice. Required:
	// this package does no encoding of its own, the wire package supplies it. It runs on the
	// writer goroutine inside Next, under the Lanes lock, so the range it encodes is the
	// current one. It must be pure and quick, and must not call back into Lanes.
	EncodeMarker func(dst []byte, m Marker) []byte

	// Now is the clock that Stalled reports in. Default time.Now; tests inject their own.
	Now func() time.Time

	// OnStall, when set, is called as a stall begins (see Stalled), so that whoever enforces
	// the limit on stalls can arm a timer then rather than poll Stalled while nothing is
	// wrong. It runs on the pushing goroutine after the lock is released, once per stall; it
	// must be quick and must not block.
	OnStall func()

	// Wake, when set, makes the writer one that runs on demand rather than one that parks: the
	// writer drains with TryNextOrPark and ends when it finds nothing, and the push that then
	// finds the writer gone calls Wake, once, to start the next. It runs on the pushing
	// goroutine after the lock is released; it must be quick and must not block (it starts a
	// goroutine). Close never calls it. Next is not for such lanes. Lanes start with the writer
	// counted as present, so the owner starts the first one itself.
	Wake func()

	// Totals, when set, is where these lanes add their counters too, summed with every other
	// connection's that shares it: a node's metrics read it rather than every connection's
	// Stats. Lanes never remove from it.
	Totals *Totals
}

// Validate reports a Config that New would refuse.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxDataFrames", c.MaxDataFrames},
		{"MaxDataBytes", c.MaxDataBytes},
		{"MaxControlFrames", c.MaxControlFrames},
		{"MaxControlBytes", c.MaxControlBytes},
		{"MaxBatchFrames", c.MaxBatchFrames},
		{"MaxBatchBytes", c.MaxBatchBytes},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("delivery config: %s is %d, want 0 (the default) or more", f.name, f.v))
		}
	}
	if c.EncodeMarker == nil {
		errs = append(errs, errors.New("delivery config: EncodeMarker is nil, want the wire package's marker encoder"))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field replaced by its default.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxDataFrames, DefaultMaxDataFrames)
	def(&c.MaxDataBytes, DefaultMaxDataBytes)
	def(&c.MaxControlFrames, DefaultMaxControlFrames)
	def(&c.MaxControlBytes, DefaultMaxControlBytes)
	def(&c.MaxBatchFrames, DefaultMaxBatchFrames)
	def(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
