package pgvalue

// OIDs of the built-in types this package has a rule for. Built-in OIDs are fixed in
// pg_type.dat and do not change between Postgres versions; TestPostgresCatalog checks every
// number here against a real server's pg_type.
const (
	BoolOID        uint32 = 16
	ByteaOID       uint32 = 17
	CharOID        uint32 = 18 // "char", the one-byte internal type
	NameOID        uint32 = 19
	Int8OID        uint32 = 20
	Int2OID        uint32 = 21
	Int4OID        uint32 = 23
	TextOID        uint32 = 25
	OIDOID         uint32 = 26
	JSONOID        uint32 = 114
	Float4OID      uint32 = 700
	Float8OID      uint32 = 701
	BPCharOID      uint32 = 1042
	VarcharOID     uint32 = 1043
	DateOID        uint32 = 1082
	TimeOID        uint32 = 1083
	TimestampOID   uint32 = 1114
	TimestamptzOID uint32 = 1184
	IntervalOID    uint32 = 1186
	TimetzOID      uint32 = 1266
	NumericOID     uint32 = 1700
	UUIDOID        uint32 = 2950
	JSONBOID       uint32 = 3802

	BoolArrayOID        uint32 = 1000
	ByteaArrayOID       uint32 = 1001
	NameArrayOID        uint32 = 1003
	Int2ArrayOID        uint32 = 1005
	Int4ArrayOID        uint32 = 1007
	TextArrayOID        uint32 = 1009
	BPCharArrayOID      uint32 = 1014
	VarcharArrayOID     uint32 = 1015
	Int8ArrayOID        uint32 = 1016
	Float4ArrayOID      uint32 = 1021
	Float8ArrayOID      uint32 = 1022
	OIDArrayOID         uint32 = 1028
	TimestampArrayOID   uint32 = 1115
	DateArrayOID        uint32 = 1182
	TimeArrayOID        uint32 = 1183
	TimestamptzArrayOID uint32 = 1185
	IntervalArrayOID    uint32 = 1187
	NumericArrayOID     uint32 = 1231
	UUIDArrayOID        uint32 = 2951
	JSONArrayOID        uint32 = 199
	JSONBArrayOID       uint32 = 3807
	TimetzArrayOID      uint32 = 1270

	// BoxOID's array is the one built-in array whose text separates elements with ';', because
	// a box's own text is full of commas.
	BoxOID      uint32 = 603
	BoxArrayOID uint32 = 1020
)

// builtin is one row of pg_catalog's pg_type: a base, range or multirange type and its array
// type.
type builtin struct {
	name  string
	oid   uint32
	array uint32
}

