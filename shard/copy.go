package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// copy copies the tenant's receipts from src to dst in one transaction on dst, which first
// deletes what dst held of the tenant (receipts left there by an earlier move away, or by a copy
// this one did before a crash), so that dst ends as src's copy, and lifts the tenant's fence
// there (an earlier move away left it). It streams them with COPY: from
// a temporary table on src (COPY's query takes no parameters, so the tenant is bound in an
// INSERT there) to one on dst. Both shards' receipts tables must have the same columns, but for
// the partition column (commonColumns).
func (m Move) copy(ctx context.Context, src, dst *pgxpool.Pool, from string) (int64, error) {
	q := pgx.Identifier{m.ReceiptsSchema}.Sanitize()
	cols, err := receiptColumns(ctx, src, m.ReceiptsSchema)
	if err != nil {
		return 0, fmt.Errorf("shard %q: %w", from, err)
	}
	dstCols, err := receiptColumns(ctx, dst, m.ReceiptsSchema)
	if err != nil {
		return 0, fmt.Errorf("shard %q: %w", m.To, err)
	}
	cols, err = commonColumns(cols, dstCols)
	if err != nil {
		return 0, fmt.Errorf("shards %q and %q: %w", from, m.To, err)
	}
	list := columnList(cols)

	srcConn, err := src.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer srcConn.Release()
	srcTx, err := srcConn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer srcTx.Rollback(ctx) //nolint:errcheck // read only; ends the temporary table
	if _, err := srcTx.Exec(ctx, "CREATE TEMPORARY TABLE tempotent_moving ON COMMIT DROP AS SELECT "+list+" FROM "+q+".receipts WITH NO DATA"); err != nil {
		return 0, err
	}
	if _, err := srcTx.Exec(ctx, "INSERT INTO tempotent_moving SELECT "+list+" FROM "+q+".receipts WHERE tenant = $1", m.Tenant); err != nil {
		return 0, fmt.Errorf("read the tenant's receipts on shard %q: %w", from, err)
	}

	var copied int64
	err = pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE TEMPORARY TABLE tempotent_moving ON COMMIT DROP AS SELECT "+list+" FROM "+q+".receipts WITH NO DATA"); err != nil {
			return err
		}
		r, w := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := srcConn.Conn().PgConn().CopyTo(ctx, w, "COPY tempotent_moving ("+list+") TO STDOUT (FORMAT binary)")
			w.CloseWithError(err)
			done <- err
		}()
		_, err := tx.Conn().PgConn().CopyFrom(ctx, r, "COPY tempotent_moving ("+list+") FROM STDIN (FORMAT binary)")
		r.CloseWithError(err) // unblocks the writer if the reader failed first
		if srcErr := <-done; srcErr != nil {
			return fmt.Errorf("copy from shard %q: %w", from, srcErr)
		}
		if err != nil {
			return fmt.Errorf("copy into shard %q: %w", m.To, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+q+".receipts WHERE tenant = $1", m.Tenant); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "INSERT INTO "+q+".receipts ("+list+") SELECT "+list+" FROM tempotent_moving")
		if err != nil {
			return fmt.Errorf("write the tenant's receipts on shard %q: %w", m.To, err)
		}
		copied = tag.RowsAffected()
		// The tenant may have moved away from dst before: its fence there goes with the copy.
		if _, err := tx.Exec(ctx, "DELETE FROM "+q+".tenant_fences WHERE tenant = $1", m.Tenant); err != nil {
			return fmt.Errorf("lift the tenant's fence on shard %q: %w", m.To, err)
		}
		detail, _ := json.Marshal(map[string]any{"from": from, "to": m.To, "copied": copied})
		_, err = tx.Exec(ctx, "INSERT INTO "+q+".audit (actor, action, target, reason, detail) VALUES ($1, 'shard.move-in', $2, $3, $4)",
			m.By, "tenant:"+m.Tenant, m.Reason, detail)
		return err
	})
	return copied, err
}

// switchOver puts the tenant on To, lifts the fence and records the move, if the fence this
// move set is still there.
func (m Move) switchOver(ctx context.Context, from string, copied int64) error {
	q := pgx.Identifier{m.Schema}.Sanitize()
	return pgx.BeginFunc(ctx, m.Directory, func(tx pgx.Tx) error {
		var fencedAt any
		err := tx.QueryRow(ctx, "SELECT fenced_at FROM "+q+".tenants WHERE tenant = $1 AND shard = $2 AND moving_to = $3 FOR UPDATE",
			m.Tenant, from, m.To).Scan(&fencedAt)
		if err != nil {
			return fmt.Errorf("switch tenant %q to shard %q: its directory row changed under the move: %w", m.Tenant, m.To, err)
		}
		if _, err := tx.Exec(ctx, "UPDATE "+q+`.tenants SET shard = moving_to, moving_to = NULL, fenced_at = NULL, updated_at = now()
WHERE tenant = $1`, m.Tenant); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+q+`.moves (tenant, from_shard, to_shard, fenced_at, copied, moved_by, reason)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, m.Tenant, from, m.To, fencedAt, copied, m.By, m.Reason)
		return err
	})
}

// receiptColumns returns the receipts table's columns in schema, in their order.
func receiptColumns(ctx context.Context, db *pgxpool.Pool, schema string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT attname FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
		pgx.Identifier{schema, "receipts"}.Sanitize())
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err == nil && len(cols) == 0 {
		err = fmt.Errorf("no receipts table in schema %q; migrate it (tempotent migrate)", schema)
	}
	return cols, err
}

func columnList(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// partitionColumn is the column a partitioned receipts table has and a plain one lacks
// (operator.Client.Partition). It is never copied: a receipt copied into a partitioned table
// lands in today's partition (its day's may not exist there), and so is kept longer, never
// shorter; its expires_at, which purge reads, is copied.
const partitionColumn = "bucket"

// commonColumns returns the columns of src that dst has too, in src's order, and refuses any
// difference but the partition column: tables migrated to different versions.
func commonColumns(src, dst []string) ([]string, error) {
	var common, differ []string
	for _, c := range src {
		switch {
		case c == partitionColumn:
		case slices.Contains(dst, c):
			common = append(common, c)
		default:
			differ = append(differ, c)
		}
	}
	for _, c := range dst {
		if !slices.Contains(src, c) && c != partitionColumn {
			differ = append(differ, c)
		}
	}
	if len(differ) > 0 {
		return nil, fmt.Errorf("their receipts tables differ in %v; migrate both to the same version (tempotent migrate) and move again", differ)
	}
	return common, nil
}
