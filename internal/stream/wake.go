package stream

// Waker is a writer that a push made runnable and whose wake-up was deferred: a connection's
// lanes (delivery.Lanes).
type Waker interface {
	Wake()
}

// Wakeups collects the writers a fan-out made runnable, so that it wakes each once, after its
// last push, rather than each as it is pushed to: a writer then takes everything the fan-out
// queued for it in one batch, and the writers do not compete for the processors with the
// fan-out still feeding them. The zero value is ready to use. It belongs to one goroutine, the
// fan-out's, which must call Wake once it has pushed the last item: a writer it holds stays
// asleep until then.
type Wakeups struct {
	w []Waker
}

// Add defers w's wake-up to the next Wake.
func (ws *Wakeups) Add(w Waker) { ws.w = append(ws.w, w) }

// Len is the number of wake-ups deferred.
func (ws *Wakeups) Len() int { return len(ws.w) }

// Wake wakes every writer added since the last Wake, in the order they were added, and keeps
// its storage for the next fan-out.
func (ws *Wakeups) Wake() {
	for i, w := range ws.w {
		w.Wake()
		ws.w[i] = nil
	}
	ws.w = ws.w[:0]
}

// DeferringReceiver is a Receiver that can defer the wake-up of its writer to a fan-out's
// Wakeups. PushDeferred is Push, except that when it makes the receiver's writer runnable it
// adds the writer to w instead of waking it.
type DeferringReceiver interface {
	Receiver
	PushDeferred(sub string, it *Item, w *Wakeups)
}
