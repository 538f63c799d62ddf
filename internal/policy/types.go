package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/filter"
)

// The integer type OIDs, which read as CEL int rather than double. The values of pg_type.oid,
// fixed across Postgres versions; TestOIDsMatchPgvalue checks them against pgvalue.
const (
	int8OID uint32 = 20
	int2OID uint32 = 21
	int4OID uint32 = 23
	oidOID  uint32 = 26
)

// kind is how a column's values read in a rule.
type kind uint8

const (
	kindDyn       kind = iota // json, jsonb, arrays: the decoded JSON
	kindInt                   // int2, int4, int8, oid
	kindDouble                // numeric, float4, float8
	kindString                // text, varchar, name, "char", uuid, and every type Herald sends as text
	kindChar                  // bpchar: a string without its trailing spaces
	kindBool                  // bool
	kindTimestamp             // timestamptz, timestamp (as UTC), date (midnight UTC)
)

// kindOf maps a column's type OID to how its values read, following filter's categories.
func kindOf(oid uint32) kind {
	switch oid {
	case int2OID, int4OID, int8OID, oidOID:
		return kindInt
	}
	switch filter.TypeOf(oid) {
	case filter.Number:
		return kindDouble
	case filter.Text, filter.UUID, filter.Other:
		return kindString
	case filter.Char:
		return kindChar
	case filter.Bool:
		return kindBool
	case filter.Timestamp, filter.LocalTimestamp, filter.Date:
		return kindTimestamp
	}
	return kindDyn
}

// celType is the declared CEL type of a column of kind k. Scalars are nullable (CEL's wrapper
// types), since any column may be NULL: `row.qty == null` type-checks, and `row.qty > 5` on a
// NULL is an evaluation error rather than an answer. A timestamp compares with null as it is.
func (k kind) celType() *types.Type {
	switch k {
	case kindInt:
		return types.NewNullableType(types.IntType)
	case kindDouble:
		return types.NewNullableType(types.DoubleType)
	case kindString, kindChar:
		return types.NewNullableType(types.StringType)
	case kindBool:
		return types.NewNullableType(types.BoolType)
	case kindTimestamp:
		return types.TimestampType
	}
	return types.DynType
}

// rowTypeName is the CEL type of row and old. One name serves every table: each table has its
// own environment.
const rowTypeName = "herald.Row"

// rowProvider declares the row type: one field per column, typed by kind. Everything else is
// the base registry's.
type rowProvider struct {
	types.Provider
	typ    *types.Type
	cols   []string
	fields map[string]*types.FieldType
}

func newRowProvider(base types.Provider, cols []filter.Column) *rowProvider {
	p := &rowProvider{Provider: base, typ: types.NewObjectType(rowTypeName), fields: map[string]*types.FieldType{}}
	for i, c := range cols {
		i, name := i, c.Name
		p.cols = append(p.cols, name)
		p.fields[name] = &types.FieldType{
			Type: kindOf(c.OID).celType(),
			IsSet: func(target any) bool {
				img, ok := target.(*Image)
				return ok && img.vals[i] != nil && !isAbsent(img.vals[i])
			},
			GetFrom: func(target any) (any, error) {
				img, ok := target.(*Image)
				if !ok {
					return nil, fmt.Errorf("no such image: reading column %s of null", name)
				}
				v := img.vals[i]
				if v == nil {
					// Not decoded: a rule reads only the columns its analysis found, so this
					// is a defect, reported as an error rather than read as NULL.
					return nil, fmt.Errorf("column %s was not decoded", name)
				}
				if e, ok := v.(*types.Err); ok {
					return nil, e
				}
				return v, nil
			},
		}
	}
	return p
}

func (p *rowProvider) FindStructType(name string) (*types.Type, bool) {
	if name == rowTypeName {
		return types.NewTypeTypeWithParam(p.typ), true
	}
	return p.Provider.FindStructType(name)
}

func (p *rowProvider) FindStructFieldNames(name string) ([]string, bool) {
	if name == rowTypeName {
		return p.cols, true
	}
	return p.Provider.FindStructFieldNames(name)
}

func (p *rowProvider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if name == rowTypeName {
		ft, ok := p.fields[field]
		return ft, ok
	}
	return p.Provider.FindStructFieldType(name, field)
}

// Image is one row image decoded for rules: the values of the columns a table's rules read,
// each decoded once per change and shared by every evaluation of it. It is immutable once
// built and safe for concurrent reads.
type Image struct {
	vals []ref.Val // by column position; nil: not read by any rule
	typ  *types.Type
	val  ref.Val // the image as a CEL value, made once so evaluations do not box it
}

