// tempotent shard list|move: the directory of tenants and shards, and moving a tenant.

package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/shard"
)

// shardFlags are the flags of the shard commands: --database-url is the directory's database.
type shardFlags struct {
	*flags
	directorySchema string
	shards          map[string]string
}

func (a *app) shardFlags(name, args, about string) *shardFlags {
	f := &shardFlags{flags: a.flags(name, args, about), shards: map[string]string{}}
	f.StringVar(&f.directorySchema, "directory-schema", shard.SchemaDefault, "Postgres schema of the directory in the --database-url database")
	f.Func("shard", "a shard as NAME=URL, its receipts' database (repeat for each shard the command needs)", func(v string) error {
		name, url, ok := strings.Cut(v, "=")
		if !ok || name == "" || url == "" {
			return fmt.Errorf("give NAME=URL, not %q", v)
		}
		if _, dup := f.shards[name]; dup {
			return fmt.Errorf("shard %q given twice", name)
		}
		f.shards[name] = url
		return nil
	})
	return f
}

func (a *app) shardMove(ctx context.Context, args []string) error {
	f := a.shardFlags("shard move", "", `Moves a tenant's receipts to another shard, "drain, then switch": it fences the tenant (every
worker's shard.Router refuses its calls, retryably, once it has read the fence; the old shard's
own fence, in its tenant_fences table, refuses the tenant's new attempts there whatever a worker
read), waits --max-stale for every worker to see it, waits until none of the tenant's receipts
on its shard is pending, seals the old shard's fence (it refuses every receipt statement of the
tenant), copies its receipts to the new shard (a retry after the move replays them) and switches
the directory. Each step is recorded before the next: if the command is stopped or killed, run
it again with the same flags and it carries on. --database-url is the directory's database;
give each shard's receipts database with --shard NAME=URL (the tenant's shard and --to).`)
	var m shard.Move
	var wait time.Duration
	f.StringVar(&m.Tenant, "tenant", "", "the tenant to move (required)")
	f.StringVar(&m.To, "to", "", "the shard to move it to (required)")
	f.DurationVar(&m.MaxStale, "max-stale", shard.MaxStaleDefault, "the wait after the fence, so that few calls meet the old shard's refusal: the largest shard.Config.MaxStale of the workers")
	f.DurationVar(&m.Poll, "poll", time.Second, "how often to look again for the tenant's pending receipts")
	f.DurationVar(&wait, "wait", 10*time.Minute, "give up (the tenant stays fenced; run again to finish) after this long")
	f.StringVar(&m.By, "by", defaultBy(), "who moves it")
	f.StringVar(&m.Reason, "reason", "", "why (required): a ticket, a capacity plan")
	check := func() error {
		switch {
		case m.Tenant == "" || m.To == "":
			return usagef("give --tenant and --to")
		case strings.TrimSpace(m.Reason) == "":
			return usagef("give --reason: say why the tenant moves")
		case f.shards[m.To] == "":
			return usagef("give the database of shard %q with --shard %s=URL", m.To, m.To)
		case wait <= 0:
			return usagef("--wait must be positive")
		}
		return nil
	}
	return f.withShards(ctx, args, check, func(dir *pgxpool.Pool, shards map[string]*pgxpool.Pool) error {
		m.Directory, m.Schema, m.Shards, m.ReceiptsSchema, m.Log = dir, f.directorySchema, shards, f.schema, a.stdout
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		_, err := m.Run(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("%w: the tenant stays fenced; run the command again to finish the move", err)
		}
		return err
	})
}

func (a *app) shardInit(ctx context.Context, args []string) error {
	f := a.shardFlags("shard init", "", `Creates the directory of shards in the --database-url database, if it is missing, recording
--default as the shard of every tenant it does not name (what shard.Router.Migrate does). It is
safe to run again; a directory whose default is another shard is refused.`)
	var def string
	f.StringVar(&def, "default", "", "the default shard's name (required)")
	check := func() error {
		if def == "" {
			return usagef("give --default: the shard of the tenants the directory does not name")
		}
		return nil
	}
	return f.withShards(ctx, args, check, func(dir *pgxpool.Pool, _ map[string]*pgxpool.Pool) error {
		if err := shard.Migrate(ctx, dir, f.directorySchema, def); err != nil {
			return &refusedError{err}
		}
		fmt.Fprintf(a.stdout, "directory in schema %s: default shard %s\n", safe(f.directorySchema), safe(def))
		return nil
	})
}

func (a *app) shardList(ctx context.Context, args []string) error {
	f := a.shardFlags("shard list", "", "Prints the directory: the default shard, and the tenants it puts elsewhere or is moving.\n--database-url is the directory's database.")
	return f.withShards(ctx, args, nil, func(dir *pgxpool.Pool, _ map[string]*pgxpool.Pool) error {
		q := pgx.Identifier{f.directorySchema}.Sanitize()
		var def string
		if err := dir.QueryRow(ctx, "SELECT default_shard FROM "+q+".directory").Scan(&def); err != nil {
			return fmt.Errorf("read the directory (schema %s): %w", f.directorySchema, err)
		}
		fmt.Fprintf(a.stdout, "default shard: %s\n", safe(def))
		rows, err := dir.Query(ctx, "SELECT tenant, shard, coalesce(moving_to, ''), fenced_at FROM "+q+".tenants ORDER BY tenant")
		if err != nil {
			return err
		}
		defer rows.Close()
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tSHARD\tMOVING TO\tFENCED AT")
		for rows.Next() {
			var tenant, sh, moving string
			var fenced *time.Time
			if err := rows.Scan(&tenant, &sh, &moving, &fenced); err != nil {
				return err
			}
			at := ""
			if fenced != nil {
				at = fenced.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", safe(tenant), safe(sh), safe(moving), at)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return tw.Flush()
	})
}

// withShards parses args, opens the directory's database (--database-url) and each --shard's,
// and runs do with them.
func (f *shardFlags) withShards(ctx context.Context, args []string, check func() error, do func(dir *pgxpool.Pool, shards map[string]*pgxpool.Pool) error) error {
	return f.execute(ctx, args, check, func(s *session) error {
		shards := map[string]*pgxpool.Pool{}
		defer func() {
			for _, p := range shards {
				p.Close()
			}
		}()
		for name, url := range f.shards {
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				return usagef("--shard %s: not a Postgres URL: %v", name, err)
			}
			cfg.MaxConns = 2
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return err
			}
			shards[name] = p
			if err := p.Ping(ctx); err != nil {
				return fmt.Errorf("shard %q at %s:%d does not answer: %w", name, cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
			}
		}
		return do(s.pool, shards)
	})
}
