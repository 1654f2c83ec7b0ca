package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/schema"
)

// Partitioned receipts.
//
// A busy store keeps hundreds of millions of receipts, and purging them by DELETE rewrites and
// then vacuums every row it removes (bench/NOTEBOOK.md, row 11). Client.Partition turns the
// receipts table into one partition per UTC day of a column of its own, bucket (when the receipt
// was written, or moved), so that Purge drops a whole day at once instead. What changes:
//
//   - A key's uniqueness. A partitioned table's unique index must include the partition column,
//     so (namespace, tenant, operation, id) alone is no longer unique in Postgres' own eyes: two
//     attempts of one intent racing across midnight would each insert into their own day. A
//     trigger before every insert takes a transaction-scoped advisory lock on the key's hash and
//     then looks the key up in every partition, with a snapshot taken after the lock: a key
//     inserted by a concurrent transaction is either committed by then (and found) or still
//     holding the lock (and waited for). A duplicate reservation (pending) is skipped, as the
//     reserving statements' ON CONFLICT DO NOTHING would have; a duplicate finished receipt
//     (activity.DoInNewTx, activity.DoInTx) fails with unique_violation, as its plain INSERT
//     would have.
//   - Retention. Purge creates the partitions of the days ahead (schema.PartitionsAhead), and
//     retires a day once the retention (Config.Retention) and a day's grace have passed since it
//     ended: it first moves the receipts that must stay — unresolved ones, and live ones whose
//     retention a takeover or a late completion extended — into today's partition (bucket =
//     now; created_at, which decides whether the token may still be sent, is kept), then
//     detaches and drops the partition, checking under the detach's lock that nothing that must
//     stay is left in it.
//
// Nothing else changes: every statement addresses the parent table, and a lookup by key probes
// each partition's index (bench/NOTEBOOK.md, row 11: 1.3 to 1.9 times a plain table's lookup,
// by run and size).

const (
	// retireGrace is how long after its retention has passed since a day ended that day's
	// partition is retired: receipts whose lease outlived their day end later than the retention.
	retireGrace = 24 * time.Hour
	// moveSetting is the transaction-local setting under which Purge moves receipts between
	// partitions; the uniqueness trigger skips those rows. It would let them through anyway (a
	// moved row's key is its own, and the move's delete is visible to the trigger's lookup), but
	// each would take a lock and probe every partition for nothing.
	moveSetting = "tempotent.move"
)

// keep is the condition of a receipt a retiring partition must not take with it. Its first
// clause, a superset, lets Postgres find them on the expires_at and unresolved indexes instead of
// reading the whole partition.
const keep = `(expires_at > now() OR state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND NOT coalesce(` + schema.Purgeable + `, false)`

// Partition converts the receipts table to daily partitions (see the comment above), in
// place and without losing a receipt; calling it on a partitioned table only creates the
// partitions ahead. Run it once, from one process (the tempotent command's receipts partition),
// after Migrate; workers may keep running. The existing rows become one partition,
// receipts_legacy, that Purge drops like any other once they have all expired.
//
// What it costs: adding the partition column writes nothing (its default is a constant for the
// rows already there); a unique index including it is built concurrently, without blocking writes;
// a check constraint is validated without blocking writes; then one short transaction renames the
// table, creates the partitioned one, and attaches the old table under the constraint, without
// reading it. That transaction waits at most Config.LockTimeout for the table's lock and blocks
// receipt statements while it runs (milliseconds; bench-scale measures it on 10 million receipts).
// Building the index waits for every transaction older than it in the database to end.
//
// On a partitioned table, receipts are written under READ COMMITTED only: an activity.DoInTx in
// a REPEATABLE READ or SERIALIZABLE transaction fails with an activity.StoreError that says so,
// because its snapshot could not see a duplicate committed in another day's partition. A lookup
// by key probes every partition and each insert runs the trigger: bench/NOTEBOOK.md, row 11, has
// what that costs against what it saves.
func (c *Client) Partition(ctx context.Context) error {
	if err := schema.Check(ctx, c.db, c.cfg.Schema); err != nil {
		return fmt.Errorf("partition receipts: %w", err)
	}
	on, err := c.Partitioned(ctx)
	if err != nil {
		return fmt.Errorf("partition receipts: %w", err)
	}
	if !on {
		if err := c.convert(ctx); err != nil {
			return fmt.Errorf("partition receipts: %w", err)
		}
	}
	if err := c.createAhead(ctx); err != nil {
		return fmt.Errorf("partition receipts: %w", err)
	}
	return nil
}

