package sse

// eventIDs is what a stream's event ids say (wire.EventID): each live subscription's last
// position written, as of each event. It is kept by the writer, in the order the events go
// out, so the id of an event a client received names exactly what it received of every
// subscription. Used by the session's writer alone (under the transport's mu).
type eventIDs struct {
	// session is the stream's session id when a reconnect may take up all its subscriptions
	// (sse.resume_window above zero): every subscription's frames then carry ids. "" keeps
	// ids to the URL subscription alone.
	session string
	urlSub  string   // the URL subscription; "" for none
	subs    []subPos // the live subscriptions that have a position, in the order they got one
	buf     []byte   // the last id written, reused while nothing changes
	stale   bool     // subs changed since buf was made
}

type subPos struct{ sub, pos string }

// tracked reports whether sub's frames carry ids.
func (e *eventIDs) tracked(sub string) bool {
	return sub != "" && (e.session != "" || sub == e.urlSub)
}

// set records that sub's last frame written is at pos.
func (e *eventIDs) set(sub, pos string) {
	for i := range e.subs {
		if e.subs[i].sub == sub {
			if e.subs[i].pos != pos {
				e.subs[i].pos, e.stale = pos, true
			}
			return
		}
	}
	e.subs = append(e.subs, subPos{sub, pos})
	e.stale = true
}

// end forgets sub, which the frame being written ends; it reports whether sub had a position.
func (e *eventIDs) end(sub string) bool {
	for i := range e.subs {
		if e.subs[i].sub == sub {
			e.subs = append(e.subs[:i], e.subs[i+1:]...)
			e.stale = true
			return true
		}
	}
	return false
}

// appendID appends the id line of the event being written: the two-token form while the URL
// subscription is the only one with a position (or ids are kept to it), else "@", the
// session, and every live subscription's id and position.
func (e *eventIDs) appendID(b []byte) []byte {
	if e.stale {
		e.stale = false
		e.buf = e.buf[:0]
		if e.session == "" || len(e.subs) == 1 && e.subs[0].sub == e.urlSub {
			for _, sp := range e.subs {
				e.buf = append(append(append(e.buf, sp.sub...), ' '), sp.pos...)
			}
		} else {
			e.buf = append(append(e.buf, '@'), e.session...)
			for _, sp := range e.subs {
				e.buf = append(append(append(append(e.buf, ' '), sp.sub...), ' '), sp.pos...)
			}
		}
	}
	if len(e.buf) == 0 {
		return b
	}
	b = append(b, "id: "...)
	b = append(b, e.buf...)
	return append(b, '\n')
}
