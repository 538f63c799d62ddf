package doctor

import (
	"os"
	"slices"
	"strings"
	"testing"
)

const operationsDoc = "../../docs/OPERATIONS.md"

// TestDocsListEveryCheck keeps docs/OPERATIONS.md and IDs in step: the checks table of the
// "herald doctor" section lists every id, in the order doctor reports them, and no other.
func TestDocsListEveryCheck(t *testing.T) {
	b, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## `herald doctor`"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Errorf("%s: row %q has %d cells, want 4 (id, subject, what it checks, fix)", operationsDoc, line, len(cells))
			continue
		}
		for i, c := range cells[2:] {
			if strings.TrimSpace(c) == "" {
				t.Errorf("%s: row %q has an empty cell %d", operationsDoc, line, i+3)
			}
		}
		ids = append(ids, strings.Trim(strings.TrimSpace(cells[0]), "`"))
	}
	if !slices.Equal(ids, IDs) {
		t.Errorf("%s lists the checks\n%v\nwant IDs, in order:\n%v", operationsDoc, ids, IDs)
	}
}
