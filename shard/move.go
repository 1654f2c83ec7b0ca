package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/failpoint"
)

// Move moves one tenant's receipts from its shard to another, "drain, then switch", in steps
// that each leave the directory saying what is done, so that Move run again after a crash at
// any point carries on from there:
//
//  1. fence: the directory marks the tenant moving (tenants.moving_to); every Router refuses
//     the tenant's calls, retryably (MovingError), once it has read the mark. The old shard
//     records the tenant's fence too (its tenant_fences, draining): from then on it refuses
//     every statement that would start an attempt of the tenant (reserve, take over,
//     DoInNewTx's receipt) with a MovedError, from any store opened with
//     activity.Config.TenantFences (NewRouter refuses a store without it), whenever the worker
//     was handed it; such a store's statements run only under READ COMMITTED (they refuse any
//     other level). The move then waits for every transaction that held a lock on the receipts
//     table when the fence committed (the barrier), so that none that began before it writes
//     later;
//  2. wait MaxStale after the fence, so that fewer calls meet the shard's refusal;
//  3. drain: wait until none of the tenant's receipts on the old shard is pending under a
//     live lease (an attempt that reserved before the fence has finished; its completion is
//     still accepted);
//  4. seal: the old shard's fence refuses every receipt statement of the tenant, completions,
//     releases, heartbeats and reads too, and the barrier again;
//  5. copy the tenant's receipts to the new shard, replacing any it had there and lifting any
//     fence it had for the tenant, in one transaction with an audit record: a retry after the
//     move replays what the old shard recorded instead of acting again. No fenced store writes
//     anything of the tenant's on the old shard after the seal, so the copy misses nothing of
//     theirs (a store opened without TenantFences on that database, or a hand-written
//     statement, is not fenced);
//  6. switch: the directory puts the tenant on the new shard and lifts the fence.
//
// The receipts stay on the old shard too, refused, until its purge removes them; so does its
// fence, until the tenant moves back. A move of a tenant already moving to another shard is
// refused: finish that one first.
type Move struct {
	// Directory is the directory's pool, and Schema its schema (default SchemaDefault).
	Directory *pgxpool.Pool
	Schema    string
	// Shards are the receipts' databases by shard name: the tenant's present shard's and To's
	// at least.
	Shards map[string]*pgxpool.Pool
	// ReceiptsSchema is the receipts' schema in every shard (default "tempotent").
	ReceiptsSchema string
	// Tenant is moved to the shard named To.
	Tenant, To string
	// MaxStale is the wait after the fence, so that few calls meet the old shard's refusal: the
	// largest Config.MaxStale of the workers' Routers. The old shard's own fence, not this
	// wait, keeps a late worker from writing there. Default MaxStaleDefault.
	MaxStale time.Duration
	// Poll is how often the drain looks again for pending receipts. Default a second.
	Poll time.Duration
	// By and Reason say who moves the tenant and why; both required, recorded in the
	// directory's moves and the new shard's audit log.
	By, Reason string
	// Log receives a line for each step (nil: none).
	Log io.Writer
}

// MoveResult says what a Move did.
type MoveResult struct {
	From, To string
	// Copied is how many receipts were copied; Already is true when the tenant was on To
	// before Move began (nothing was done).
	Copied  int64
	Already bool
}

func (m Move) withDefaults() Move {
	m.Schema = cmp.Or(m.Schema, SchemaDefault)
	m.ReceiptsSchema = cmp.Or(m.ReceiptsSchema, "tempotent")
	m.MaxStale = cmp.Or(m.MaxStale, MaxStaleDefault)
	m.Poll = cmp.Or(m.Poll, time.Second)
	if m.Log == nil {
		m.Log = io.Discard
	}
	return m
}

func (m Move) validate() error {
	switch {
	case m.Directory == nil:
		return errors.New("shard.Move.Directory is nil")
	case m.Tenant == "":
		return errors.New("shard.Move.Tenant is empty; the tenant without a name stays on the default shard")
	case m.Shards[m.To] == nil:
		return fmt.Errorf("shard.Move.To %q is not one of the shards given (%v)", m.To, slices.Sorted(maps.Keys(m.Shards)))
	case strings.TrimSpace(m.By) == "" || strings.TrimSpace(m.Reason) == "":
		return errors.New("shard.Move: By and Reason are required: say who moves the tenant and why")
	case m.MaxStale < 0 || m.Poll < 0:
		return errors.New("shard.Move: MaxStale and Poll must not be negative")
	}
	return validName(m.To)
}

