package pgvalue

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/testenv"
)

// connect opens a session with the settings the walsender is pinned to, on the simple protocol,
// so that every value comes back in its text format.
func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams["timezone"] = "UTC"
	cfg.RuntimeParams["datestyle"] = "ISO"
	cfg.RuntimeParams["intervalstyle"] = "postgres"
	cfg.RuntimeParams["bytea_output"] = "hex"
	cfg.RuntimeParams["extra_float_digits"] = "3"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// queryText runs sql and returns the text and type OID of each column of each row.
func queryText(t *testing.T, conn *pgx.Conn, sql string, args ...any) (rows [][]string, oids []uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer r.Close()
	for _, f := range r.FieldDescriptions() {
		if f.Format != pgx.TextFormatCode {
			t.Fatalf("%s: column %s is not in text format", sql, f.Name)
		}
		oids = append(oids, f.DataTypeOID)
	}
	for r.Next() {
		var row []string
		for _, v := range r.RawValues() {
			row = append(row, string(v))
		}
		rows = append(rows, row)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return rows, oids
}

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestPostgresValues reads values as Postgres itself prints them, and checks both the type OID it
// reports and the JSON this package makes of the text.
func TestPostgresValues(t *testing.T) {
	conn := connect(t)
	for _, tc := range []struct {
		name string
		expr string
		oid  uint32
		want string
	}{
		{"int2", `(-32768)::int2`, Int2OID, `-32768`},
		{"int4", `2147483647::int4`, Int4OID, `2147483647`},
		{"int8 2^53", `9007199254740992::int8`, Int8OID, `9007199254740992`},
		{"int8 2^53+1", `9007199254740993::int8`, Int8OID, `"9007199254740993"`},
		{"oid", `4294967295::oid`, OIDOID, `4294967295`},
		{"numeric keeps scale", `1.10::numeric`, NumericOID, `1.10`},
		{"numeric zero scale", `0.000::numeric`, NumericOID, `0.000`},
		{"numeric 1e30", `1e30::numeric`, NumericOID, `1000000000000000000000000000000`},
		{"numeric past float64", `0.1000000000000000055::numeric`, NumericOID, `"0.1000000000000000055"`},
		{"numeric NaN", `'NaN'::numeric`, NumericOID, `"NaN"`},
		{"numeric -Infinity", `'-Infinity'::numeric`, NumericOID, `"-Infinity"`},
		{"float8 exponent", `1e100::float8`, Float8OID, `1e+100`},
		{"float8 small", `1.5e-7::float8`, Float8OID, `1.5e-07`},
		{"float8 shortest", `0.1::float8 + 0.2::float8`, Float8OID, `0.30000000000000004`},
		{"float8 -0", `'-0'::float8`, Float8OID, `-0`},
		{"float8 NaN", `'NaN'::float8`, Float8OID, `"NaN"`},
		{"float4 Infinity", `'Infinity'::float4`, Float4OID, `"Infinity"`},
		{"float4", `0.1::float4`, Float4OID, `0.1`},
		{"bool", `true`, BoolOID, `true`},
		{"jsonb", `'{"b":1,"a":[1,2.50]}'::jsonb`, JSONBOID, `{"a": [1, 2.50], "b": 1}`},
		{"json", `'{"b":1, "a":2}'::json`, JSONOID, `{"b":1,"a":2}`},
		{"json with line breaks", `E'\r\n{"b":\r\n1,\n"a":"x\\ny"}\r\n'::json`, JSONOID, `{"b":1,"a":"x\ny"}`},
		{"bytea", `'\x0A0b'::bytea`, ByteaOID, `"\\x0a0b"`},
		{"text", `E'a"b\\c\nd'::text`, TextOID, `"a\"b\\c\nd"`},
		{"bpchar", `'ab'::char(4)`, BPCharOID, `"ab  "`},
		{"uuid", `'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid`, UUIDOID, `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{"interval", `'1 day 2 hours'::interval`, IntervalOID, `"1 day 02:00:00"`},
		{"money", `1234.56::money`, 790, `"$1,234.56"`},
		{"timetz", `'10:00+05:30'::timetz`, TimetzOID, `"10:00:00+05:30"`},
		{"date BC", `'0044-03-15 BC'::date`, DateOID, `"0044-03-15 BC"`},
		{"timestamptz", `'2024-01-06 14:00:00.123456+05:30'::timestamptz`, TimestamptzOID, `"2024-01-06T08:30:00.123Z"`},
		{"timestamptz infinity", `'infinity'::timestamptz`, TimestamptzOID, `"infinity"`},
		{"timestamptz BC", `'0044-03-15 10:00:00+00 BC'::timestamptz`, TimestamptzOID, `"0044-03-15 10:00:00+00 BC"`},
		{"timestamptz year 12345", `'12345-01-01 00:00:00+00'::timestamptz`, TimestamptzOID, `"12345-01-01 00:00:00+00"`},
		{"timestamp", `'2024-01-06 14:00:00.5'::timestamp`, TimestampOID, `"2024-01-06T14:00:00.500"`},
		{"int4[] with NULL", `ARRAY[1,2,NULL]::int4[]`, Int4ArrayOID, `[1,2,null]`},
		{"int4[] empty", `'{}'::int4[]`, Int4ArrayOID, `[]`},
		{"int4[] two dimensions", `'{{1,2},{3,4}}'::int4[]`, Int4ArrayOID, `[[1,2],[3,4]]`},
		{"int4[] lower bound 0", `'[0:1]={7,8}'::int4[]`, Int4ArrayOID, `[7,8]`},
		{"int4[] decorated two dimensions", `'[1:2][0:0]={{1},{2}}'::int4[]`, Int4ArrayOID, `[[1],[2]]`},
		{"int8[]", `ARRAY[9007199254740993, 1]::int8[]`, Int8ArrayOID, `["9007199254740993",1]`},
		{"int2[]", `ARRAY[1,-2]::int2[]`, Int2ArrayOID, `[1,-2]`},
		{"text[] quoting", `ARRAY['a,b','c"d',NULL,'NULL','',' x','\','{}']::text[]`, TextArrayOID, `["a,b","c\"d",null,"NULL",""," x","\\","{}"]`},
		{"varchar[]", `ARRAY['a','b c']::varchar[]`, VarcharArrayOID, `["a","b c"]`},
		{"bool[]", `ARRAY[true,false,NULL]`, BoolArrayOID, `[true,false,null]`},
		{"float8[]", `ARRAY['NaN','-Infinity','-0',1.5]::float8[]`, Float8ArrayOID, `["NaN","-Infinity",-0,1.5]`},
		{"numeric[]", `ARRAY[1.10,'NaN',0.1000000000000000055]::numeric[]`, NumericArrayOID, `[1.10,"NaN","0.1000000000000000055"]`},
		{"uuid[]", `ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11']::uuid[]`, UUIDArrayOID, `["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]`},
		{"jsonb[]", `ARRAY['{"a":1}'::jsonb,'null','"NULL"']`, JSONBArrayOID, `[{"a": 1},null,"NULL"]`},
		{"json[]", `ARRAY['[1, "x,y"]'::json]`, JSONArrayOID, `[[1,"x,y"]]`},
		{"bytea[]", `ARRAY['\x0a'::bytea, '\x'::bytea]`, ByteaArrayOID, `["\\x0a","\\x"]`},
		{"date[]", `ARRAY['2024-01-06','0044-03-15 BC','infinity']::date[]`, DateArrayOID, `["2024-01-06","0044-03-15 BC","infinity"]`},
		{"timestamptz[]", `ARRAY['2024-01-06 14:00:00.5+05','-infinity']::timestamptz[]`, TimestamptzArrayOID, `["2024-01-06T09:00:00.500Z","-infinity"]`},
		{"timestamp[]", `ARRAY['2024-01-06 14:00:00']::timestamp[]`, TimestampArrayOID, `["2024-01-06T14:00:00.000"]`},
		{"interval[]", `ARRAY['1 day'::interval]`, IntervalArrayOID, `["1 day"]`},
		{"name[]", `ARRAY['pg_class'::name]`, NameArrayOID, `["pg_class"]`},
		{"bpchar[]", `ARRAY['a'::char(2)]`, BPCharArrayOID, `["a "]`},
		{"box[]", `ARRAY[box '((1,1),(0,0))', box '((2,2),(1,1))']`, BoxArrayOID, `["(1,1),(0,0)","(2,2),(1,1)"]`},
		{"point[]", `ARRAY[point '(1,2)']`, 1017, `["(1,2)"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, oids := queryText(t, conn, "SELECT "+tc.expr)
			if oids[0] != tc.oid {
				t.Errorf("SELECT %s: type OID %d, want %d", tc.expr, oids[0], tc.oid)
			}
			text := rows[0][0]
			if got := AppendJSON(nil, oids[0], []byte(text)); string(got) != tc.want {
				t.Errorf("SELECT %s gives %q, which becomes %s, want %s", tc.expr, text, got, tc.want)
			}
		})
	}
}

// TestPostgresTimestamptz prints a spread of instants, from local-mean-time years to the far
// future, in zones with odd offsets, and checks that each text decodes to the instant Postgres
// itself prints in UTC (to_char's MS truncates, as this package does).
func TestPostgresTimestamptz(t *testing.T) {
	conn := connect(t)
	const query = `
		SELECT ts::text,
		       (ts AT TIME ZONE 'UTC')::text,
		       to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS')
		FROM (
			SELECT generate_series('1800-01-01 00:00:00.999999+00'::timestamptz,
			                       '2100-01-01 00:00:00+00',
			                       '397 days 7 hours 13 minutes 17.123457 seconds') AS ts
			UNION ALL SELECT unnest(ARRAY[
				'1883-11-18 12:00:00+00', '1900-01-01 00:00:00+00', '1930-06-01 00:00:00+00',
				'0001-01-01 12:00:00+00', '9999-12-31 00:00:00.999999+00',
				'2024-01-06 08:30:00.123456+00', '1969-12-31 23:59:59.999+00']::timestamptz[])
		) s`
	zones := []string{
		"UTC",
		"America/New_York", // -04:56:02 before 1883
		"Asia/Kolkata",     // +05:21:10, +05:53:28, +06:30, +05:30
		"Europe/Amsterdam", // +00:19:32 and +01:19:32 before 1937
		"America/St_Johns", // -03:30, and -03:30:52 once
		"Pacific/Chatham",  // +13:45
		"Africa/Monrovia",  // -00:44:30
		"Asia/Kathmandu",   // +05:45
	}
	for _, zone := range zones {
		t.Run(zone, func(t *testing.T) {
			exec(t, conn, "SET timezone = '"+zone+"'")
			rows, _ := queryText(t, conn, query)
			if len(rows) < 250 {
				t.Fatalf("got %d rows, want at least 250", len(rows))
			}
			for _, r := range rows {
				zoned, wall, want := r[0], r[1], r[2]
				if got := AppendJSON(nil, TimestamptzOID, []byte(zoned)); string(got) != `"`+want+`Z"` {
					t.Errorf("timestamptz %q = %s, want %q", zoned, got, want+"Z")
				}
				if got := AppendJSON(nil, TimestampOID, []byte(wall)); string(got) != `"`+want+`"` {
					t.Errorf("timestamp %q = %s, want %q", wall, got, want)
				}
			}
		})
	}
	t.Run("texts that stay text", func(t *testing.T) {
		exec(t, conn, "SET timezone = 'America/New_York'")
		rows, _ := queryText(t, conn, `SELECT unnest(ARRAY['infinity', '-infinity',
			'0044-03-15 10:00:00+00 BC', '12345-01-01 00:00:00+00']::timestamptz[])::text`)
		for _, r := range rows {
			want, _ := json.Marshal(r[0])
			if got := AppendJSON(nil, TimestamptzOID, []byte(r[0])); string(got) != string(want) {
				t.Errorf("timestamptz %q = %s, want %s", r[0], got, want)
			}
		}
	})
}

// TestPostgresCatalog checks the catalogue against pg_type: each name's OID, its array's OID, and
// the delimiter its array text uses.
func TestPostgresCatalog(t *testing.T) {
	conn := connect(t)
	for _, b := range builtins {
		t.Run(b.name, func(t *testing.T) {
			rows, _ := queryText(t, conn, `SELECT oid, typarray, typdelim FROM pg_type
				WHERE typname = $1 AND typnamespace = 'pg_catalog'::regnamespace`, b.name)
			if len(rows) != 1 {
				t.Fatalf("pg_type has %d rows named %s, want 1", len(rows), b.name)
			}
			want := rows[0][0] + " " + rows[0][1] + " " + rows[0][2]
			_, delim, _ := arrayElem(b.array)
			got := fmt.Sprintf("%d %d %c", b.oid, b.array, delim)
			if got != want {
				t.Errorf("%s: oid, array oid, delimiter = %s, pg_type says %s", b.name, got, want)
			}
		})
	}
}
