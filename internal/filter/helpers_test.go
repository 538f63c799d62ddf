package filter

import (
	"encoding/json"
	"testing"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
)

// enumOID stands for a user-defined type, such as an enum, that has an OID of its own.
const enumOID = 16385

// testCols is a table with a column of every category.
var testCols = []Column{
	{"id", pgvalue.Int8OID},
	{"org_id", pgvalue.TextOID},
	{"qty", pgvalue.Int4OID},
	{"price", pgvalue.NumericOID},
	{"ratio", pgvalue.Float8OID},
	{"name", pgvalue.VarcharOID},
	{"code", pgvalue.BPCharOID},
	{"flag", pgvalue.BoolOID},
	{"at", pgvalue.TimestamptzOID},
	{"local", pgvalue.TimestampOID},
	{"day", pgvalue.DateOID},
	{"uid", pgvalue.UUIDOID},
	{"status", enumOID},
	{"doc", pgvalue.JSONBOID},
	{"tags", pgvalue.TextArrayOID},
	{"small", pgvalue.Int2OID},
}

// mustParse parses a filter against testCols, failing the test on error.
func mustParse(t testing.TB, s string) *Filter {
	t.Helper()
	f, err := Parse(json.RawMessage(s), testCols)
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return f
}

// row reads a row image from a JSON object, keeping its key order.
func row(t testing.TB, s string) change.Row {
	t.Helper()
	var r change.Row
	if err := r.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatalf("row %s: %v", s, err)
	}
	return r
}
