package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tables adapts the router to what sessions ask of it.
type tables struct{ router *router.Router }

var _ session.Tables = (*tables)(nil)

func (t *tables) Subscribe(ctx context.Context, s session.Subscriber, f *wire.Subscribe) (session.TableSubscription, error) {
	sub, unsubscribe, err := t.router.Subscribe(ctx, router.Request{Table: f.Table, Filter: f.Filter, Columns: f.Columns, Sub: f.Sub, Target: s})
	return session.TableSubscription{Head: sub.Head, Key: sub.Key, Unsubscribe: unsubscribe}, err
}

// schemaTTL bounds how long what the catalog says of a table is trusted: a column added by
// ALTER TABLE, a table added to the publication or a changed replica identity is seen after at
// most this long.
const schemaTTL = 5 * time.Second

// schemaCacheMax bounds the tables whose descriptions are remembered.
const schemaCacheMax = 1024

// pgSchema describes tables from the database's catalog, as Herald's publication streams
// them, on an ordinary connection pool with the same pinned settings and password rules as
// the changefeed's.
type pgSchema struct {
	pool        *pgxpool.Pool
	publication string

	mu    sync.Mutex
	cache map[string]cachedTable // guarded by mu
}

type cachedTable struct {
	info router.TableInfo
	at   time.Time
}

var _ router.Schema = (*pgSchema)(nil)

func newPGSchema(ctx context.Context, url, publication string) (*pgSchema, error) {
	cc, err := changefeed.ConnConfig(url, false)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("catalog pool: the database URL could not be parsed")
	}
	pc.ConnConfig.Config = *cc
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("catalog pool: %w", err)
	}
	return &pgSchema{pool: pool, publication: publication, cache: map[string]cachedTable{}}, nil
}

func (p *pgSchema) Close() { p.pool.Close() }

// tableQuery describes one table as the publication $3 streams it: its replica identity, its
// key (the identity index's columns, else the primary key's), and its published columns in
// order, each with the OID its values decode as (a domain's base type). It returns no row for
// a table that does not exist or that the publication does not cover. Postgres 15 and later
// can publish a subset of a table's columns (pg_publication_tables.attnames); before 15 every
// column is published.
const tableQuery = `
WITH rel AS (
	SELECT c.oid, c.relreplident, pt.cols
	FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace
	JOIN LATERAL (SELECT %s AS cols FROM pg_publication_tables p
		WHERE p.pubname = $3 AND p.schemaname = n.nspname AND p.tablename = c.relname LIMIT 1) pt ON true
	WHERE c.oid = to_regclass(quote_ident($1) || '.' || quote_ident($2))
)
SELECT rel.relreplident::text,
	COALESCE((SELECT array_agg(a.attname::text ORDER BY a.attnum)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = rel.oid AND CASE WHEN rel.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END), '{}'),
	COALESCE((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
		WHERE a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped AND (rel.cols IS NULL OR a.attname = ANY (rel.cols))), '{}'),
	COALESCE((SELECT array_agg(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END ORDER BY a.attnum)
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped AND (rel.cols IS NULL OR a.attname = ANY (rel.cols))), '{}')
FROM rel`

// Table describes table as Herald streams it; no columns when it does not.
func (p *pgSchema) Table(ctx context.Context, table string) (router.TableInfo, error) {
	p.mu.Lock()
	c, ok := p.cache[table]
	p.mu.Unlock()
	if ok && time.Since(c.at) < schemaTTL {
		return c.info, nil
	}
	info, err := p.read(ctx, table)
	if err != nil {
		return router.TableInfo{}, err
	}
	p.mu.Lock()
	if len(p.cache) >= schemaCacheMax {
		// Any client can name any table, existing or not: the cache must not grow with them.
		clear(p.cache)
	}
	p.cache[table] = cachedTable{info: info, at: time.Now()}
	p.mu.Unlock()
	return info, nil
}

func (p *pgSchema) read(ctx context.Context, table string) (router.TableInfo, error) {
	unavailable := func(err error) error {
		return &wire.Error{Code: wire.CodeUnavailable, Message: "the database did not answer a catalog query; retry with backoff", Err: err}
	}
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return router.TableInfo{}, unavailable(err)
	}
	defer conn.Release()
	cols := "NULL::name[]"
	if major(conn.Conn().PgConn().ParameterStatus("server_version")) >= 15 {
		cols = "p.attnames"
	}
	schema, name, _ := strings.Cut(table, ".")
	var (
		ident      string
		key, names []string
		oids       []uint32
	)
	err = conn.QueryRow(ctx, fmt.Sprintf(tableQuery, cols), schema, name, p.publication).Scan(&ident, &key, &names, &oids)
	if errors.Is(err, pgx.ErrNoRows) {
		return router.TableInfo{}, nil
	}
	if err != nil {
		return router.TableInfo{}, unavailable(err)
	}
	info := router.TableInfo{Key: key, Identity: router.Identity(ident[0])}
	for i, n := range names {
		info.Columns = append(info.Columns, filter.Column{Name: n, OID: oids[i]})
	}
	return info, nil
}

// major reads the major version from a server_version like "15.4 (Debian 15.4-1)".
func major(version string) int {
	end := 0
	for end < len(version) && version[end] >= '0' && version[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(version[:end])
	return n
}
