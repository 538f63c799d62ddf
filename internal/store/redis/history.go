package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/history"
)

// History is the tables' history on Redis, shared by every node: one stream per table, in the
// slot of the table's interest owner. See history.Store for the contract and the package
// documentation for its keys.
type History struct {
	c   *Client        // read-only
	cfg history.Config // read-only

	appendSHA string // read-only: the append script's SHA-1, for EVALSHA in a pipeline
	read      *rueidis.Lua
}

var _ history.Store = (*History)(nil)

// NewHistory returns the tables' history on c, each table's bounded by cfg.
func NewHistory(c *Client, cfg history.Config) (*History, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sum := sha1.Sum([]byte(historyAppendScript))
	return &History{c: c, cfg: cfg.WithDefaults(), appendSHA: hex.EncodeToString(sum[:]), read: rueidis.NewLuaScript(historyReadScript)}, nil
}

// historyKey is table's stream: under the tag of the table's interest owner (cluster.TableOwner,
// "t:<table>"), so it shares their slot.
func (h *History) historyKey(table string) string { return h.c.key("y", ownerTag("t:"+table)) }

// hexLSN writes an LSN as 16 hex digits, so the scripts compare LSNs as strings.
func hexLSN(l change.LSN) string { return fmt.Sprintf("%016x", uint64(l)) }

func parseHexLSN(s string) (change.LSN, error) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) != 16 {
		return 0, fmt.Errorf("stored LSN %q is not 16 hex digits", s)
	}
	return change.LSN(v), nil
}

// Append appends each entry to its table's stream: one script per table, all of them in one
// pipeline (EVALSHA; EVAL again for those Redis did not know the script of, after a restart).
func (h *History) Append(ctx context.Context, entries []history.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	keys := make([]string, len(entries))
	args := make([][]string, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.Table == "" || e.LSN == 0 {
			return fmt.Errorf("history append: an entry without a table or an LSN")
		}
		keys[i] = h.historyKey(e.Table)
		args[i] = []string{strconv.FormatUint(uint64(e.LSN), 10) + "-0", hexLSN(e.LSN), hexLSN(e.Prev),
			string(e.Data), strconv.Itoa(h.cfg.MaxBytes), millis(h.cfg.MaxAge), strconv.Itoa(e.Size())}
	}
	cmds := make(rueidis.Commands, len(entries))
	for i := range entries {
		cmds[i] = h.c.rc.B().Evalsha().Sha1(h.appendSHA).Numkeys(1).Key(keys[i]).Arg(args[i]...).Build()
	}
	res := h.c.rc.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range res {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			cmds = append(cmds, h.c.rc.B().Eval().Script(historyAppendScript).Numkeys(1).Key(keys[i]).Arg(args[i]...).Build())
		}
		for k, r := range h.c.rc.DoMulti(ctx, cmds...) {
			res[again[k]] = r
		}
	}
	var errs []error
	for i, r := range res {
		if err := r.Error(); err != nil {
			errs = append(errs, fmt.Errorf("history append %s at %s: %w", entries[i].Table, entries[i].LSN, err))
		}
	}
	return errors.Join(errs...)
}

