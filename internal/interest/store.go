package interest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heraldrt/herald/internal/fault"
)

// Row is one subscription filed under one token of an owner.
type Row struct {
	// Token is the index token the row is filed under: an anchor token of a channel pattern, or
	// a filter index key of a table.
	Token string
	// Socket names the session that holds the row, unique across nodes.
	Socket string
	// Sub is the subscription's id, unique within Socket.
	Sub string
	// Identity is whose subscription it is; the limit counts rows per identity.
	Identity string
	// Node is the node that holds Socket: where items for the row go.
	Node string
	// Data is opaque to the store: what the fan-out needs to match items against the row.
	Data []byte
}

// Store is the interest index the cross-node fan-out reads and the sessions' nodes write. Every
// method is safe for concurrent use and honours ctx. An owner, a Socket, a Sub, an Identity or
// a Node is a non-empty string without NUL bytes; a Token is any string without NUL bytes.
type Store interface {
	// Add files r under owner and returns the owner's new generation. It refuses a row whose
	// (Socket, Sub) is already held (fault.CodeDuplicateSubscription) and a row past the
	// identity's limit (fault.CodeTooManySubscriptions), changing nothing. It renews r.Socket's
	// deadline.
	Add(ctx context.Context, owner string, r Row) (uint64, error)
	// Remove drops socket's subscription sub and returns the owner's new generation. A sub
	// that socket does not hold, whoever else holds it, is fault.CodeNotFound.
	Remove(ctx context.Context, owner, socket, sub string) (uint64, error)
	// Reap drops every row socket holds under owner, for a disconnect, and returns the owner's
	// generation: a new one when it dropped something.
	Reap(ctx context.Context, owner, socket string) (uint64, error)
	// Refresh renews socket's deadline and returns how many rows it holds under owner; fewer
	// than its node registered means the rows expired and must be added again.
	Refresh(ctx context.Context, owner, socket string) (int, error)
	// Watched reports, for each token, whether any row is filed under it: the dispatch hot
	// path, one command on Redis.
	Watched(ctx context.Context, owner string, tokens []string) ([]bool, error)
	// Rows returns the live rows filed under tokens, in no particular order.
	Rows(ctx context.Context, owner string, tokens []string) ([]Row, error)
	// Generation returns the owner's generation: 0 before its first change.
	Generation(ctx context.Context, owner string) (uint64, error)
	// Probe returns the owner's generation and, for each token, whether any row is filed
	// under it: the routing hot path, one command on Redis. Rows are read (and cached, by
	// generation) only for the tokens it reports watched.
	Probe(ctx context.Context, owner string, tokens []string) (gen uint64, watched []bool, err error)
	// Stamp is Probe that first raises the owner's mark to mark (it never lowers it), in the
	// same step: a producer stamps the position of what it is about to route before it reads
	// where that goes. The mark lives as long as the generation.
	Stamp(ctx context.Context, owner string, mark uint64, tokens []string) (gen uint64, watched []bool, err error)
	// Sockets returns the sockets holding a live row under owner, in no particular order: for
	// what must reach every holder of an owner whatever their tokens.
	Sockets(ctx context.Context, owner string) ([]string, error)
	// Mark returns the owner's mark: 0 before its first Stamp. A subscriber that reads it after
	// its Add knows every item past the mark is routed with its row in view, since the Stamp
	// of such an item came after the Add.
	Mark(ctx context.Context, owner string) (uint64, error)
}

// Config configures a Store. The zero value is the default.
type Config struct {
	// TTL is how long a socket's rows live after its last Add or Refresh. Default DefaultTTL.
	TTL time.Duration
	// GenerationTTL is how long an owner's generation lives after its last change: longer than
	// any cache of its rows. Default DefaultGenerationTTL.
	GenerationTTL time.Duration
	// MaxPerIdentity is how many rows one identity may hold under one owner. Default
	// DefaultMaxPerIdentity.
	MaxPerIdentity int
}