// builtins is every pg_catalog base, range and multirange type that has an array type, as
// Postgres 15 lists them (SELECT typname, oid, typarray FROM pg_type WHERE typnamespace =
// 'pg_catalog'::regnamespace AND typtype IN ('b','r','m') AND typcategory <> 'A' AND typarray
// <> 0). Types with no rule of their own are here so that their arrays are still read as arrays,
// and so that OIDByName knows the base of a domain over them.
var builtins = [...]builtin{
	{"bool", BoolOID, BoolArrayOID},
	{"bytea", ByteaOID, ByteaArrayOID},
	{"char", CharOID, 1002},
	{"name", NameOID, NameArrayOID},
	{"int8", Int8OID, Int8ArrayOID},
	{"int2", Int2OID, Int2ArrayOID},
	{"int4", Int4OID, Int4ArrayOID},
	{"regproc", 24, 1008},
	{"text", TextOID, TextArrayOID},
	{"oid", OIDOID, OIDArrayOID},
	{"tid", 27, 1010},
	{"xid", 28, 1011},
	{"cid", 29, 1012},
	{"json", JSONOID, JSONArrayOID},
	{"xml", 142, 143},
	{"point", 600, 1017},
	{"lseg", 601, 1018},
	{"path", 602, 1019},
	{"box", BoxOID, BoxArrayOID},
	{"polygon", 604, 1027},
	{"line", 628, 629},
	{"cidr", 650, 651},
	{"float4", Float4OID, Float4ArrayOID},
	{"float8", Float8OID, Float8ArrayOID},
	{"circle", 718, 719},
	{"macaddr8", 774, 775},
	{"money", 790, 791},
	{"macaddr", 829, 1040},
	{"inet", 869, 1041},
	{"aclitem", 1033, 1034},
	{"bpchar", BPCharOID, BPCharArrayOID},
	{"varchar", VarcharOID, VarcharArrayOID},
	{"date", DateOID, DateArrayOID},
	{"time", TimeOID, TimeArrayOID},
	{"timestamp", TimestampOID, TimestampArrayOID},
	{"timestamptz", TimestamptzOID, TimestamptzArrayOID},
	{"interval", IntervalOID, IntervalArrayOID},
	{"timetz", TimetzOID, TimetzArrayOID},
	{"bit", 1560, 1561},
	{"varbit", 1562, 1563},
	{"numeric", NumericOID, NumericArrayOID},
	{"refcursor", 1790, 2201},
	{"regprocedure", 2202, 2207},
	{"regoper", 2203, 2208},
	{"regoperator", 2204, 2209},
	{"regclass", 2205, 2210},
	{"regtype", 2206, 2211},
	{"uuid", UUIDOID, UUIDArrayOID},
	{"txid_snapshot", 2970, 2949},
	{"pg_lsn", 3220, 3221},
	{"tsvector", 3614, 3643},
	{"tsquery", 3615, 3645},
	{"gtsvector", 3642, 3644},
	{"regconfig", 3734, 3735},
	{"regdictionary", 3769, 3770},
	{"jsonb", JSONBOID, JSONBArrayOID},
	{"int4range", 3904, 3905},
	{"numrange", 3906, 3907},
	{"tsrange", 3908, 3909},
	{"tstzrange", 3910, 3911},
	{"daterange", 3912, 3913},
	{"int8range", 3926, 3927},
	{"jsonpath", 4072, 4073},
	{"regnamespace", 4089, 4090},
	{"regrole", 4096, 4097},
	{"regcollation", 4191, 4192},
	{"int4multirange", 4451, 6150},
	{"nummultirange", 4532, 6151},
	{"tsmultirange", 4533, 6152},
	{"tstzmultirange", 4534, 6153},
	{"datemultirange", 4535, 6155},
	{"int8multirange", 4536, 6157},
	{"pg_snapshot", 5038, 5039},
	{"xid8", 5069, 271},
}

var (
	oidByName   map[string]uint32 // typname -> oid, arrays spelled with a leading '_'
	elemOfArray map[uint32]uint32 // array oid -> element oid
)

func init() {
	oidByName = make(map[string]uint32, 2*len(builtins))
	elemOfArray = make(map[uint32]uint32, len(builtins))
	for _, b := range builtins {
		oidByName[b.name] = b.oid
		oidByName["_"+b.name] = b.array
		elemOfArray[b.array] = b.oid
	}
}

// OIDByName maps a built-in type name as a pgoutput Type message or pg_type.typname spells it
// ("int4", "_int4", "timestamptz", "bool", ...) to its OID, so a domain or a type announced by
// name can be decoded as its base type. The name is pg_catalog's: a Type message names a
// domain's base type, and names a type in pg_catalog with an empty namespace, so a caller should
// look a name up here only when the namespace is empty or "pg_catalog". SQL spellings such as
// "integer" or "timestamp with time zone" are not typnames and are not found.
func OIDByName(name string) (uint32, bool) {
	oid, ok := oidByName[name]
	return oid, ok
}

// arrayElem reports the element type and the element delimiter of a built-in array type.
func arrayElem(oid uint32) (elem uint32, delim byte, ok bool) {
	elem, ok = elemOfArray[oid]
	if oid == BoxArrayOID {
		return elem, ';', ok
	}
	return elem, ',', ok
}
