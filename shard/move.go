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
//     the tenant's calls, retryably (MovingError), once it has read the mark;
//  2. wait MaxStale after the fence, so that no Router still uses what it read before it;
//  3. drain: wait until none of the tenant's receipts on the old shard is pending (an attempt
//     that reserved before the fence has finished; one that crashed is settled by hand, see
//     the command's output);
//  4. copy the tenant's receipts to the new shard, replacing any it had there, in one
//     transaction with an audit record: a retry after the move replays what the old shard
//     recorded instead of acting again;
//  5. switch: the directory puts the tenant on the new shard and lifts the fence.
//
// The receipts stay on the old shard too, unread, until its purge removes them. A move of a
// tenant already moving to another shard is refused: finish that one first.
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
	// MaxStale is the wait after the fence: at least the largest Config.MaxStale of the workers'
	// Routers. Default MaxStaleDefault.
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
