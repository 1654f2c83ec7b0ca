// Retiring the days of a partitioned receipts table (Partition): creating the days ahead, and
// dropping a day once its retention has passed, after moving out what it must keep.

package operator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/schema"
)

// partition is one day of receipts: bucket in [from, to); from is the zero time for the legacy
// partition, which starts at MINVALUE.
type partition struct {
	name     string
	from, to time.Time
	rows     float64 // Postgres' estimate (pg_class.reltuples), -1 if never counted
}

// partitions lists the receipts' partitions in bound order.
func (c *Client) partitions(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]partition, error) {
	rows, err := db.Query(ctx, `
SELECT c.relname,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz,
	c.reltuples
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) AND c.relispartition
ORDER BY 3`, c.receipts)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition, error) {
		var (
			p        partition
			from, to *time.Time
		)
		err := r.Scan(&p.name, &from, &to, &p.rows)
		if from != nil {
			p.from = *from
		}
		if to != nil {
			p.to = *to
		}
		return p, err
	})
	// A partition that another purger is detaching has no bound any more: it is not listed.
	return slices.DeleteFunc(ps, func(p partition) bool { return p.to.IsZero() }), err
}

// createAhead creates the partitions that are missing from the last one's end to schema.PartitionsAhead
// days from now, one per UTC day, in one transaction that purgers of the schema take in turn.
func (c *Client) createAhead(ctx context.Context) error {
	return pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock(hashtext('tempotent.partitions.' || $2))",
			c.lockTimeout, c.cfg.Schema); err != nil {
			return err
		}
		var last, horizon time.Time
		if err := tx.QueryRow(ctx, "SELECT now() + $1::int * interval '1 day'", schema.PartitionsAhead).Scan(&horizon); err != nil {
			return err
		}
		ps, err := c.partitions(ctx, tx)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			return errors.New("the receipts table has no partitions: it was not made by Client.Partition")
		}
		last = ps[len(ps)-1].to
		for from := last.UTC(); from.Before(horizon); {
			to := from.AddDate(0, 0, 1).Truncate(24 * time.Hour)
			name := pgx.Identifier{c.cfg.Schema, "receipts_" + from.Format("20060102")}.Sanitize()
			// Created apart and then attached: CREATE TABLE … PARTITION OF would lock the parent
			// against every receipt statement, ATTACH only against other schema changes.
			for _, stmt := range []string{
				"CREATE TABLE " + name + " (LIKE " + c.receipts + " INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
				"ALTER TABLE " + c.receipts + " ATTACH PARTITION " + name + " FOR VALUES FROM (" + pgLiteral(from) + ") TO (" + pgLiteral(to) + ")",
			} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("create partition %s: %w", name, err)
				}
			}
			from = to
		}
		return nil
	})
}

// purgePartitions is Purge on a partitioned table: it creates the partitions ahead and retires
// every day whose retention and grace have passed. It returns how many receipts the dropped
// partitions held, as Postgres estimates them.
func (c *Client) purgePartitions(ctx context.Context) (int64, error) {
	if err := c.createAhead(ctx); err != nil {
		return 0, err
	}
	ps, err := c.partitions(ctx, c.db)
	if err != nil {
		return 0, err
	}
	var dropped float64
	for _, p := range ps {
		if time.Since(p.to) < c.cfg.Retention+retireGrace {
			break // in bound order: the later ones are younger
		}
		ok, err := c.retire(ctx, p)
		if err != nil {
			return int64(dropped), fmt.Errorf("retire partition %s: %w", p.name, err)
		}
		if ok {
			dropped += math.Max(p.rows, 0)
		}
	}
	return int64(dropped), nil
}

// retire moves what p must keep into today's partition, then detaches and drops p if nothing
// that must be kept is left in it: a receipt whose lease is live is not moved (its attempt's
// next write would fail on the move), and holds the partition until a later Purge. It reports
// whether p was dropped.
func (c *Client) retire(ctx context.Context, p partition) (bool, error) {
	from := "'-infinity'"
	if !p.from.IsZero() {
		from = pgLiteral(p.from)
	}
	err := pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true), set_config($3, 'on', true)",
			c.lockTimeout, c.statementTimeout, moveSetting)
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+c.receipts+" SET bucket = now(), updated_at = now()"+
				" WHERE bucket >= "+from+" AND bucket < "+pgLiteral(p.to)+
				" AND "+keep+" AND (lease_expires_at IS NULL OR lease_expires_at <= now())")
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("move the receipts it must keep: %w", err)
	}
	name := pgx.Identifier{c.cfg.Schema, p.name}.Sanitize()
	var dropped bool
	err = pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		// Purgers of the schema take turns (createAhead's lock); one that comes second finds
		// the partition gone, in a statement whose snapshot is taken after the lock.
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock(hashtext('tempotent.partitions.' || $2))",
			c.lockTimeout, c.cfg.Schema); err != nil {
			return err
		}
		var attached bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2))",
			name, c.receipts).Scan(&attached); err != nil {
			return err
		}
		if !attached {
			return errHeld
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+c.receipts+" DETACH PARTITION "+name); err != nil {
			return err
		}
		var held bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+name+" WHERE "+keep+")").Scan(&held); err != nil {
			return err
		}
		if held {
			return errHeld // rolls the detach back
		}
		_, err := tx.Exec(ctx, "DROP TABLE "+name)
		dropped = err == nil
		return err
	})
	if errors.Is(err, errHeld) {
		return false, nil
	}
	return dropped, err
}

// errHeld rolls back a retirement that must not drop its partition: it holds receipts that must
// be kept, or another purger retired it first.
var errHeld = errors.New("the partition holds receipts that must be kept, or is gone")

// pgLiteral is t as a timestamptz literal, for the DDL that cannot take bind parameters.
func pgLiteral(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'::timestamptz"
}

// firstLine is stmt's first line, to say which statement failed.
func firstLine(stmt string) string {
	line, _, _ := strings.Cut(stmt, "\n")
	return line
}
