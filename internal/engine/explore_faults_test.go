// Faults of the world between steps: leases ended by the database clock, a Postgres crash, the
// retention passing and Purge, the downstream forgetting a token, a receipt locked by another
// transaction, and held requests landing.

package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tempotent/tempotent/internal/schema"
)

// endLease moves k's lease into the past, as the database clock moving on would for an attempt
// paused past its lease: just ended, or longer ago than the settle time. Requests the
// downstream holds land before the settle time has passed: that is what a settle time means.
func (x *explorer) endLease(k *explKey, pastSettle bool) error {
	if err := x.unlockAll(); err != nil { // the explorer's own writes must not wait for its locks
		return err
	}
	x.timePasses()
	ago := time.Second
	if pastSettle {
		x.land(k)
		ago = exploreSettle + time.Second
	}
	tag, err := x.pool.Exec(context.Background(), "UPDATE "+x.table()+
		" SET lease_expires_at = now() - $5::bigint * interval '1 microsecond' WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) AND state = 'pending'",
		k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID, ago.Microseconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		for _, a := range x.attempt {
			if a.k == k && !a.finished {
				a.leaseEndedByFault = true
				a.faultOutsideFn = a.faultOutsideFn || !a.inFn
			}
		}
		x.logf("fault: %s's lease ended %v ago", k.key.ID, ago)
	}
	return nil
}

// crash loses every asynchronous reservation not flushed yet, as a Postgres crash would.
func (x *explorer) crash() error {
	if err := x.unlockAll(); err != nil { // a crash ends every transaction
		return err
	}
	for r := range x.losable {
		tag, err := x.pool.Exec(context.Background(), "DELETE FROM "+x.table()+" WHERE reservation = $1 AND fence = 1 AND state = 'pending'", r.uuid())
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			x.logf("fault: crash lost reservation %x", r[:4])
			for _, a := range x.attempt {
				if a.holds && a.reservation == r {
					a.lost, a.k.crashed = true, true
				}
			}
		}
	}
	clear(x.losable)
	return nil
}

// timePasses: Postgres' WAL writer flushes asynchronous commits within 3 × wal_writer_delay
// (600 ms by default), so once time has passed no reservation is lost in a crash any more.
func (x *explorer) timePasses() { clear(x.losable) }

// purge lets k's retention pass and purges. An unresolved receipt must survive it.
//
// Not while an attempt of k is under way: it would have been paused for the whole retention,
// after the horizon guard let it in (the guard looks at when the activity was scheduled).
func (x *explorer) purge(k *explKey) error {
	ctx := context.Background()
	if x.underWay(k) || !x.purgeQuiet() {
		return nil
	}
	if err := x.unlockAll(); err != nil {
		return err
	}
	var exists bool
	if err := x.pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+x.table()+" WHERE id = $1)", k.key.ID).Scan(&exists); err != nil || !exists {
		return err
	}
	x.timePasses()
	if err := x.expire("id = $1", k.key.ID); err != nil {
		return err
	}
	return x.purgeNow()
}

// underWay reports whether an attempt of k has started and not finished.
func (x *explorer) underWay(k *explKey) bool {
	return slices.ContainsFunc(x.attempt, func(a *explAttempt) bool { return a.k == k && !a.finished })
}

// purgeQuiet reports whether a Purge may run now: no attempt is under way of a key whose
// retention has passed, which would have been paused for that whole retention.
func (x *explorer) purgeQuiet() bool {
	for _, k := range x.keys {
		if !x.underWay(k) {
			continue
		}
		var expired bool
		err := x.pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM "+x.table()+" WHERE id = $1 AND expires_at <= now())", k.key.ID).Scan(&expired)
		if err != nil || expired {
			return false
		}
	}
	return true
}