// Partitioned reports whether the receipts table is partitioned (Partition).
func (c *Client) Partitioned(ctx context.Context) (bool, error) {
	var on *bool
	if err := c.db.QueryRow(ctx, "SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)", c.receipts).Scan(&on); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return false, fmt.Errorf("read the receipts table's kind: %w", err)
	}
	return on != nil && *on, nil
}

// convert moves a plain receipts table under a partitioned one, in the steps Partition describes.
func (c *Client) convert(ctx context.Context) (err error) {
	t, q := c.receipts, pgx.Identifier{c.cfg.Schema}.Sanitize()
	// An index that a failed earlier run left invalid is dropped and built again.
	var invalid bool
	if err := c.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)",
		q+".receipts_bucket_key").Scan(&invalid); err != nil {
		return err
	}
	// The legacy partition's bound: rows reserved until then go to it. Two days ahead, so that
	// the rows inserted while this runs fall under it.
	var cutover time.Time
	if err := c.db.QueryRow(ctx, "SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days'").Scan(&cutover); err != nil {
		return err
	}
	bound := pgLiteral(cutover)
	defer func() {
		// The constraint would refuse new receipts once its bound passes: it must not outlive a
		// failed conversion.
		if err == nil {
			return
		}
		if derr := c.ddl(context.WithoutCancel(ctx), `ALTER TABLE `+t+` DROP CONSTRAINT IF EXISTS receipts_legacy_bound`, true); derr != nil {
			err = errors.Join(err, fmt.Errorf("drop the constraint receipts_legacy_bound, which will refuse receipts after %s: %w", cutover.Format(time.RFC3339), derr))
		}
		err = fmt.Errorf("convert the table (the receipts are as they were; run again): %w", err)
	}()
	// Each step waits at most the lock timeout for a lock that would hold up receipt statements;
	// building the index and validating the constraint take none such (but the build waits for
	// every transaction older than it, anywhere in the database), so they wait as long as it takes.
	for _, step := range []struct {
		stmt    string
		bounded bool
		skip    bool
	}{
		{stmt: `ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS bucket timestamptz NOT NULL DEFAULT now()`, bounded: true},
		{stmt: `DROP INDEX ` + q + `.receipts_bucket_key`, bounded: true, skip: !invalid},
		{stmt: `CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS receipts_bucket_key ON ` + t + ` (namespace, tenant, operation, id, bucket)`},
		{stmt: `ALTER TABLE ` + t + ` DROP CONSTRAINT IF EXISTS receipts_legacy_bound`, bounded: true}, // an earlier run's
		{stmt: `ALTER TABLE ` + t + ` ADD CONSTRAINT receipts_legacy_bound CHECK (bucket < ` + bound + `) NOT VALID`, bounded: true},
		{stmt: `ALTER TABLE ` + t + ` VALIDATE CONSTRAINT receipts_legacy_bound`},
	} {
		if step.skip {
			continue
		}
		if err := c.ddl(ctx, step.stmt, step.bounded); err != nil {
			return err
		}
	}
	err = pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			"SELECT set_config('lock_timeout', '" + c.lockTimeout + "', true)",
			"LOCK TABLE " + t + " IN ACCESS EXCLUSIVE MODE",
			"ALTER TABLE " + t + " RENAME TO receipts_legacy",
			"ALTER TABLE " + q + ".receipts_legacy ADD CONSTRAINT receipts_bucket_key UNIQUE USING INDEX receipts_bucket_key",
			"CREATE TABLE " + t + " (LIKE " + q + ".receipts_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (bucket)",
			"ALTER TABLE " + t + " DROP CONSTRAINT receipts_legacy_bound",
			// The parent's indexes are those of the migrations, under names of their own; the
			// old table's identical ones become their partitions when it is attached.
			"ALTER TABLE " + t + " ADD CONSTRAINT receipts_partitioned_key UNIQUE (namespace, tenant, operation, id, bucket)",
			"CREATE INDEX receipts_partitioned_expires_at_idx ON " + t + " (expires_at)",
			"CREATE INDEX receipts_partitioned_unresolved_idx ON " + t + " (expires_at) WHERE state = 'pending' OR error_type = 'tempotent.OutcomeUnknown'",
			"CREATE INDEX receipts_partitioned_token_idx ON " + t + " (token)",
			"CREATE INDEX receipts_partitioned_workflow_idx ON " + t + " (workflow_id) WHERE workflow_id IS NOT NULL",
			"CREATE INDEX receipts_partitioned_compensates_idx ON " + t + " (compensates) WHERE compensates IS NOT NULL",
			// Under the validated constraint, attaching reads nothing.
			"ALTER TABLE " + t + " ATTACH PARTITION " + q + ".receipts_legacy FOR VALUES FROM (MINVALUE) TO (" + bound + ")",
			uniqueKeyFunction(q),
			`CREATE TRIGGER receipts_key_unique BEFORE INSERT ON ` + t + ` FOR EACH ROW
	WHEN (current_setting('` + moveSetting + `', true) IS DISTINCT FROM 'on')
	EXECUTE FUNCTION ` + q + `.receipts_key_unique()`,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", firstLine(stmt), err)
			}
		}
		return nil
	})
	return err
}

