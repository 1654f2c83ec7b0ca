package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stats is the state of an outbox's backlog.
type Stats struct {
	Pending       int64         // messages not delivered yet, dead ones aside
	OldestPending time.Duration // age of the oldest of them; 0 when there are none
	Dead          int64         // messages parked as dead, waiting for Requeue or Discard
}

// Stats counts the backlog, by the database's clock.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var oldest float64
	res := o.db.SendBatch(ctx, statsBatch(o.table))
	_, err := res.Exec()
	if err == nil {
		err = res.QueryRow().Scan(&st.Pending, &oldest, &st.Dead)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	st.OldestPending = time.Duration(oldest * float64(time.Second))
	return st, nil
}

// statsBatch is Stats' count of the undelivered messages on table, behind byIndex.
func statsBatch(table string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(byIndex)
	b.Queue(`SELECT
			count(*) FILTER (WHERE state = 'pending'),
			coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')), 0),
			count(*) FILTER (WHERE state = 'dead')
		FROM ` + table + ` WHERE state <> 'delivered'`)
	return b
}

// Prune deletes up to limit delivered messages older than the outbox's retention (limit <= 0
// means PruneBatchDefault) and returns how many it deleted. Pending and dead messages are never
// pruned. Dispatchers prune on their own (DispatcherConfig.Maintenance).
func (o *Outbox) Prune(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		limit = PruneBatchDefault
	}
	tag, err := o.db.Exec(ctx, `DELETE FROM `+o.table+` WHERE seq IN (
			SELECT seq FROM `+o.table+`
			WHERE state = 'delivered' AND delivered_at < now() - $1::bigint * interval '1 microsecond'
			ORDER BY delivered_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)`, o.cfg.Retention.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("outbox: prune: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ErrNotDead is matched by the errors of Requeue and Discard for a message that is not dead.
var ErrNotDead = errors.New("outbox: message is not dead")

// Requeue gives a dead message a fresh set of attempts, to be delivered at once: after the cause
// of its failures is fixed.
func (o *Outbox) Requeue(ctx context.Context, id string) error {
	tag, err := o.db.Exec(ctx, `UPDATE `+o.table+` SET state = 'pending', attempts = 0, available_at = now(), lease_until = NULL
		WHERE id = $1 AND state = 'dead'`, id)
	if err != nil {
		return fmt.Errorf("outbox: requeue %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q is not a dead message of this outbox (pending, delivered, pruned, or never put)", ErrNotDead, id)
	}
	return nil
}

// Discard deletes a dead message without delivering it, releasing the messages of its ordering
// key that wait behind it.
func (o *Outbox) Discard(ctx context.Context, id string) error {
	tag, err := o.db.Exec(ctx, `DELETE FROM `+o.table+` WHERE id = $1 AND state = 'dead'`, id)
	if err != nil {
		return fmt.Errorf("outbox: discard %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q is not a dead message of this outbox (pending, delivered, pruned, or never put)", ErrNotDead, id)
	}
	return nil
}
