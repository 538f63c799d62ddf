// Package layout holds no code: its test checks the import rules of the package map in
// docs/ARCHITECTURE.md, so the layout keeps showing the architecture.
package layout
