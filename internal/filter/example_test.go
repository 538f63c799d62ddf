package filter_test

import (
	"encoding/json"
	"fmt"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/heraldrt/herald/internal/filter"
)

func Example() {
	cols := []filter.Column{
		{Name: "id", OID: pgvalue.Int8OID},
		{Name: "org_id", OID: pgvalue.TextOID},
		{Name: "qty", OID: pgvalue.Int4OID},
	}
	f, err := filter.Parse(json.RawMessage(`{"and":[{"eq":["org_id","acme"]},{"gt":["qty",5]}]}`), cols)
	if err != nil {
		fmt.Println(err)
		return
	}
	row := change.Row{
		{Name: "id", Value: json.RawMessage(`7`)},
		{Name: "org_id", Value: json.RawMessage(`"acme"`)},
		{Name: "qty", Value: json.RawMessage(`9`)},
	}
	fmt.Println(f.Eval(row))
	fmt.Println(f.Eval(row[:2])) // qty absent: cannot tell
	col, keys, _ := f.IndexKeys()
	fmt.Println(col, keys)

	_, err = filter.Parse(json.RawMessage(`{"gt":["qty","5"]}`), cols)
	fmt.Println(err)
	// Output:
	// true
	// unknown
	// org_id [acme]
	// filter at gt[1]: gt compares qty (int4) with the string "5" (fix: write the value as a JSON number: 5)
}
