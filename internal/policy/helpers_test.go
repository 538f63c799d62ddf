package policy

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
)

// items is the table most tests compile against.
var items = Table{
	Columns: []filter.Column{
		{Name: "id", OID: 20},           // int8
		{Name: "org_id", OID: 25},       // text
		{Name: "title", OID: 25},        // text
		{Name: "qty", OID: 23},          // int4
		{Name: "price", OID: 1700},      // numeric
		{Name: "secret", OID: 25},       // text
		{Name: "updated_at", OID: 1184}, // timestamptz
		{Name: "tags", OID: 1009},       // text[]
		{Name: "meta", OID: 3802},       // jsonb
		{Name: "code", OID: 1042},       // bpchar
		{Name: "owner", OID: 2950},      // uuid
		{Name: "done", OID: 16},         // bool
	},
	Key:      []string{"id"},
	Identity: "FULL",
}

// tablePolicy compiles rules for public.items and fails the test on an error.
func tablePolicy(t testing.TB, r TableRules) *TablePolicy {
	t.Helper()
	p, err := New(Rules{Tables: map[string]TableRules{"public.items": r}}, Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tp, err := p.Table("public.items", items)
	if err != nil {
		t.Fatalf("Table: %v", err)
	}
	return tp
}

// row builds a row image from a JSON object, keeping its key order.
func row(t testing.TB, s string) change.Row {
	t.Helper()
	var r change.Row
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("row %s: %v", s, err)
	}
	return r
}

func claims(t testing.TB, s string) *Claims {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("claims %s: %v", s, err)
	}
	return NewClaims(m)
}

func isErr(v ref.Val) bool { return types.IsError(v) }

func fmtVal(v ref.Val) string { return fmt.Sprint(v.Value()) }
