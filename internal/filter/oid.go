package filter

// The built-in type OIDs that decide a column's Type: the values of pg_type.oid, fixed across
// Postgres versions. The filter keeps its own copy rather than import the changefeed's value
// decoder, which is on the other side of the pipeline; TestOIDsMatchPgvalue checks the two
// agree.
const (
	boolOID        uint32 = 16
	byteaOID       uint32 = 17
	charOID        uint32 = 18 // "char", the one-byte internal type
	nameOID        uint32 = 19
	int8OID        uint32 = 20
	int2OID        uint32 = 21
	int4OID        uint32 = 23
	textOID        uint32 = 25
	oidOID         uint32 = 26
	jsonOID        uint32 = 114
	float4OID      uint32 = 700
	float8OID      uint32 = 701
	bpcharOID      uint32 = 1042
	varcharOID     uint32 = 1043
	dateOID        uint32 = 1082
	timeOID        uint32 = 1083
	timestampOID   uint32 = 1114
	timestamptzOID uint32 = 1184
	intervalOID    uint32 = 1186
	timetzOID      uint32 = 1266
	numericOID     uint32 = 1700
	uuidOID        uint32 = 2950
	jsonbOID       uint32 = 3802
)
