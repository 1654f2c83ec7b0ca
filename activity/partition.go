package activity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Partitioned receipts.
//
// A busy store keeps hundreds of millions of receipts, and purging them by DELETE rewrites and
// then vacuums every row it removes (bench/NOTEBOOK.md, row 11). Store.Partition turns the receipts
// table into one partition per UTC day of a column of its own, bucket (when the receipt was
// written, or moved), so that Purge drops a whole day at once instead. What changes:
//
//   - A key's uniqueness. A partitioned table's unique index must include the partition column,
//     so (namespace, tenant, operation, id) alone is no longer unique in Postgres' own eyes: two
//     attempts of one intent racing across midnight would each insert into their own day. A
//     trigger before every insert takes a transaction-scoped advisory lock on the key's hash and
//     then looks the key up in every partition, with a snapshot taken after the lock: a key
//     inserted by a concurrent transaction is either committed by then (and found) or still
//     holding the lock (and waited for). A duplicate reservation (pending) is skipped, as the
//     reserving statements' ON CONFLICT DO NOTHING would have; a duplicate finished receipt
//     (DoInNewTx, DoInTx) fails with unique_violation, as its plain INSERT would have.
//   - Retention. Purge creates the partitions of the days ahead (partitionsAhead), and retires
//     a day once the store's retention and a day's grace have passed since it ended: it first
//     moves the receipts that must stay — unresolved ones, and live ones whose retention a
//     takeover or a late completion extended — into today's partition (bucket = now; created_at,
//     which decides whether the token may still be sent, is kept), then detaches and drops the
//     partition, checking under the detach's lock that nothing that must stay is left in it.
//
// Nothing else changes: every statement addresses the parent table, and a lookup by key probes
// each partition's index (bench/NOTEBOOK.md, row 11: 1.3 to 1.9 times a plain table's lookup,
// by run and size).

const (
	// partitionsAhead is how many days of partitions Purge keeps created ahead of today: three
	// days in which inserts go on if purging stops. Not more: a lookup by key probes every
	// partition, the empty ones ahead included.
	partitionsAhead = 3
	// retireGrace is how long after its retention has passed since a day ended that day's
	// partition is retired: receipts whose lease outlived their day end later than the retention.
	retireGrace = 24 * time.Hour
	// moveSetting is the transaction-local setting under which Purge moves receipts between
	// partitions; the uniqueness trigger skips those rows. It would let them through anyway (a
	// moved row's key is its own, and the move's delete is visible to the trigger's lookup), but
	// each would take a lock and probe every partition for nothing.
	moveSetting = "tempotent.move"
)

// purgeable is the condition of a receipt Purge may forget: past its retention and settled
// (completed, failed for a known reason, or pending after attempts that certainly had no effect
// and whose lease has ended). Its negation is what keeps a partition from being dropped.
const purgeable = `expires_at <= now() AND (state = 'completed'
		OR (state = 'failed' AND error_type IS DISTINCT FROM 'tempotent.OutcomeUnknown')
		OR (state = 'pending' AND NOT effect_possible AND lease_expires_at <= now()))`

// keep is the condition of a receipt a retiring partition must not take with it. Its first
// clause, a superset, lets Postgres find them on the expires_at and unresolved indexes instead of
// reading the whole partition.
const keep = `(expires_at > now() OR state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND NOT coalesce(` + purgeable + `, false)`

// Partition converts the store's receipts table to daily partitions (see the comment above), in
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
// On a partitioned table, receipts are written under READ COMMITTED only: a DoInTx in a
// REPEATABLE READ or SERIALIZABLE transaction fails with a StoreError that says so, because its
// snapshot could not see a duplicate committed in another day's partition. A lookup by key
// probes every partition and each insert runs the trigger: bench/NOTEBOOK.md, row 11, has what
// that costs against what it saves.
func (s *Store) Partition(ctx context.Context) error {
	if err := s.Check(ctx); err != nil {
		return fmt.Errorf("partition receipts: %w", err)
	}
	on, err := s.Partitioned(ctx)
	if err != nil {
		return fmt.Errorf("partition receipts: %w", err)
	}
	if !on {
		if err := s.convert(ctx); err != nil {
			return fmt.Errorf("partition receipts: %w", err)
		}
	}
	if err := s.createAhead(ctx); err != nil {
		return fmt.Errorf("partition receipts: %w", err)
	}
	return nil
}

// Partitioned reports whether the store's receipts table is partitioned (Partition).
func (s *Store) Partitioned(ctx context.Context) (bool, error) {
	var on *bool
	if err := s.db.QueryRow(ctx, "SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)", s.table()).Scan(&on); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return false, fmt.Errorf("read the receipts table's kind: %w", err)
	}
	return on != nil && *on, nil
}

