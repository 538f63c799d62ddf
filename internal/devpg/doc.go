// Package devpg owns the throwaway private PostgreSQL that `herald dev` runs, so a person with
// only the herald binary and a PostgreSQL install gets a server ready for logical replication.
//
// # Lifecycle
//
// Start finds the server binaries (see Find), creates a fresh cluster with initdb, configures
// it (loopback only, trust auth, wal_level=logical, no durability, then any Config.Settings,
// which win) and starts it with pg_ctl, returning once it accepts connections. Stop shuts it
// down with a fast shutdown, falling back to an immediate one and then to SIGKILL of the
// postmaster, so no server outlives Stop even when its context is done; it then removes the
// directory if Start made it.
//
// Directory layout: Dir/data is the cluster and holds the Unix socket; Dir/postgres.log is the
// server log. Start never reuses data: it always makes a new cluster.
//
// Nothing stops the server if herald itself dies without calling Stop (kill -9, a crash): the
// postmaster runs on, detached, holding its port. A server in a temporary directory is then
// left to the person to stop (`pg_ctl -D <dir>/data stop`, as the server's user). A server in a
// given Dir is stopped by the next Start with that Dir, which finds its postmaster.pid, stops it
// and starts afresh. Start only stops or removes a cluster that carries the marker file it
// writes after initdb, so a Dir pointing at a real cluster costs nobody their data. Two
// herald dev processes given one Dir do not share it: the second replaces the first's server.
//
// # The root rule
//
// initdb and postgres refuse to run as root. When herald runs as root, initdb, pg_ctl and the
// server run as the postgres user if it exists, else as nobody, with no supplementary groups.
// Start gives that user the data directory and the log, and checks that it can reach Dir
// through every parent; a temporary directory under /tmp is fine, a directory under /root is
// not.
//
// The server trusts every connection from this host, as any user, with no password: it is for
// development on a machine whose local users are trusted, never for data that matters.
package devpg