// Run runs the move, or carries on with one that an earlier Run left unfinished. It returns
// ctx's error if ctx ends while it waits; the tenant then stays fenced, and Run again finishes.
func (m Move) Run(ctx context.Context) (MoveResult, error) {
	m = m.withDefaults()
	if err := m.validate(); err != nil {
		return MoveResult{}, err
	}
	from, fencedAgo, already, err := m.fence(ctx)
	if err != nil || already {
		return MoveResult{From: from, To: m.To, Already: already}, err
	}
	res := MoveResult{From: from, To: m.To}
	src := m.Shards[from]
	if src == nil {
		return res, fmt.Errorf("tenant %q is on shard %q, whose database was not given; give it too", m.Tenant, from)
	}
	if err := m.fenceShard(ctx, src, from, false); err != nil {
		return res, err
	}
	failpoint.Hit(failpoint.AfterFence)
	if wait := m.MaxStale - fencedAgo; wait > 0 {
		fmt.Fprintf(m.Log, "waiting %s for every worker to see the fence (max stale %s)\n", wait.Round(time.Millisecond), m.MaxStale)
		if err := sleep(ctx, wait); err != nil {
			return res, err
		}
	}
	if err := m.drain(ctx, src, from); err != nil {
		return res, err
	}
	if err := m.fenceShard(ctx, src, from, true); err != nil {
		return res, err
	}
	if res.Copied, err = m.copy(ctx, src, m.Shards[m.To], from); err != nil {
		return res, err
	}
	fmt.Fprintf(m.Log, "copied %d receipts of tenant %q from shard %q to %q\n", res.Copied, m.Tenant, from, m.To)
	failpoint.Hit(failpoint.AfterCopy)
	if err := m.switchOver(ctx, from, res.Copied); err != nil {
		return res, err
	}
	fmt.Fprintf(m.Log, "switched tenant %q to shard %q; its calls go there from now on\n", m.Tenant, m.To)
	return res, nil
}

// fence marks the tenant moving to To, or finds it marked by an earlier run, and returns the
// shard it is on and how long ago (by the directory's clock) it was fenced.
func (m Move) fence(ctx context.Context) (from string, fencedAgo time.Duration, already bool, err error) {
	q := pgx.Identifier{m.Schema}.Sanitize()
	err = pgx.BeginFunc(ctx, m.Directory, func(tx pgx.Tx) error {
		var def string
		if err := tx.QueryRow(ctx, "SELECT default_shard FROM "+q+".directory").Scan(&def); err != nil {
			return fmt.Errorf("read the directory (schema %s): %w; has a worker's shard.Router.Migrate run?", m.Schema, err)
		}
		// The default shard's row is made here, locked, so that two moves of a tenant that
		// has no row yet queue on it.
		if _, err := tx.Exec(ctx, "INSERT INTO "+q+".tenants (tenant, shard) VALUES ($1, $2) ON CONFLICT (tenant) DO NOTHING", m.Tenant, def); err != nil {
			return err
		}
		var moving *string
		var ago time.Duration
		err := tx.QueryRow(ctx, `SELECT shard, moving_to, coalesce(now() - fenced_at, '0')
FROM `+q+".tenants WHERE tenant = $1 FOR UPDATE", m.Tenant).Scan(&from, &moving, &ago)
		if err != nil {
			return err
		}
		switch {
		case moving != nil && *moving != m.To:
			return fmt.Errorf("tenant %q is being moved to shard %q already; finish that move (--to %s) first", m.Tenant, *moving, *moving)
		case moving != nil:
			fencedAgo = ago
			fmt.Fprintf(m.Log, "resuming the move of tenant %q from shard %q to %q (fenced %s ago)\n", m.Tenant, from, m.To, ago.Round(time.Millisecond))
			return nil
		case from == m.To:
			already = true
			fmt.Fprintf(m.Log, "tenant %q is on shard %q already; nothing to do\n", m.Tenant, m.To)
			return nil
		}
		_, err = tx.Exec(ctx, "UPDATE "+q+`.tenants SET moving_to = $2, fenced_at = now(), reason = $3, moved_by = $4, updated_at = now()
WHERE tenant = $1`, m.Tenant, m.To, m.Reason, m.By)
		if err == nil {
			fmt.Fprintf(m.Log, "fenced tenant %q on shard %q: its calls are refused (retryably) until it is switched to %q\n", m.Tenant, from, m.To)
		}
		return err
	})
	return from, fencedAgo, already, err
}