// Read returns what table's stream holds in (after, through]: one script, so the floor and
// the entries are read at one instant.
func (h *History) Read(ctx context.Context, table string, after, through change.LSN, lim history.Limit) (history.Range, error) {
	if table == "" {
		return history.Range{}, fmt.Errorf("history read: no table")
	}
	args := []string{"(" + strconv.FormatUint(uint64(after), 10) + "-0", strconv.FormatUint(uint64(through), 10) + "-0",
		strconv.Itoa(max(lim.Entries, 0)), strconv.Itoa(max(lim.Bytes, 0))}
	flat, err := h.read.Exec(ctx, h.c.rc, []string{h.historyKey(table)}, args).AsStrSlice()
	if err != nil {
		return history.Range{}, fmt.Errorf("history read %s: %w", table, err)
	}
	if len(flat) == 0 {
		return history.Range{}, nil
	}
	if len(flat) < 2 || (len(flat)-2)%3 != 0 {
		return history.Range{}, fmt.Errorf("history read %s: %d strings, want a floor, a flag and triples", table, len(flat))
	}
	r := history.Range{Found: true, More: flat[1] == "1", Entries: make([]history.Entry, 0, (len(flat)-2)/3)}
	if r.Floor, err = parseHexLSN(flat[0]); err != nil {
		return history.Range{}, fmt.Errorf("history read %s: %w", table, err)
	}
	for i := 2; i < len(flat); i += 3 {
		e := history.Entry{Table: table, Data: []byte(flat[i+2])}
		if e.LSN, err = parseHexLSN(flat[i]); err == nil {
			e.Prev, err = parseHexLSN(flat[i+1])
		}
		if err != nil {
			return history.Range{}, fmt.Errorf("history read %s: %w", table, err)
		}
		r.Entries = append(r.Entries, e)
	}
	return r, nil
}

// The history scripts. An entry's fields: l its LSN and p its Prev, each 16 hex digits (so
// string order is LSN order, without Lua's doubles); t when it was appended (ms, Redis's
// clock); b the bytes appended to the stream before it and s its own (its payload and
// history.EntryOverhead), so the bytes from an entry to the newest are b+s of the newest minus
// b of that entry; d the payload.
const historyPrelude = `
local function field(e, name)
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == name then return f[i + 1] end
  end
end
`

// KEYS: the table's stream. ARGV: id ("<lsn>-0"), lsn, prev, payload, max bytes, max age (ms),
// size. Returns 1 when appended, 0 when the stream's last entry is at or after lsn. It trims
// at most 16 entries per append, oldest first, never the one it appended: each append adds
// one, so the stream returns within its bounds.
const historyAppendScript = historyPrelude + `
local key, id, lsn, prev, data = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local maxb, agems, size = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local before = 0
local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
if #last > 0 then
  local l = field(last[1], 'l')
  if l >= lsn then return 0 end
  if l > prev then prev = l end
  before = tonumber(field(last[1], 'b')) + tonumber(field(last[1], 's'))
end
redis.call('XADD', key, id, 'l', lsn, 'p', prev, 't', now, 'b', before, 's', size, 'd', data)
local total = before + size
local oldest = redis.call('XRANGE', key, '-', '+', 'COUNT', 16)
local drop = 0
for _, e in ipairs(oldest) do
  if e[1] == id then break end
  if total - tonumber(field(e, 'b')) <= maxb and tonumber(field(e, 't')) > now - agems then break end
  drop = drop + 1
end
if drop > 0 then
  redis.call('XTRIM', key, 'MAXLEN', redis.call('XLEN', key) - drop)
end
redis.call('PEXPIRE', key, agems)
return 1
`

// KEYS: the table's stream. ARGV: start ("(<after>-0"), end ("<through>-0"), max entries,
// max bytes. Returns nothing when the stream does not exist; else the oldest entry's prev, "1"
// or "0" (stopped at a bound or not), then lsn, prev, payload of each entry in the range.
const historyReadScript = historyPrelude + `
local key = KEYS[1]
local first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)
if #first == 0 then return {} end
local out = {field(first[1], 'p'), '0'}
local start, maxn, maxb = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local n, bytes = 0, 0
while true do
  local batch = redis.call('XRANGE', key, start, ARGV[2], 'COUNT', 64)
  for _, e in ipairs(batch) do
    local d = field(e, 'd')
    if n >= maxn or bytes + #d > maxb then
      out[2] = '1'
      return out
    end
    n, bytes = n + 1, bytes + #d
    out[#out + 1] = field(e, 'l')
    out[#out + 1] = field(e, 'p')
    out[#out + 1] = d
    start = '(' .. e[1]
  end
  if #batch < 64 then return out end
end
`