// convert moves a plain receipts table under a partitioned one, in the steps Partition describes.
func (s *Store) convert(ctx context.Context) (err error) {
	t, q := s.table(), pgx.Identifier{s.cfg.Schema}.Sanitize()
	// An index that a failed earlier run left invalid is dropped and built again.
	var invalid bool
	if err := s.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass($1) AND NOT indisvalid)",
		q+".receipts_bucket_key").Scan(&invalid); err != nil {
		return err
	}
	// The legacy partition's bound: rows reserved until then go to it. Two days ahead, so that
	// the rows inserted while this runs fall under it.
	var cutover time.Time
	if err := s.db.QueryRow(ctx, "SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days'").Scan(&cutover); err != nil {
		return err
	}
	bound := pgLiteral(cutover)
	defer func() {
		// The constraint would refuse new receipts once its bound passes: it must not outlive a
		// failed conversion.
		if err == nil {
			return
		}
		if derr := s.ddl(context.WithoutCancel(ctx), `ALTER TABLE `+t+` DROP CONSTRAINT IF EXISTS receipts_legacy_bound`, true); derr != nil {
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
		if err := s.ddl(ctx, step.stmt, step.bounded); err != nil {
			return err
		}
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			"SELECT set_config('lock_timeout', '" + s.lockTimeout + "', true)",
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
// run). When bounded, it waits at most the store's lock timeout for its lock, so that it never
// queues behind a long transaction with the receipt statements queued behind it.
func (s *Store) ddl(ctx context.Context, stmt string, bounded bool) error {
	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	timeout := "0" // none
	if bounded {
		timeout = s.lockTimeout
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

// partition is one day of receipts: bucket in [from, to); from is the zero time for the legacy
// partition, which starts at MINVALUE.
type partition struct {
	name     string
	from, to time.Time
	rows     float64 // Postgres' estimate (pg_class.reltuples), -1 if never counted
}

// partitions lists the receipts' partitions in bound order.
func (s *Store) partitions(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]partition, error) {
	rows, err := db.Query(ctx, `
SELECT c.relname,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
	(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']*)''\)'))[1]::timestamptz,
	c.reltuples
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) AND c.relispartition
ORDER BY 3`, s.table())
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

// createAhead creates the partitions that are missing from the last one's end to partitionsAhead
// days from now, one per UTC day, in one transaction that purgers of the schema take in turn.
func (s *Store) createAhead(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock(hashtext('tempotent.partitions.' || $2))",
			s.lockTimeout, s.cfg.Schema); err != nil {
			return err
		}
		var last, horizon time.Time
		if err := tx.QueryRow(ctx, "SELECT now() + $1::int * interval '1 day'", partitionsAhead).Scan(&horizon); err != nil {
			return err
		}
		ps, err := s.partitions(ctx, tx)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			return errors.New("the receipts table has no partitions: it was not made by Store.Partition")
		}
		last = ps[len(ps)-1].to
		for from := last.UTC(); from.Before(horizon); {
			to := from.AddDate(0, 0, 1).Truncate(24 * time.Hour)
			name := pgx.Identifier{s.cfg.Schema, "receipts_" + from.Format("20060102")}.Sanitize()
			// Created apart and then attached: CREATE TABLE … PARTITION OF would lock the parent
			// against every receipt statement, ATTACH only against other schema changes.
			for _, stmt := range []string{
				"CREATE TABLE " + name + " (LIKE " + s.table() + " INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
				"ALTER TABLE " + s.table() + " ATTACH PARTITION " + name + " FOR VALUES FROM (" + pgLiteral(from) + ") TO (" + pgLiteral(to) + ")",
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
func (s *Store) purgePartitions(ctx context.Context) (int64, error) {
	if err := s.createAhead(ctx); err != nil {
		return 0, err
	}
	ps, err := s.partitions(ctx, s.db)
	if err != nil {
		return 0, err
	}
	var dropped float64
	for _, p := range ps {
		if time.Since(p.to) < s.cfg.Retention+retireGrace {
			break // in bound order: the later ones are younger
		}
		ok, err := s.retire(ctx, p)
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
func (s *Store) retire(ctx context.Context, p partition) (bool, error) {
	from := "'-infinity'"
	if !p.from.IsZero() {
		from = pgLiteral(p.from)
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true), set_config($3, 'on', true)",
			s.lockTimeout, s.statementTimeout, moveSetting)
		if err == nil {
			_, err = tx.Exec(ctx, "UPDATE "+s.table()+" SET bucket = now(), updated_at = now()"+
				" WHERE bucket >= "+from+" AND bucket < "+pgLiteral(p.to)+
				" AND "+keep+" AND (lease_expires_at IS NULL OR lease_expires_at <= now())")
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("move the receipts it must keep: %w", err)
	}
	name := pgx.Identifier{s.cfg.Schema, p.name}.Sanitize()
	var dropped bool
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// Purgers of the schema take turns (createAhead's lock); one that comes second finds
		// the partition gone, in a statement whose snapshot is taken after the lock.
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock(hashtext('tempotent.partitions.' || $2))",
			s.lockTimeout, s.cfg.Schema); err != nil {
			return err
		}
		var attached bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2))",
			name, s.table()).Scan(&attached); err != nil {
			return err
		}
		if !attached {
			return errHeld
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+s.table()+" DETACH PARTITION "+name); err != nil {
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
