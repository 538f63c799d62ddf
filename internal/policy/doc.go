// Package policy owns the policy gate: CEL rules, declared per table and per channel pattern,
// that decide who may subscribe, publish and join presence, and which rows and columns each
// subscriber sees.
//
// It is pure: no I/O, no goroutines. A Policy, a TablePolicy and a RowRule are immutable once
// built and safe for concurrent use; an Image is immutable once decoded. docs/POLICY.md is the
// reference for people writing rules.
//
// # Lifecycle
//
// New checks the configured Rules: names, patterns, every rule's syntax, and the channel rules
// in full. Table rules need the table's columns, which only the database knows, so the server
// calls Policy.Table for each table once it has read them: the rules are type-checked against
// the columns (an unknown column is a compile error), and a row rule that reads a column the
// table's old images lack (REPLICA IDENTITY DEFAULT) is refused with the ALTER TABLE fix. Every
// compile error is a *CompileError naming the rule and its line:column. A table or channel
// without rules is closed.
//
// # Decisions
//
// Every decision is Allow, Deny or Error. Error is a rule that could not answer (a missing
// claim, a NULL compared, an overflow, a column absent from an image, the cost bound); it
// carries an *EvalError, and it is never Allow. Each evaluation is bounded by Config.MaxCost.
//
// # Row rules and their cost
//
// A row rule judges one row image, like a filter: the router asks it whether a subscriber
// could see a row before a change (Visible(old, nil, c)) and after it (Visible(new, old, c)),
// and sends enter and leave where the answers differ. Decode reads an image's values once per
// change, typed by column (int, double, string, bool, timestamp, or the JSON of json and
// arrays), and every evaluation shares it.
//
// From the checked AST, a RowRule knows the claim paths it reads (auth.org_id,
// auth.app_metadata.tenant): subscribers with equal values there (GroupKey) get the same
// answer on every row, so one evaluation serves them all. A top-level equality between a row
// column and a claim (row.org_id == auth.org_id, alone or under &&) also indexes the groups:
// Groups files each group by its claim value (ClaimKey), and Candidates visits only those a row
// can be visible to (RowKey); the rest are not evaluated at all. So a change costs one evaluation per group it may
// reach, not one per socket.
package policy
