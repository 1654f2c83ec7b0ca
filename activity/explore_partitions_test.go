// The explorer on the partitioned table (TEMPOTENT_TEST_PARTITIONED): its partitions, and
// receipts moved into an old day at any moment for Purge to move back.

package activity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// relocate moves k's receipt into the old partition with its retention still running, as if
// it had been written ten days ago and its retention extended, and purges. Purge must move it
// back unchanged — or, under a live lease, leave it where it is — whatever its attempts are
// doing: a move is invisible to the state machine.
func (x *explorer) relocate(k *explKey) error {
	ctx := context.Background()
	if !x.purgeQuiet() {
		return nil
	}
	if err := x.unlockAll(); err != nil {
		return err
	}
	const where = "(namespace, tenant, operation, id) = ($1, $2, $3, $4)"
	args := []any{k.key.Namespace, k.key.Tenant, k.key.Operation, k.key.ID}
	var before string
	err := x.pool.QueryRow(ctx, "SELECT (to_jsonb(r) - 'bucket' - 'updated_at')::text FROM "+x.table()+" r WHERE "+where+
		" AND expires_at > now()", args...).Scan(&before) // past its retention, a move would be a purge
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := x.moveOld("", where, args...); err != nil {
		return err
	}
	if err := x.purgeNow(); err != nil {
		return err
	}
	var after string
	var live, old bool
	err = x.pool.QueryRow(ctx, "SELECT (to_jsonb(r) - 'bucket' - 'updated_at')::text, coalesce(lease_expires_at > now(), false), coalesce(tableoid = to_regclass($5), false) FROM "+
		x.table()+" r WHERE "+where, append(args, x.oldPartition())...).Scan(&after, &live, &old)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("moving %s's receipt between partitions lost it (it was %s)", k.key.ID, before)
	case err != nil:
		return err
	case after != before:
		return fmt.Errorf("moving %s's receipt between partitions changed it:\n  before %s\n  after  %s", k.key.ID, before, after)
	case old && !live:
		return fmt.Errorf("Purge left %s's receipt in a retired day although no live lease holds it there: %s", k.key.ID, after)
	case !old && live:
		return fmt.Errorf("Purge moved %s's receipt under a live lease", k.key.ID)
	}
	x.logf("fault: %s's receipt moved ten days back and purged (live lease: %v)", k.key.ID, live)
	return nil
}

// moveOld moves the receipts where cond holds into the old partition (creating it when a purge
// dropped it), applying set as well when it is not empty, flagged as Purge flags its own moves
// (the setting tempotent.move, which the uniqueness trigger skips).
func (x *explorer) moveOld(set, cond string, args ...any) error {
	ctx := context.Background()
	return pgx.BeginFunc(ctx, x.pool, func(tx pgx.Tx) error {
		old := x.oldPartition()
		from := exploreToday.AddDate(0, 0, -10)
		if _, err := tx.Exec(ctx, "SELECT set_config('tempotent.move', 'on', true)"); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", old).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE TABLE "+old+" PARTITION OF "+x.table()+
				" FOR VALUES FROM ("+pgLiteral(from)+") TO ("+pgLiteral(from.AddDate(0, 0, 1))+")"); err != nil {
				return err
			}
		}
		if set != "" {
			set = ", " + set
		}
		_, err := tx.Exec(ctx, "UPDATE "+x.table()+" SET bucket = "+pgLiteral(from.Add(12*time.Hour))+set+" WHERE "+cond, args...)
		return err
	})
}

// exploreToday is the day the exploration began, which its partitions are laid out from.
var exploreToday = time.Now().UTC().Truncate(24 * time.Hour)

func (x *explorer) oldPartition() string {
	return pgx.Identifier{x.schema, "receipts_explore_old"}.Sanitize()
}

// explorePartitions partitions s's empty receipts table for the explorer: its one partition,
// which holds every day until the day after tomorrow, gives way to one from nine days ago to
// tomorrow, so that moveOld can add a day before it that Purge retires. Purge creates the days
// after it as ever.
func explorePartitions(s *Store) error {
	ctx := context.Background()
	op := operatorFor(s)
	if err := op.Partition(ctx); err != nil {
		return err
	}
	today := exploreToday
	legacy := pgx.Identifier{s.cfg.Schema, "receipts_legacy"}.Sanitize()
	for _, stmt := range []string{
		"ALTER TABLE " + s.table() + " DETACH PARTITION " + legacy,
		"DROP TABLE " + legacy,
		"CREATE TABLE " + pgx.Identifier{s.cfg.Schema, "receipts_explore_recent"}.Sanitize() + " PARTITION OF " + s.table() +
			" FOR VALUES FROM (" + pgLiteral(today.AddDate(0, 0, -9)) + ") TO (" + pgLiteral(today.AddDate(0, 0, 1)) + ")",
	} {
		if _, err := s.db.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	_, err := op.Purge(ctx, 0)
	return err
}

// pgLiteral is t as a timestamptz literal, for the DDL that cannot take bind parameters.
func pgLiteral(t time.Time) string {
	return "'" + t.UTC().Format(time.RFC3339Nano) + "'::timestamptz"
}
