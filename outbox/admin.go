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
	Dead          int64         // messages parked as dead, waiting for RequeueMessage or DiscardMessage
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

// ErrNotDead is matched by the errors of RequeueMessage and DiscardMessage (and of the deprecated
// Requeue and Discard) for a message that is not dead: nothing changed.
var ErrNotDead = errors.New("outbox: message is not dead")
