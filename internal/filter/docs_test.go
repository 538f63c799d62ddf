package filter

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDocumentsEveryOperator checks that docs/FILTERS.md documents every operator and every
// limit the package has.
func TestDocumentsEveryOperator(t *testing.T) {
	doc, err := os.ReadFile("../../docs/FILTERS.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, name := range opNames {
		if !strings.Contains(text, "| `"+name+"` |") {
			t.Errorf("docs/FILTERS.md has no row for operator %s in its operator table", name)
		}
	}
	for _, limit := range []int{MaxDepth, MaxNodes, MaxInValues, MaxLiteralBytes, MaxPatternBytes, MaxBytes >> 10} {
		if !strings.Contains(text, strconv.Itoa(limit)) {
			t.Errorf("docs/FILTERS.md does not mention the limit %d", limit)
		}
	}
	for _, code := range Codes() {
		if !strings.Contains(text, "`"+string(code)+"`") {
			t.Errorf("docs/FILTERS.md does not mention the error code %s", code)
		}
	}
}
