package changefeed

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/changefeed/pgvalue"
	"github.com/jackc/pglogrepl"
)

// parseMessage decodes one pgoutput message. pglogrepl indexes its input without bounds checks,
// so a truncated or corrupt message would panic the process; here it becomes an error. It also
// refuses up front what could make pglogrepl allocate without bound (a truncate claiming four
// billion relations), which no recover could catch.
func parseMessage(data []byte, inStream bool) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty pgoutput message")
	}
	// Capacity is cut to length: pglogrepl slices a logical message's content by the length
	// the message claims, and a slice may legally reach past its length into its capacity,
	// which here is the rest of the connection's receive buffer. A corrupt length would then
	// read other messages' bytes (or hundreds of megabytes of them) instead of failing.
	data = data[:len(data):len(data)]
	if pglogrepl.MessageType(data[0]) == pglogrepl.MessageTypeTruncate {
		body := data[1:]
		if inStream {
			if len(body) < 4 {
				return nil, fmt.Errorf("truncate message of %d bytes is too short", len(data))
			}
			body = body[4:]
		}
		if len(body) < 5 {
			return nil, fmt.Errorf("truncate message of %d bytes is too short", len(data))
		}
		n := binary.BigEndian.Uint32(body)
		if uint64(len(body)) < 5+4*uint64(n) {
			return nil, fmt.Errorf("truncate message names %d relations but holds %d bytes", n, len(data))
		}
	}
	if err := checkTuples(data, inStream); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed pgoutput message of type %q (%d bytes): %v", data[0], len(data), r)
		}
	}()
	return pglogrepl.ParseV2(data, inStream)
}

// checkTuples walks the tuples of an Insert, Update or Delete and refuses one whose column
// lengths run past the message. pglogrepl allocates each column's declared length before it
// copies, so a corrupt length of four gigabytes would be allocated before any panic.
func checkTuples(data []byte, inStream bool) error {
	kind := data[0]
	if kind != 'I' && kind != 'U' && kind != 'D' {
		return nil
	}
	b := data[1:]
	skip := 4 // relation id
	if inStream {
		skip += 4 // xid
	}
	if len(b) < skip {
		return fmt.Errorf("%q message of %d bytes is too short", kind, len(data))
	}
	b = b[skip:]
	for len(b) > 0 {
		marker := b[0]
		if marker != 'N' && marker != 'K' && marker != 'O' {
			return fmt.Errorf("%q message: unknown tuple marker %q", kind, marker)
		}
		b = b[1:]
		if len(b) < 2 {
			return fmt.Errorf("%q message: tuple cut short", kind)
		}
		n := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		for i := 0; i < n; i++ {
			if len(b) < 1 {
				return fmt.Errorf("%q message: column %d of %d missing", kind, i+1, n)
			}
			k := b[0]
			b = b[1:]
			if k != 't' && k != 'b' {
				continue
			}
			if len(b) < 4 {
				return fmt.Errorf("%q message: column %d length cut short", kind, i+1)
			}
			l := uint64(binary.BigEndian.Uint32(b))
			b = b[4:]
			if l > uint64(len(b)) {
				return fmt.Errorf("%q message: column %d claims %d bytes, %d remain", kind, i+1, l, len(b))
			}
			b = b[l:]
		}
		if marker == 'N' {
			break
		}
	}
	return nil
}

// relation is the cached shape of a published table, as its latest Relation message said.
type relation struct {
	id       uint32
	table    string // schema-qualified
	identity byte   // replica identity: 'd' default, 'n' nothing, 'f' full, 'i' index
	cols     []relColumn
	key      []string // the replica identity's columns, in table order: what an old image carries
	tenant   int      // index of the tenant column, or -1
	follow   bool     // whether its changes are handed on
}

type relColumn struct {
	name string
	oid  uint32
	key  bool
}

// decoder turns pgoutput messages of one connection into rows. It owns the relation and type
// caches, which Postgres fills anew on every connection, so a decoder lives as long as one.
type decoder struct {
	follow func(table string) bool
	tenant string
	rels   map[uint32]*relation
	types  map[uint32]uint32 // a type announced by name (a domain, say) -> the built-in it decodes as
}

func newDecoder(follow func(string) bool, tenantColumn string) *decoder {
	return &decoder{follow: follow, tenant: tenantColumn, rels: map[uint32]*relation{}, types: map[uint32]uint32{}}
}

// relation replaces the cached shape of a table. A schema change arrives as a fresh Relation
// message before the table's next change, so the cache entry is replaced whole, never merged.
func (d *decoder) relation(m *pglogrepl.RelationMessage) {
	ns := m.Namespace
	if ns == "" {
		ns = "pg_catalog"
	}
	r := &relation{id: m.RelationID, table: ns + "." + m.RelationName, identity: m.ReplicaIdentity, tenant: -1}
	r.follow = d.follow(r.table)
	r.cols = make([]relColumn, len(m.Columns))
	for i, c := range m.Columns {
		oid := c.DataType
		if base, ok := d.types[oid]; ok {
			oid = base
		}
		r.cols[i] = relColumn{name: c.Name, oid: oid, key: c.Flags&1 == 1}
		if r.cols[i].key {
			r.key = append(r.key, c.Name)
		}
		if d.tenant != "" && c.Name == d.tenant {
			r.tenant = i
		}
	}
	d.rels[m.RelationID] = r
}

// typ records a non-built-in type. A domain is announced with its base type's name, so it
// decodes as that type; anything else stays text.
func (d *decoder) typ(m *pglogrepl.TypeMessage) {
	if m.Namespace == "" || m.Namespace == "pg_catalog" {
		if base, ok := pgvalue.OIDByName(m.Name); ok {
			d.types[m.DataType] = base
		}
	}
}

func (d *decoder) lookup(id uint32) (*relation, error) {
	r, ok := d.rels[id]
	if !ok {
		return nil, fmt.Errorf("change for relation %d arrived before its Relation message", id)
	}
	return r, nil
}

// tupleKind says which image a tuple is.
type tupleKind int

const (
	tupleNew tupleKind = iota // 'N': the new row; 'u' columns are unchanged TOAST values
	tupleOld                  // 'O': the whole old row (REPLICA IDENTITY FULL)
	tupleKey                  // 'K': only the identity's key columns carry values
)

// tenantOf is the tenant column's value as text: from the new row where it holds the column,
// else from the old row (a delete, or an update that left the column out).
func (d *decoder) tenantOf(r *relation, after, before change.Row) string {
	if r.tenant < 0 {
		return ""
	}
	name := r.cols[r.tenant].name
	v, ok := after.Get(name)
	if !ok {
		v, ok = before.Get(name)
	}
	if !ok || string(v) == "null" {
		return ""
	}
	if len(v) > 0 && v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	return string(v)
}

// fillFromOld puts the old image's value of each omitted column into after, in the relation's
// column order, and returns the columns it could not fill.
func fillFromOld(after change.Row, omitted []string, before change.Row, r *relation) (change.Row, []string) {
	var still []string
	fill := map[string]bool{}
	for _, name := range omitted {
		if _, ok := before.Get(name); ok {
			fill[name] = true
		} else {
			still = append(still, name)
		}
	}
	if len(fill) == 0 {
		return after, omitted
	}
	out := make(change.Row, 0, len(after)+len(fill))
	next := 0
	for _, col := range r.cols {
		if fill[col.name] {
			v, _ := before.Get(col.name)
			out = append(out, change.Column{Name: col.name, Value: v})
			continue
		}
		if next < len(after) && after[next].Name == col.name {
			out = append(out, after[next])
			next++
		}
	}
	return out, still
}
