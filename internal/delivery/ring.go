package delivery

// ring is a FIFO of T in a circular buffer that grows by doubling up to the limit its caller
// enforces. It starts empty and allocates on first use, so an idle connection costs no slots;
// once grown it is reused, so steady-state pushes do not allocate. It is not safe for
// concurrent use: Lanes guards each ring with its mu.
type ring[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int // number of elements
}

// minRing is the first allocation. Most connections never queue more than a few frames, so the
// ring should start small and pay for growth only on a connection that actually falls behind.
const minRing = 4

func (r *ring[T]) len() int { return r.n }

// push appends v. limit is the most slots the ring may ever need; the caller has already
// checked that r.len() < limit.
func (r *ring[T]) push(v T, limit int) {
	if r.n == len(r.buf) {
		r.grow(limit)
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.buf[i] = v
	r.n++
}

// front returns the oldest element without removing it. The ring must not be empty.
func (r *ring[T]) front() *T { return &r.buf[r.head] }

// pop removes and returns the oldest element. The slot is zeroed so the ring does not keep a
// shared payload alive after the writer is done with it.
func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return v
}

// release drops every element and the buffer itself.
func (r *ring[T]) release() { *r = ring[T]{} }

func (r *ring[T]) grow(limit int) {
	size := max(minRing, 2*len(r.buf))
	size = max(min(size, limit), r.n+1)
	buf := make([]T, size)
	k := copy(buf, r.buf[r.head:])
	copy(buf[k:], r.buf[:r.head])
	r.buf, r.head = buf, 0
}
