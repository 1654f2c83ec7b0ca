// The audit log read whole, newest first: what every operator did lately, for a console or a
// command that shows it.

package operator

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Page sizes of Client.AuditLog.
const (
	AuditLogLimitDefault = 100
	AuditLogLimitMax     = 1000
)

// AuditLog returns the audit log's most recent records, of every target and action (receipts'
// and the outbox's), newest first: at most limit of them (AuditLogLimitDefault when limit is not
// positive), and only those whose ID is below before when before is positive (pass the last ID
// of a page to read the page after it). It reads the audit table's primary key, and changes
// nothing. A limit above AuditLogLimitMax fails with ErrInvalidFilter.
func (c *Client) AuditLog(ctx context.Context, limit int, before int64) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = AuditLogLimitDefault
	}
	if limit > AuditLogLimitMax {
		return nil, fmt.Errorf("read the audit log: %w: limit %d is above %d; read it a page at a time", ErrInvalidFilter, limit, AuditLogLimitMax)
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	rows, err := c.db.Query(ctx, fmt.Sprintf(`SELECT id, at, actor, action, target, reason, detail FROM %s
		WHERE $1::bigint <= 0 OR id < $1 ORDER BY id DESC LIMIT $2`, c.audit), before, limit)
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", c.explain(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		var detail []byte
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Reason, &detail)
		e.Detail = detail
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", c.explain(err))
	}
	return out, nil
}