// drain waits until none of the tenant's receipts on the old shard is pending under a live
// lease. A pending receipt whose lease has ended (its attempt crashed, or its workflow is gone)
// is copied as it is: the retry, if one comes, takes it over on the new shard with the same
// token, as it would have on the old one; waiting for it would keep the tenant fenced for good.
func (m Move) drain(ctx context.Context, src *pgxpool.Pool, from string) error {
	q := pgx.Identifier{m.ReceiptsSchema}.Sanitize()
	last := int64(-1)
	for {
		var n int64
		var oldest *time.Time
		err := src.QueryRow(ctx, "SELECT count(*), min(created_at) FROM "+q+".receipts WHERE tenant = $1 AND state = 'pending' AND lease_expires_at > now()", m.Tenant).Scan(&n, &oldest)
		if err != nil {
			return fmt.Errorf("count the tenant's pending receipts on shard %q: %w", from, err)
		}
		if n == 0 {
			return nil
		}
		if n != last {
			fmt.Fprintf(m.Log, "waiting for %d receipts of tenant %q on shard %q whose attempts are running (the oldest reserved at %s); those whose leases ended are moved as they are\n",
				n, m.Tenant, from, oldest.UTC().Format(time.RFC3339))
			last = n
		}
		if err := sleep(ctx, m.Poll); err != nil {
			return err
		}
	}
}

// fenceShard records the tenant's fence on its old shard, draining or sealed (see Move's steps
// 1 and 4), and returns once every transaction that could still write the tenant's receipts
// there without seeing the fence has ended. Run again, it writes the same fence: a sealed fence
// stays sealed.
func (m Move) fenceShard(ctx context.Context, src *pgxpool.Pool, from string, sealed bool) error {
	q := pgx.Identifier{m.ReceiptsSchema}.Sanitize()
	_, err := src.Exec(ctx, "INSERT INTO "+q+`.tenant_fences AS f (tenant, moved_to, sealed, moved_by) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant) DO UPDATE SET moved_to = excluded.moved_to, sealed = f.sealed OR excluded.sealed, fenced_at = now(), moved_by = excluded.moved_by`,
		m.Tenant, m.To, sealed, m.By)
	if err != nil {
		return fmt.Errorf("fence tenant %q on shard %q: %w; is its schema migrated (tempotent migrate, migration 012)?", m.Tenant, from, err)
	}
	return m.barrier(ctx, src, from)
}

// barrier waits until every transaction that holds a lock on the old shard's receipts table now,
// just after the fence committed, has ended. Race: a receipt statement whose snapshot was taken
// before the fence committed does not see it, and may write after it; but a statement takes its
// table's lock before its snapshot (Postgres locks a statement's tables when it binds or plans
// it, and a READ COMMITTED statement takes its snapshot after), and keeps it to the end of its
// transaction, so every such statement is in one of these transactions, prepared (two-phase)
// ones included (their locks have no pid). Statements that take their snapshot later see the
// fence. That holds under READ COMMITTED only: a REPEATABLE READ or SERIALIZABLE transaction
// keeps a snapshot from before it first touched the receipts table, so a fenced store's
// statements refuse to run outside READ COMMITTED (activity.Config.TenantFences). It waits for
// these transactions, not for the table (no lock is taken: the shard's other tenants go on), as
// CREATE INDEX CONCURRENTLY waits for the transactions before it, and prints, when it waits, the
// pid and application_name of each.
func (m Move) barrier(ctx context.Context, src *pgxpool.Pool, from string) error {
	table := pgx.Identifier{m.ReceiptsSchema, "receipts"}.Sanitize()
	var before []string
	err := src.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
WHERE locktype = 'relation' AND relation = to_regclass($1) AND pid IS DISTINCT FROM pg_backend_pid()
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, table).Scan(&before)
	if err != nil {
		return fmt.Errorf("list the transactions on shard %q that may not see the tenant's fence: %w", from, err)
	}
	for logged := false; ; logged = true {
		var left []string
		if err := src.QueryRow(ctx, `SELECT coalesce(array_agg(w ORDER BY w), '{}') FROM (
	SELECT DISTINCT l.virtualtransaction, CASE WHEN l.pid IS NULL THEN 'a prepared transaction (pg_prepared_xacts: COMMIT PREPARED or ROLLBACK PREPARED it)'
		ELSE format('pid %s (application_name %L)', l.pid, a.application_name) END AS w
	FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
	WHERE l.virtualtransaction = ANY($1)) AS t`, before).Scan(&left); err != nil {
			return fmt.Errorf("wait for the transactions on shard %q that may not see the tenant's fence: %w", from, err)
		}
		if len(left) == 0 {
			return nil
		}
		if !logged {
			fmt.Fprintf(m.Log, "waiting for %d transactions on shard %q that began before the tenant's fence: %s\n", len(left), from, strings.Join(left, ", "))
		}
		if err := sleep(ctx, m.Poll); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
