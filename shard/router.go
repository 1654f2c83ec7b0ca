package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
)

// Defaults of Config.
const (
	// SchemaDefault is the directory's Postgres schema.
	SchemaDefault = "tempotent_shard"
	// MaxStaleDefault is how long a Router uses what it read of a tenant's shard. The move
	// command waits as long after its fence (tempotent shard move --max-stale), so that few
	// calls meet the old shard's refusal (see Config.MaxStale).
	MaxStaleDefault = 5 * time.Second
	// cacheLimit bounds how many tenants a Router remembers; past it, it forgets them all.
	cacheLimit = 100_000
)

// Config configures a Router. Its fields:
//
//   - Directory: the pool of the database that holds the directory, the table that maps
//     tenants to shards (Router.Migrate creates it). Required. It may be one of the shards'
//     databases; every worker and the move command must use the same one.
//   - Schema: the directory's Postgres schema. Default SchemaDefault.
//   - Shards: each shard's name and its receipts' store. Required, at least one. A shard's
//     name is what the directory records; its store's pool may change (a new URL, a failover)
//     while its name stays.
//   - Default: the shard of every tenant the directory does not name (the empty tenant too).
//     Required, and one of Shards. Router.Migrate records it in the directory, and a Router
//     whose Default is not the directory's refuses to route, since the two would send a tenant
//     to two shards.
//   - MaxStale: how long a tenant's shard, once read from the directory, is used without
//     reading it again; past it, a call that cannot read the directory fails (retryably)
//     rather than use an older answer. Default MaxStaleDefault. It bounds how long after a
//     move's fence a worker may still be handed the old shard's store; it is not what keeps a
//     retry after the move from acting twice. The old shard does that itself: from the move's
//     fence its receipt statements refuse the tenant's new attempts, and from just before the
//     copy all of the tenant's receipt statements, with a MovedError (see Move), however late
//     a worker handed the old store before the move arrives there (a longer MaxStale, a pool
//     wait, the authorization hook). Register and RegisterTx then look the route up again and
//     run on the new shard. Giving the move command's --max-stale at least the workers'
//     MaxStale only makes such refusals rarer.
//   - Every store in Shards must be opened with activity.Config.TenantFences, on a database
//     migrated to migration 012; NewRouter refuses one without it.
type Config struct {
	Directory *pgxpool.Pool
	Schema    string
	Shards    map[string]*activity.Store
	Default   string
	MaxStale  time.Duration
}

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, SchemaDefault)
	c.MaxStale = cmp.Or(c.MaxStale, MaxStaleDefault)
	return c
}

// Validate names the first field of c (with defaults applied) that is wrong.
func (c Config) Validate() error {
	switch {
	case c.Directory == nil:
		return errors.New("shard.Config.Directory is nil; pass the pool of the directory's database")
	case len(c.Shards) == 0:
		return errors.New("shard.Config.Shards is empty; name at least one shard and its activity.Store")
	case c.Shards[c.Default] == nil:
		return fmt.Errorf("shard.Config.Default %q is not one of Shards (%v); name the shard of the tenants the directory does not list", c.Default, shardNames(c.Shards))
	case c.MaxStale < 0:
		return errors.New("shard.Config.MaxStale is negative; leave it zero for MaxStaleDefault")
	}
	for name, s := range c.Shards {
		if s == nil {
			return fmt.Errorf("shard.Config.Shards[%q] is nil; give each shard an activity.Store", name)
		}
		if !s.Config().TenantFences {
			return fmt.Errorf("shard.Config.Shards[%q] was opened without activity.Config.TenantFences; open every shard's store with it (and migrate it: migration 012), so that a worker handed this shard's store before a move cannot write a receipt here after the move", name)
		}
		if err := validName(name); err != nil {
			return fmt.Errorf("shard.Config.Shards: %w", err)
		}
	}
	return nil
}

// Router picks the receipts' store of a tenant: the shard the directory names for it, or
// Config.Default. It is safe for concurrent use; create one per worker.
type Router struct {
	cfg Config

	mu    sync.Mutex
	cache map[string]route
}

// route is what the Router read of a tenant, and until when it may use it.
type route struct {
	shard    string
	movingTo string // a move is under way: the tenant's calls are refused until it switches
	until    time.Time
}

// NewRouter returns a Router on cfg. It does not touch the database: call Migrate once (any
// worker, or the move command's first run) before routing.
func NewRouter(cfg Config) (*Router, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Router{cfg: cfg, cache: make(map[string]route)}, nil
}

// Migrate creates the directory's schema and table if they are missing, and records
// Config.Default as the directory's default shard if it has none. It is safe to run
// concurrently and again.
func (r *Router) Migrate(ctx context.Context) error {
	return Migrate(ctx, r.cfg.Directory, r.cfg.Schema, r.cfg.Default)
}

// Store returns the store of tenant's shard. It reads the directory at most once per
// Config.MaxStale for each tenant. It fails with a *MovingError while a move of the tenant is
// under way (from its fence to its switch), and with a *RouteError when the directory cannot be
// read or names a shard or default this Router does not know; both are retryable.
func (r *Router) Store(ctx context.Context, tenant string) (*activity.Store, error) {
	rt, err := r.route(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if rt.movingTo != "" {
		return nil, &MovingError{Tenant: tenant, From: rt.shard, To: rt.movingTo}
	}
	s := r.cfg.Shards[rt.shard]
	if s == nil {
		return nil, &RouteError{Tenant: tenant, Err: fmt.Errorf("the directory puts it on shard %q, which this worker does not know (it knows %v); add the shard to shard.Config.Shards", rt.shard, shardNames(r.cfg.Shards))}
	}
	return s, nil
}

// Forget drops what the Router read of tenant's shard: its next call reads the directory again.
// Call it on a *MovedError (Register and RegisterTx do), which says the answer in hand is out of
// date.
func (r *Router) Forget(tenant string) {
	r.mu.Lock()
	delete(r.cache, tenant)
	r.mu.Unlock()
}

func (r *Router) route(ctx context.Context, tenant string) (route, error) {
	r.mu.Lock()
	rt, ok := r.cache[tenant]
	r.mu.Unlock()
	if ok && time.Now().Before(rt.until) {
		return rt, nil
	}
	// The validity runs from before the query: the answer is used at most MaxStale after the
	// directory gave it, whatever the query's own time.
	until := time.Now().Add(r.cfg.MaxStale)
	var def string
	err := r.cfg.Directory.QueryRow(ctx, lookupSQL(r.cfg.Schema), tenant).Scan(&def, &rt.shard, &rt.movingTo)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return route{}, &RouteError{Tenant: tenant, Err: errors.New("the directory has no default shard; run shard.Router.Migrate (or tempotent shard move, which migrates it) first")}
	case err != nil:
		return route{}, &RouteError{Tenant: tenant, Err: fmt.Errorf("read the directory: %w", err)}
	case def != r.cfg.Default:
		return route{}, &RouteError{Tenant: tenant, Err: fmt.Errorf("the directory's default shard is %q, this worker's shard.Config.Default is %q; configure every worker with the directory's", def, r.cfg.Default)}
	}
	rt.until = until
	r.mu.Lock()
	if len(r.cache) >= cacheLimit {
		clear(r.cache)
	}
	r.cache[tenant] = rt
	r.mu.Unlock()
	return rt, nil
}

func shardNames(m map[string]*activity.Store) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
