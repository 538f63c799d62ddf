package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const configDoc = "../../docs/CONFIG.md"

// docSection returns the lines of the "## <title>" section of docs/CONFIG.md, up to the next
// "## " heading.
func docSection(t *testing.T, title string) []string {
	t.Helper()
	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## "+title
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no section %q", configDoc, title)
	}
	return out
}

// docRow is one row of a key table: its cells with backticks removed.
type docRow []string

// docRows returns the rows of the table in lines whose first cell is a `key`.
func docRows(lines []string) map[string]docRow {
	rows := map[string]docRow{}
	for _, line := range lines {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		var cells docRow
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.Trim(strings.TrimSpace(c), "`"))
		}
		rows[cells[0]] = cells
	}
	return rows
}

// TestDocsListEveryKey keeps docs/CONFIG.md and the keys in step: every key, with its variable
// and default, is in the table of the config file section, and the table has no other key.
func TestDocsListEveryKey(t *testing.T) {
	section := docSection(t, "`herald serve` config file")
	rows := docRows(section)
	def := Default()
	for _, k := range Keys() {
		row, ok := rows[k.Name]
		if !ok {
			t.Errorf("%s: no row for key %s; add | `%s` | `%s` | `%s` | meaning |", configDoc, k.Name, k.Name, k.Env, k.Format(def))
			continue
		}
		if len(row) != 4 {
			t.Errorf("%s: row for %s has %d cells, want 4 (key, variable, default, meaning)", configDoc, k.Name, len(row))
			continue
		}
		if row[1] != k.Env {
			t.Errorf("%s: %s's variable is %q, want %q", configDoc, k.Name, row[1], k.Env)
		}
		if row[2] != k.Format(def) {
			t.Errorf("%s: %s's default is %q, want %q", configDoc, k.Name, row[2], k.Format(def))
		}
		if row[3] == "" {
			t.Errorf("%s: %s has no meaning", configDoc, k.Name)
		}
	}
	for name := range rows {
		if _, ok := keyNamed(name); !ok {
			t.Errorf("%s lists %s, which is not a key", configDoc, name)
		}
	}
}

// TestDocsChangefeedSection keeps the changefeed settings table to exactly the changefeed.* keys.
func TestDocsChangefeedSection(t *testing.T) {
	rows := docRows(docSection(t, "Changefeed settings"))
	def := Default()
	var want []string
	for _, k := range Keys() {
		if !strings.HasPrefix(k.Name, "changefeed.") {
			continue
		}
		want = append(want, k.Name)
		row, ok := rows[k.Name]
		if !ok {
			t.Errorf("%s: Changefeed settings has no row for %s", configDoc, k.Name)
			continue
		}
		if row[1] != k.Format(def) {
			t.Errorf("%s: Changefeed settings gives %s the default %q, want %q", configDoc, k.Name, row[1], k.Format(def))
		}
	}
	for name := range rows {
		if !slices.Contains(want, name) {
			t.Errorf("%s: Changefeed settings lists %s, which is not a changefeed key", configDoc, name)
		}
	}
}

// TestDocsEnvTable checks the environment section against Load: the alias is documented, and
// every variable of the development table is one herald serve leaves alone.
func TestDocsEnvTable(t *testing.T) {
	lines := docSection(t, "Environment variables")
	all := strings.Join(lines, "\n")
	for _, want := range []string{aliasDatabaseURL, "HERALD_CHANGEFEED_DATABASE_URL"} {
		if !strings.Contains(all, want) {
			t.Errorf("%s: Environment variables does not mention %s", configDoc, want)
		}
	}
	dev := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "### Development") })
	if dev < 0 {
		t.Fatalf("%s: no Development subsection", configDoc)
	}
	vars := regexp.MustCompile(`HERALD_[A-Z_]*[A-Z]`).FindAllString(strings.Join(lines[dev:], "\n"), -1)
	if len(vars) == 0 {
		t.Fatalf("%s: the Development table names no HERALD_ variable", configDoc)
	}
	for _, v := range vars {
		if !exempt(v) {
			t.Errorf("%s: the Development table names %s, which herald serve would refuse as unknown", configDoc, v)
		}
	}
}

// TestDocsExampleIsEveryDefault reads the YAML example of the config file section: it must set
// every key, each to its default.
func TestDocsExampleIsEveryDefault(t *testing.T) {
	var block []string
	in := false
	for _, line := range docSection(t, "`herald serve` config file") {
		switch {
		case line == "```yaml":
			in = true
		case line == "```" && in:
			in = false
		case in:
			block = append(block, line)
		}
	}
	if len(block) == 0 {
		t.Fatalf("%s: the config file section has no ```yaml example", configDoc)
	}
	var got Config
	if err := got.decodeFile("CONFIG.md", []byte(strings.Join(block, "\n"))); err != nil {
		t.Fatalf("the example does not decode: %v", err)
	}
	if d := diffConfig(Default(), &got); d != "" {
		t.Errorf("the example is not every default (-want +got):\n%s", d)
	}
	for _, k := range Keys() {
		if got.source(k.Name) == "" {
			t.Errorf("the example does not set %s", k.Name)
		}
	}
}
