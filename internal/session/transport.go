package session

import "github.com/heraldrt/herald/internal/auth"

// What the transports share, declared here so that neither imports the other.

// Authenticator turns a token ("" for none) into an identity.
type Authenticator interface {
	Authenticate(token string) (auth.Identity, error)
}

// Registry admits and tracks sessions: the server's connection limit and its list of live
// sessions for shutdown.
type Registry interface {
	// Admit reserves a connection slot; ok is false when the node is full. A connection calls
	// release once everything it started has ended, so a server that waits for every slot
	// to come back at shutdown has waited for its connections, which net/http does not track
	// once they are upgraded.
	Admit() (release func(), ok bool)
	// Track records a live session until untrack is called. A session tracked once the node
	// is stopping is closed at once.
	Track(s *Session) (untrack func())
	// Stopping is closed when the node begins to shut down and closes its sessions. A
	// connection with no session yet (before connect) watches it to close alike.
	Stopping() <-chan struct{}
}
