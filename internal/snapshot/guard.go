package snapshot

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/heraldrt/herald/internal/change"
	"github.com/heraldrt/herald/internal/handoff"
)

// guard refuses a snapshot the stream may not join without a gap, once First.Check has
// accepted it: one taken while a transaction of this database that began before the table
// joined the publication still runs (Request.Joined), or while stalled transactions of this
// database have waited for a synchronous standby since before the look-back (firstSQL counted
// them in the first statement).
func (rd *read) guard(ctx context.Context, tx pgx.Tx, snap *handoff.Snapshot, stalled int64) error {
	if joined := rd.req.Joined; joined != 0 && snap.Xmin < joined {
		older, err := olderHere(ctx, tx, snap, joined)
		if err != nil {
			return err
		}
		if older != 0 {
			return rd.fail(handoff.ReasonTableNotReady, fmt.Sprintf(
				"the table joined the publication before transaction %d began, and transaction %d, which began before that, still runs: it may have written to the table unseen by the stream",
				joined, older), nil)
		}
	}
	if stalled > 0 {
		return rd.fail(handoff.ReasonSyncStandbyStalled, fmt.Sprintf(
			"%d %s waiting for a synchronous standby began more than %s (handoff.lookback) before the snapshot: streamed before the look-back, and not yet visible, it would be in neither the rows nor the stream",
			stalled, plural(stalled, "transaction", "transactions"), rd.r.cfg.Lookback), nil)
	}
	return nil
}

// olderHere returns the oldest transaction the snapshot saw running that began before joined
// and may belong to this database, or 0 when none may. A transaction of another database
// writes no row of this one, nor does this database's stream carry it, so it cannot leave a
// gap: a long writer elsewhere on the server does not hold the table back. The running
// transactions are the snapshot's own (XIP), so one that ended since still counts: it ran
// unseen by the snapshot. One is let off only when a backend of another database holds it
// (pg_stat_activity's datid and backend_xid, shown to every role) or another database has
// prepared it (pg_prepared_xacts); one that ended before they were read is not, and the read
// fails, to be retried.
func olderHere(ctx context.Context, tx pgx.Tx, snap *handoff.Snapshot, joined change.XID8) (change.XID8, error) {
	var older []int64
	for _, x := range snap.XIP {
		if x < joined {
			older = append(older, int64(x))
		}
	}
	if len(older) == 0 {
		return 0, nil
	}
	var here *int64
	if err := tx.QueryRow(ctx, olderHereSQL, older).Scan(&here); err != nil {
		return 0, fmt.Errorf("read which database the older transactions belong to: %w", err)
	}
	if here == nil {
		return 0, nil
	}
	return change.XID8(*here), nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// GuardAccess is what the sync-standby guard can see, as the role of a Reader's pool reads
// pg_stat_activity.
type GuardAccess struct {
	// Standbys is synchronous_standby_names: empty, no commit waits for a standby and the
	// guard has nothing to count.
	Standbys string
	// Role is the pool's role.
	Role string
	// SeesAll says the role has pg_read_all_stats's privileges, or is a superuser:
	// pg_stat_activity shows it every backend's wait. Without, it shows the role's own
	// backends' alone.
	SeesAll bool
}

// Limited says what keeps the guard from seeing every stalled transaction, and the fix; ok
// false when nothing does: no synchronous standby is named, or the role sees every backend.
func (a GuardAccess) Limited() (detail, fix string, limited bool) {
	if a.Standbys == "" || a.SeesAll {
		return "", "", false
	}
	return fmt.Sprintf("synchronous_standby_names is %s, but role %s cannot read other roles' activity (pg_read_all_stats): "+
			"a snapshot's guard sees only this role's transactions waiting for a synchronous standby, so while the standby is away "+
			"a snapshot subscription may miss a transaction another role committed before its look-back (handoff.lookback)",
			strconv.Quote(a.Standbys), strconv.Quote(a.Role)),
		"GRANT pg_read_all_stats TO " + quoteIdent(a.Role) + ";", true
}

// GuardAccess reads what the sync-standby guard can see, on a connection of the pool, outside
// any read; it takes no read slot. The guard itself reads synchronous_standby_names at each
// read: this is for telling a person, at start and in herald doctor.
func (r *Reader) GuardAccess(ctx context.Context) (GuardAccess, error) {
	var a GuardAccess
	if err := r.pool.QueryRow(ctx, accessSQL).Scan(&a.Standbys, &a.Role, &a.SeesAll); err != nil {
		return GuardAccess{}, fmt.Errorf("snapshot: read what the sync-standby guard can see: %w", err)
	}
	return a, nil
}