// Defaults.
const (
	// DefaultTTL: a node refreshing every TTL/4 may miss three refreshes, and a dead node's
	// rows are gone to readers two minutes after it died.
	DefaultTTL = 2 * time.Minute
	// DefaultGenerationTTL outlives rows by far, so a generation never restarts at 0 under a
	// cache that saw a higher one.
	DefaultGenerationTTL = 24 * time.Hour
	// DefaultMaxPerIdentity bounds one identity's share of an owner's rows. The session's own
	// per-connection limit bounds what one connection holds across owners.
	DefaultMaxPerIdentity = 1000
)

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.GenerationTTL == 0 {
		c.GenerationTTL = DefaultGenerationTTL
	}
	if c.MaxPerIdentity == 0 {
		c.MaxPerIdentity = DefaultMaxPerIdentity
	}
	return c
}

// Validate reports a setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.TTL < 0 || (c.TTL > 0 && c.TTL < 10*time.Millisecond):
		return fmt.Errorf("interest: TTL %v: want at least 10ms (default %v)", c.TTL, DefaultTTL)
	case c.GenerationTTL < 0 || (c.GenerationTTL > 0 && c.GenerationTTL < c.WithDefaults().TTL):
		return fmt.Errorf("interest: GenerationTTL %v: want at least TTL (default %v)", c.GenerationTTL, DefaultGenerationTTL)
	case c.MaxPerIdentity < 0:
		return fmt.Errorf("interest: MaxPerIdentity %d: want a positive count (default %d)", c.MaxPerIdentity, DefaultMaxPerIdentity)
	}
	return nil
}

// ErrBadArgument is what a Store answers for an owner, socket, sub, identity, node or token it
// cannot file: empty where it must not be, or holding a NUL byte. It is a caller's bug.
var ErrBadArgument = errors.New("interest: bad argument")

// CheckName checks an owner, socket, sub, identity or node: non-empty, no NUL.
func CheckName(what, v string) error {
	if v == "" {
		return fmt.Errorf("%w: empty %s", ErrBadArgument, what)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("%w: %s %q holds a NUL byte", ErrBadArgument, what, v)
	}
	return nil
}

// CheckOwnerSocket checks the owner and socket an operation on one socket's rows names.
func CheckOwnerSocket(owner, socket string) error {
	if err := CheckName("owner", owner); err != nil {
		return err
	}
	return CheckName("socket", socket)
}

// CheckToken checks a token: any string without NUL.
func CheckToken(tok string) error {
	if strings.IndexByte(tok, 0) >= 0 {
		return fmt.Errorf("%w: token %q holds a NUL byte", ErrBadArgument, tok)
	}
	return nil
}

// CheckRow checks every field of r that a Store files.
func CheckRow(owner string, r Row) error {
	for _, f := range [...]struct{ what, v string }{{"owner", owner}, {"socket", r.Socket}, {"sub", r.Sub}, {"identity", r.Identity}, {"node", r.Node}} {
		if err := CheckName(f.what, f.v); err != nil {
			return err
		}
	}
	return CheckToken(r.Token)
}

// LimitError is the refusal of a row past its identity's limit.
func LimitError(limit int) *fault.Error {
	return &fault.Error{
		Code:    fault.CodeTooManySubscriptions,
		Message: fmt.Sprintf("this identity already holds %d subscriptions to this table or channel namespace across all its connections, the server's limit; unsubscribe from one first", limit),
	}
}

// NotFoundError is the answer to removing a subscription the socket does not hold.
func NotFoundError(sub string) *fault.Error {
	return &fault.Error{Code: fault.CodeNotFound, Field: "id", Message: fmt.Sprintf("no subscription %q on this connection", sub)}
}

// DuplicateError is the refusal of a subscription id the socket already holds.
func DuplicateError(sub string) *fault.Error {
	return &fault.Error{Code: fault.CodeDuplicateSubscription, Field: "id", Message: fmt.Sprintf("this connection already has a subscription %q; pick another id", sub)}
}
