// Package doctor checks what a Herald node needs of its config, its Postgres and its Redis, one
// fact at a time, and changes none of them: `herald doctor`.
//
// Each fact is a Check with a stable id (docs/OPERATIONS.md, "herald doctor", lists them), a
// status (ok, warn or fail), what was found, and for anything not ok the fix: a command, SQL
// statement or config key. A fail is something that stops a node or breaks what clients see; a
// warn is a risk a person should decide on.
//
// The facts are judged by the packages that own them, never a second time here: config's
// Read and Problems, changefeed's Inspector (the functions preflight refuses with), policy's
// compiler against the columns the publication streams, and store/redis' Inspect. Doctor only
// reads: its Postgres session is read-only by default (default_transaction_read_only), and it
// asks Redis with INFO, CONFIG GET and CLUSTER commands that read. It never creates the slot or
// the publication. What it prints never holds a password or secret: every error it shows comes
// from a package that keeps them out of its errors.
//
// # Lifecycle
//
// Run reads the config, then checks each configured service under its own deadline
// (Config.Timeout), one after the other, and returns the Report; it starts no goroutine that
// outlives it. When the config cannot be read at all (a YAML error, an unknown key or
// variable), only that is reported: the settings the rest would check are unknown. When a
// service cannot be reached, its other checks are not run.
package doctor