// purgeNow purges and checks that no receipt went that had to stay (unresolved, or under a live
// lease). A key whose settled receipt went, or may go at the next Purge (its retention passed,
// and its partition is held by another receipt), is retired: later attempts come from beyond
// the horizon.
func (x *explorer) purgeNow() error {
	ctx := context.Background()
	type seen struct {
		state string
		keep  bool // unresolved, or under a live lease
	}
	before := map[*explKey]seen{}
	for _, k := range x.keys {
		var r seen
		err := x.pool.QueryRow(ctx, "SELECT state, coalesce("+unresolved+" OR (state = 'pending' AND lease_expires_at > now()), false) FROM "+x.table()+
			" WHERE id = $1", k.key.ID).Scan(&r.state, &r.keep)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return err
		}
		before[k] = r
	}
	s, _ := NewStore(x.pool, &Config{Schema: x.schema})
	if _, err := s.Purge(ctx, 0); err != nil {
		return err
	}
	for k, r := range before {
		var exists, settled bool
		err := x.pool.QueryRow(ctx, "SELECT true, coalesce("+purgeable+", false) FROM "+x.table()+" WHERE id = $1", k.key.ID).Scan(&exists, &settled)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		switch {
		case !exists && r.keep:
			return fmt.Errorf("purge deleted %s's unresolved or running receipt (state %s)", k.key.ID, r.state)
		case !exists:
			x.logf("fault: retention passed, %s's %s receipt purged", k.key.ID, r.state)
		case settled:
			x.logf("fault: retention passed, %s's %s receipt stays until the next purge", k.key.ID, r.state)
		default:
			continue
		}
		if r.state != schema.StatePending {
			k.retired = true
		}
	}
	return nil
}

// expire lets the retention of the receipts where cond holds pass: their expires_at goes into
// the past and, when the receipts are partitioned, they move into the partition of a day old
// enough for Purge to retire.
func (x *explorer) expire(cond string, args ...any) error {
	if x.partitioned {
		return x.moveOld("expires_at = now() - interval '1 second'", cond, args...)
	}
	_, err := x.pool.Exec(context.Background(), "UPDATE "+x.table()+" SET expires_at = now() - interval '1 second' WHERE "+cond, args...)
	return err
}

// forget lets the downstream's key memory pass for k's token: its first use becomes older than
// the memory, and a deduplicating downstream forgets it.
//
// Not while an attempt of k holds the receipt: one that already decided to send the token would
// then have been paused for a day between deciding and sending, which no guard can see (the
// README states the limit: a pause longer than the downstream's key memory).
//
// Nor for a batch key: its downstream, its items' receipts, never forgets within the retention
// (Options.Batch).
func (x *explorer) forget(k *explKey) error {
	if !k.dedup || k.batch {
		return nil
	}
	if k.crashed {
		return nil
	}
	for _, a := range x.attempt {
		if a.k == k && a.holds && !a.finished {
			return nil
		}
	}
	if err := x.unlockAll(); err != nil {
		return err
	}
	x.timePasses()
	tag, err := x.pool.Exec(context.Background(), "UPDATE "+x.table()+" SET created_at = now() - interval '25 hours' WHERE id = $1", k.key.ID)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	k.forgotten = true
	x.down.forget(k.key.Token())
	x.logf("fault: the downstream forgot %s's token", k.key.ID)
	return nil
}

// lock has another transaction lock k's receipt row, and hold it until unlockAll: a completion
// that meets it waits out the lock timeout, again and again.
func (x *explorer) lock(k *explKey) error {
	if _, ok := x.locks[k]; ok {
		return nil
	}
	ctx := context.Background()
	tx, err := x.pool.Begin(ctx)
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, "SELECT FROM "+x.table()+" WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) FOR UPDATE",
		k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID)
	if err != nil || tag.RowsAffected() == 0 {
		return errors.Join(err, tx.Rollback(ctx))
	}
	x.locks[k] = tx
	x.logf("fault: another transaction locks %s's receipt", k.key.ID)
	return nil
}

// unlockAll ends the transactions that lock receipts.
func (x *explorer) unlockAll() error {
	var err error
	for k, tx := range x.locks {
		err = errors.Join(err, tx.Rollback(context.Background()))
		delete(x.locks, k)
		x.logf("another transaction lets %s's receipt go", k.key.ID)
	}
	return err
}

// land applies the requests the downstream holds for k.
func (x *explorer) land(k *explKey) {
	if n := x.down.land(k.key.Token(), k.dedup); n > 0 {
		x.logf("the downstream applied %d held request(s) of %s", n, k.key.ID)
	}
}
