package wire

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// These tests keep docs/PROTOCOL.md and the constants of this package in step: every code,
// close code, resync reason, frame type, op and frame field is documented, and the document
// lists nothing the package does not define.

const protocolDoc = "../../docs/PROTOCOL.md"

// docTable is one Markdown table and the heading it sits under.
type docTable struct {
	section string   // the nearest heading, without #s and backticks
	header  []string // header cells
	rows    [][]string
}

func readDocTables(t *testing.T) []docTable {
	t.Helper()
	b, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatalf("reading the protocol document: %v", err)
	}
	var (
		tables  []docTable
		section string
		cur     *docTable
	)
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			section = strings.Trim(strings.TrimLeft(line, "#"), " `")
			cur = nil
			continue
		}
		if !strings.HasPrefix(line, "|") {
			cur = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case cur == nil:
			tables = append(tables, docTable{section: section, header: cells})
			cur = &tables[len(tables)-1]
		case strings.Trim(cells[0], "-: ") == "":
			// the separator row
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return tables
}

// findTable returns the rows of the table under section whose first header cell is first.
func findTable(t *testing.T, tables []docTable, section, first string) [][]string {
	t.Helper()
	for _, tb := range tables {
		if tb.section == section && tb.header[0] == first {
			return tb.rows
		}
	}
	t.Fatalf("%s has no table under %q whose first column is %q", protocolDoc, section, first)
	return nil
}

// name reads a first-column cell like "`bad_frame`".
func name(t *testing.T, cell string) string {
	t.Helper()
	if len(cell) < 3 || cell[0] != '`' || cell[len(cell)-1] != '`' {
		t.Fatalf("cell %q is not a `name`", cell)
	}
	return cell[1 : len(cell)-1]
}

func TestProtocolDocErrorCodes(t *testing.T) {
	rows := findTable(t, readDocTables(t), "Error codes", "code")
	documented := map[Code]int{}
	for _, r := range rows {
		c := Code(name(t, r[0]))
		status, err := strconv.Atoi(r[1])
		if err != nil {
			t.Errorf("%s: status %q is not a number", c, r[1])
		}
		if _, dup := documented[c]; dup {
			t.Errorf("%s is documented twice", c)
		}
		documented[c] = status
		if !c.Known() {
			t.Errorf("the document lists %s, which is not a Code constant", c)
		} else if c.Status() != status {
			t.Errorf("%s: the document says status %d, the constant %d", c, status, c.Status())
		}
		if len(r) < 4 || r[2] == "" || r[3] == "" {
			t.Errorf("%s: want a meaning and a client reaction", c)
		}
	}
	for _, c := range Codes() {
		if _, ok := documented[c]; !ok {
			t.Errorf("Code %s is not in the document's error code table", c)
		}
	}
}

func TestProtocolDocCloseCodes(t *testing.T) {
	rows := findTable(t, readDocTables(t), "Close codes", "code")
	documented := map[CloseCode]bool{}
	for _, r := range rows {
		n, err := strconv.Atoi(r[0])
		if err != nil {
			t.Fatalf("close code %q is not a number", r[0])
		}
		c := CloseCode(n)
		documented[c] = true
		if !c.Known() {
			t.Errorf("the document lists close code %d, which is not a CloseCode constant", n)
			continue
		}
		if got := name(t, r[1]); got != c.String() {
			t.Errorf("%d: the document names it %q, the constant %q", n, got, c)
		}
		if r[2] != c.Reaction().String() {
			t.Errorf("%d: the document says the client should %q, Reaction says %q", n, r[2], c.Reaction())
		}
		if len(r) < 4 || r[3] == "" {
			t.Errorf("%d: want what it means and what to do", n)
		}
	}
	for _, c := range CloseCodes() {
		if !documented[c] {
			t.Errorf("CloseCode %d (%s) is not in the document's close code table", c, c)
		}
	}
}

func TestProtocolDocResyncReasons(t *testing.T) {
	rows := findTable(t, readDocTables(t), "Resync reasons", "reason")
	var documented []ResyncReason
	for _, r := range rows {
		documented = append(documented, ResyncReason(name(t, r[0])))
	}
	if !slices.Equal(documented, ResyncReasons()) {
		t.Errorf("the document lists resync reasons %v, the package %v", documented, ResyncReasons())
	}
}

func TestProtocolDocOps(t *testing.T) {
	rows := findTable(t, readDocTables(t), "change", "op")
	var documented []Op
	for _, r := range rows {
		documented = append(documented, Op(name(t, r[0])))
	}
	if !slices.Equal(documented, Ops()) {
		t.Errorf("the document lists ops %v, the package %v", documented, Ops())
	}
}

// TestProtocolDocFrames checks that every frame type has a section with a field table, that
// every field a golden frame carries is in its table, and that every field in a table is
// carried by some golden frame, so neither the document nor the encoder has a field the other
// lacks.
func TestProtocolDocFrames(t *testing.T) {
	tables := readDocTables(t)
	documented := map[FrameType]map[string]bool{}
	for _, tb := range tables {
		if tb.header[0] != "field" {
			continue
		}
		ft := FrameType(tb.section)
		if !slices.Contains(FrameTypes(), ft) {
			t.Errorf("the document has a field table under %q, which is not a frame type", tb.section)
			continue
		}
		fields := map[string]bool{}
		for _, r := range tb.rows {
			fields[name(t, r[0])] = true
			if len(r) < 4 || r[1] == "" || r[3] == "" {
				t.Errorf("%s.%s: want a type and a meaning", ft, r[0])
			}
		}
		documented[ft] = fields
	}
	carried := map[FrameType]map[string]bool{}
	for _, g := range goldenFrames {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(g.want), &m); err != nil {
			t.Fatal(err)
		}
		ft := g.f.Type()
		if carried[ft] == nil {
			carried[ft] = map[string]bool{}
		}
		for k, v := range m {
			if k == "type" {
				continue
			}
			carried[ft][k] = true
			if k == "limits" {
				var sub map[string]json.RawMessage
				_ = json.Unmarshal(v, &sub)
				for sk := range sub {
					carried[ft][k+"."+sk] = true
				}
			}
		}
	}
	for _, ft := range FrameTypes() {
		doc, ok := documented[ft]
		if !ok {
			t.Errorf("frame type %s has no section with a field table in the document", ft)
			continue
		}
		for f := range carried[ft] {
			if !doc[f] {
				t.Errorf("%s frames carry %q, which the document's table does not list", ft, f)
			}
		}
		var missing []string
		for f := range doc {
			if !carried[ft][f] {
				missing = append(missing, f)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("the document lists %s fields %v that no golden frame carries", ft, missing)
		}
	}
}
