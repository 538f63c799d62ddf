// Package config owns the settings of `herald serve`: it reads the YAML config file and the
// HERALD_* environment variables into one Config, checks it, and hands each package its own
// Config.
//
// # Precedence
//
// Defaults < file < environment. Default holds every default explicitly, so a printed Config
// (Redacted) shows the values the server runs with. The file, when given, replaces the defaults
// it names; an environment variable replaces the file's value. An environment variable set to
// the empty string counts as unset, so `HERALD_X=${X}` in a compose file with X unset does not
// blank a value the file set.
//
// # Names
//
// Every key is the yaml tag path of its field, and its environment variable is HERALD_ followed
// by that path upper-cased with "." as "_": limits.max_connections is
// HERALD_LIMITS_MAX_CONNECTIONS. Both are generated from the struct tags (see Keys), so the key
// list, the variable names and docs/CONFIG.md (kept in step by a test) cannot drift apart.
// Lists in the environment are comma-separated. Sizes are bytes, or a whole number with KiB,
// MiB, GiB or TiB; durations are Go durations (10s, 1m30s).
//
// # Policy rules
//
// policy.tables and policy.channels are mappings from a table name or a channel pattern to
// rules, not keys: fileDecoder.rules reads them from the file, and they have no environment
// variable. Validate checks every rule's syntax and type-checks the channel rules
// (policy.Validate); table rules are type-checked when the server knows the tables' columns.
//
// # Strictness
//
// A typo must not be ignored in silence: an unknown key in the file is an error naming it, its
// file:line and the nearest known key, and so is any unknown HERALD_* variable, except the
// development prefixes HERALD_TEST, HERALD_TESTENV and HERALD_DEMO and HERALD_DATABASE_URL
// (`herald tail`'s variable, accepted as an alias of HERALD_CHANGEFEED_DATABASE_URL).
//
// Load stops at the first problem. `herald doctor` uses its two halves to report them all: Read
// stops only at what cannot be read at all (the file, its YAML, an unknown key or variable), and
// Problems reports the first problem of every section that Validate checks.
//
// Errors are *Error, which never holds a secret: auth.secrets and api.keys are named by index,
// and a database URL is never quoted.
package config