// imageVal is an Image as a CEL value of the row type.
type imageVal struct{ img *Image }

func (v imageVal) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("a row converts to no native type")
}
func (v imageVal) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return v.img.typ
	}
	return types.NewErr("a row converts to no other type")
}

// Equal compares two images column by column.
func (v imageVal) Equal(other ref.Val) ref.Val {
	o, ok := other.(imageVal)
	if !ok {
		return types.False
	}
	if len(o.img.vals) != len(v.img.vals) {
		return types.False
	}
	for i, a := range v.img.vals {
		b := o.img.vals[i]
		if a == nil || b == nil || types.IsError(a) || types.IsError(b) {
			if a != b {
				return types.NewErr("comparing rows: a column is absent from one")
			}
			continue
		}
		if eq := a.Equal(b); eq != types.True {
			return eq
		}
	}
	return types.True
}
func (v imageVal) Type() ref.Type { return v.img.typ }
func (v imageVal) Value() any     { return v.img }

// absent marks a column an image does not hold: an unchanged value stored out of line, or a
// column a key-only old image lacks. Reading it is an error: it is not NULL, it is unknown.

func isAbsent(v ref.Val) bool {
	e, ok := v.(*types.Err)
	return ok && errors.Is(e, errAbsent)
}

var errAbsent = errors.New("absent")

func absentValue(col string) ref.Val {
	return types.WrapErr(fmt.Errorf("column %s is absent from this row image (an unchanged value stored out of line, or an old image that holds only the key): %w", col, errAbsent))
}

// decodeValue reads one JSON value of a column of kind k, as pgvalue writes it. A value that
// cannot be read as its kind becomes an error value, read as an error only by a rule that
// reads it.
func decodeValue(k kind, col string, raw json.RawMessage) ref.Val {
	if len(raw) == 0 || string(raw) == "null" {
		return types.NullValue
	}
	bad := func() ref.Val {
		return types.NewErr("column %s: the value cannot be read as its type", col)
	}
	switch k {
	case kindInt:
		s := raw
		if s[0] == '"' {
			s = s[1 : len(s)-1]
		}
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return bad()
		}
		return types.Int(n)
	case kindDouble:
		s := raw
		if s[0] == '"' {
			s = s[1 : len(s)-1]
		}
		f, err := strconv.ParseFloat(string(s), 64)
		if err != nil && !isRange(err) {
			return bad()
		}
		return types.Double(f)
	case kindString, kindChar:
		s, ok := jsonString(raw)
		if !ok {
			return bad()
		}
		if k == kindChar {
			s = strings.TrimRight(s, " ")
		}
		return types.String(s)
	case kindBool:
		switch string(raw) {
		case "true":
			return types.True
		case "false":
			return types.False
		}
		return bad()
	case kindTimestamp:
		s, ok := jsonString(raw)
		if !ok {
			return bad()
		}
		t, ok := parseTime(s)
		if !ok {
			return types.NewErr("column %s: %q is outside the times a rule can read (years 0001 to 9999)", col, s)
		}
		return types.Timestamp{Time: t}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&v); err != nil {
		return bad()
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// jsonString returns the text of a JSON string, copying only when it holds escapes.
func jsonString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// parseTime reads a timestamptz, timestamp or date as pgvalue writes them. A time without an
// offset reads as UTC. infinity, -infinity and years outside 0001–9999 do not read: CEL has no
// timestamp for them.
func parseTime(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			t = t.UTC()
			if t.Year() < 1 || t.Year() > 9999 {
				return time.Time{}, false
			}
			return t, true
		}
	}
	return time.Time{}, false
}

// decodeImage decodes the columns marked in need from a row image, in table order.
func decodeImage(cols []filter.Column, kinds []kind, need []bool, typ *types.Type, row change.Row) *Image {
	img := &Image{vals: make([]ref.Val, len(cols)), typ: typ}
	img.val = imageVal{img}
	for i, c := range cols {
		if !need[i] {
			continue
		}
		var raw json.RawMessage
		ok := false
		if i < len(row) && row[i].Name == c.Name {
			raw, ok = row[i].Value, true
		} else {
			raw, ok = row.Get(c.Name)
		}
		if !ok {
			img.vals[i] = absentValue(c.Name)
			continue
		}
		img.vals[i] = decodeValue(kinds[i], c.Name, raw)
	}
	return img
}