// uniqueKeyFunction is the body of the trigger that keeps a key unique across partitions (see the
// comment at the top). It is VOLATILE so that its lookup takes a snapshot after the lock — under
// READ COMMITTED. A REPEATABLE READ or SERIALIZABLE transaction (DoInTx's caller's) keeps its
// one snapshot, which cannot see a duplicate committed since in another partition (the unique
// index of a plain table would see it): the trigger refuses to write a receipt there.
func uniqueKeyFunction(schema string) string {
	return `CREATE FUNCTION ` + schema + `.receipts_key_unique() RETURNS trigger LANGUAGE plpgsql VOLATILE AS $$
BEGIN
	IF current_setting('transaction_isolation') <> 'read committed' THEN
		RAISE EXCEPTION 'a receipt on a partitioned receipts table must be written under READ COMMITTED, not %', current_setting('transaction_isolation')
			USING ERRCODE = 'feature_not_supported',
			HINT = 'a duplicate committed in another day''s partition after this transaction''s snapshot would be invisible to it; begin the transaction given to DoInTx at READ COMMITTED';
	END IF;
	PERFORM pg_advisory_xact_lock(hashtextextended(NEW.namespace || chr(31) || NEW.tenant || chr(31) || NEW.operation || chr(31) || NEW.id, 0));
	PERFORM FROM ` + schema + `.receipts
		WHERE (namespace, tenant, operation, id) = (NEW.namespace, NEW.tenant, NEW.operation, NEW.id);
	IF NOT FOUND THEN
		RETURN NEW;
	END IF;
	IF NEW.state = 'pending' THEN
		RETURN NULL;
	END IF;
	RAISE unique_violation USING
		MESSAGE = format('a receipt for key (%s, %s, %s, %s) already exists', NEW.namespace, NEW.tenant, NEW.operation, NEW.id),
		CONSTRAINT = 'receipts_key_unique';
END
$$`
}

// ddl runs one schema change outside a transaction block (as CREATE INDEX CONCURRENTLY must
// run). When bounded, it waits at most the client's lock timeout for its lock, so that it never
// queues behind a long transaction with the receipt statements queued behind it.
func (c *Client) ddl(ctx context.Context, stmt string, bounded bool) error {
	conn, err := c.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	timeout := "0" // none
	if bounded {
		timeout = c.lockTimeout
	}
	if _, err := conn.Exec(ctx, "SET lock_timeout = "+timeout); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, stmt)
	if _, rerr := conn.Exec(context.WithoutCancel(ctx), "RESET lock_timeout"); rerr != nil {
		_ = conn.Conn().Close(context.WithoutCancel(ctx)) // do not return a connection with the setting
	}
	if err != nil {
		return fmt.Errorf("%s: %w", firstLine(stmt), err)
	}
	return nil
}
