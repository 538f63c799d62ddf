package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/heraldrt/herald/internal/changefeed"
	"github.com/heraldrt/herald/internal/filter"
	"github.com/heraldrt/herald/internal/router"
	"github.com/heraldrt/herald/internal/session"
	"github.com/heraldrt/herald/internal/wire"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tables adapts the router to what sessions ask of it.
type tables struct{ router *router.Router }

var _ session.Tables = (*tables)(nil)

func (t *tables) Subscribe(ctx context.Context, s session.Subscriber, f *wire.Subscribe) (wire.Position, func(), error) {
	return t.router.Subscribe(ctx, router.Request{Table: f.Table, Filter: f.Filter, Columns: f.Columns, Sub: f.Sub, Target: s})
}

// schemaTTL bounds how long a table's columns are trusted: a column added by ALTER TABLE can
// be filtered on after at most this long.
const schemaTTL = 5 * time.Second

// schemaCacheMax bounds the tables whose columns are remembered.
const schemaCacheMax = 1024

// pgSchema reads table columns from the database's catalog, on an ordinary connection pool
// with the same pinned settings and password rules as the changefeed's.
type pgSchema struct {
	pool *pgxpool.Pool

	mu    sync.Mutex
	cache map[string]cachedColumns // guarded by mu
}

type cachedColumns struct {
	cols []filter.Column
	at   time.Time
}

func newPGSchema(ctx context.Context, url string) (*pgSchema, error) {
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
	return &pgSchema{pool: pool, cache: map[string]cachedColumns{}}, nil
}

func (p *pgSchema) Close() { p.pool.Close() }

// Columns returns table's columns in order, each with the OID its values decode as (a
// domain's base type); none when the table does not exist.
func (p *pgSchema) Columns(ctx context.Context, table string) ([]filter.Column, error) {
	p.mu.Lock()
	c, ok := p.cache[table]
	p.mu.Unlock()
	if ok && time.Since(c.at) < schemaTTL {
		return c.cols, nil
	}
	schema, name, _ := strings.Cut(table, ".")
	rows, err := p.pool.Query(ctx, `SELECT a.attname, CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = to_regclass(quote_ident($1) || '.' || quote_ident($2)) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, schema, name)
	if err != nil {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "the database did not answer a catalog query; retry with backoff", Err: err}
	}
	defer rows.Close()
	var cols []filter.Column
	for rows.Next() {
		var col filter.Column
		if err := rows.Scan(&col.Name, &col.OID); err != nil {
			return nil, &wire.Error{Code: wire.CodeInternal, Message: "reading the catalog failed", Err: err}
		}
		cols = append(cols, col)
	}
	if err := rows.Err(); err != nil {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "the database did not answer a catalog query; retry with backoff", Err: err}
	}
	p.mu.Lock()
	if len(p.cache) >= schemaCacheMax {
		// Any client can name any table, existing or not: the cache must not grow with them.
		clear(p.cache)
	}
	p.cache[table] = cachedColumns{cols: cols, at: time.Now()}
	p.mu.Unlock()
	return cols, nil
}
