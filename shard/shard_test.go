package shard_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/shard"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// shards is two Postgres clusters of their own, each a shard with a migrated receipts table;
// the directory lives in shard "a", which is the default.
type shards struct {
	pools  map[string]*pgxpool.Pool
	stores map[string]*activity.Store
}

func twoShards(t *testing.T, settings ...string) *shards {
	t.Helper()
	ctx := context.Background()
	s := &shards{pools: map[string]*pgxpool.Pool{}, stores: map[string]*activity.Store{}}
	for _, name := range []string{"a", "b"} {
		pool, err := pgxpool.New(ctx, pgtest.Cluster(t, settings...))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		store, err := activity.NewStore(pool, &activity.Config{TenantFences: true})
		require.NoError(t, err)
		require.NoError(t, store.Migrate(ctx))
		s.pools[name], s.stores[name] = pool, store
	}
	return s
}

// router returns a Router on the shards whose answers last maxStale.
func (s *shards) router(t *testing.T, maxStale time.Duration) *shard.Router {
	t.Helper()
	r, err := shard.NewRouter(shard.Config{Directory: s.pools["a"], Shards: s.stores, Default: "a", MaxStale: maxStale})
	require.NoError(t, err)
	require.NoError(t, r.Migrate(context.Background()))
	return r
}

// receipts counts the tenant's receipts in shard name.
func (s *shards) receipts(t *testing.T, name, tenant string) int {
	t.Helper()
	var n int
	require.NoError(t, s.pools[name].QueryRow(context.Background(), "SELECT count(*) FROM tempotent.receipts WHERE tenant = $1", tenant).Scan(&n))
	return n
}

func (s *shards) move(tenant, to string, log io.Writer) shard.Move {
	return shard.Move{Directory: s.pools["a"], Shards: s.pools, Tenant: tenant, To: to,
		MaxStale: time.Millisecond, Poll: time.Millisecond, By: "test", Reason: "test", Log: log}
}

// charge runs one intent of tenant through the router, counting the effects it makes.
func charge(ctx context.Context, r *shard.Router, tenant, id string, effects *atomic.Int64, hold chan struct{}) (string, error) {
	k, err := keys.Explicit("default", tenant, "Charge", id)
	if err != nil {
		return "", err
	}
	s, err := r.Store(ctx, tenant)
	if err != nil {
		return "", err
	}
	return activity.Do(ctx, s, activity.Call{Key: k, Request: id}, func(context.Context) (string, error) {
		if hold != nil {
			hold <- struct{}{} // running: the receipt is reserved
			<-hold             // until the test lets it finish
		}
		effects.Add(1)
		return "charged-" + id + "-" + time.Now().Format(time.RFC3339Nano), nil
	})
}

// TestRoutesByTenant: a tenant the directory does not name is on the default shard, a moved
// one on its shard, and each shard holds only its tenants' receipts.
func TestRoutesByTenant(t *testing.T) {
	ctx := context.Background()
	s := twoShards(t)
	r := s.router(t, time.Nanosecond)
	_, err := s.move("acme", "b", &bytes.Buffer{}).Run(ctx)
	require.NoError(t, err)

	var effects atomic.Int64
	for _, tenant := range []string{"acme", "globex", ""} {
		_, err := charge(ctx, r, tenant, "order-1", &effects, nil)
		require.NoError(t, err)
	}
	require.Equal(t, 1, s.receipts(t, "b", "acme"))
	require.Equal(t, 0, s.receipts(t, "a", "acme"))
	require.Equal(t, 1, s.receipts(t, "a", "globex"))
	require.Equal(t, 1, s.receipts(t, "a", ""))
	require.Equal(t, 0, s.receipts(t, "b", "globex"))
}

// TestRouterRefusesAnotherDefault: a worker whose default is not the directory's would send the
// tenants it covers to another shard than the others do.
func TestRouterRefusesAnotherDefault(t *testing.T) {
	ctx := context.Background()
	s := twoShards(t)
	s.router(t, 0) // records "a"
	r, err := shard.NewRouter(shard.Config{Directory: s.pools["a"], Shards: s.stores, Default: "b"})
	require.NoError(t, err)
	require.ErrorContains(t, r.Migrate(ctx), `default shard is "a"`)
	_, err = r.Store(ctx, "acme")
	var route *shard.RouteError
	require.ErrorAs(t, err, &route)
	require.ErrorContains(t, err, `default shard is "a"`)
}

// TestRetryAfterMoveReplays: an attempt that reserved before the move's fence finishes on the
// old shard while the move waits for it; meanwhile the tenant's calls are refused; after the
// move its retry goes to the new shard and replays the result: the effect happened once.
func TestRetryAfterMoveReplays(t *testing.T) {
	ctx := context.Background()
	s := twoShards(t)
	r := s.router(t, time.Nanosecond)
	var effects atomic.Int64

	// A first attempt that holds its reservation until let go.
	hold := make(chan struct{})
	first := make(chan string, 1)
	go func() {
		out, err := charge(ctx, r, "acme", "order-1", &effects, hold)
		if err != nil {
			out = "error: " + err.Error()
		}
		first <- out
	}()
	<-hold

	log, moved := s.startMove(ctx, "acme", "b")
	log.await(t, "waiting for 1 receipts")

	_, err := charge(ctx, r, "acme", "order-2", &effects, nil)
	var moving *shard.MovingError
	require.ErrorAs(t, err, &moving, "a call during the move is refused")
	require.Equal(t, shard.MovingError{Tenant: "acme", From: "a", To: "b"}, *moving)

	hold <- struct{}{}
	result := <-first
	log.await(t, "copied 1 receipts")
	require.NoError(t, <-moved)

	retried, err := charge(ctx, r, "acme", "order-1", &effects, nil)
	require.NoError(t, err)
	require.Equal(t, result, retried, "the retry replays the first attempt's result")
	require.Equal(t, int64(1), effects.Load(), "the effect happened once")
	require.Equal(t, 1, s.receipts(t, "b", "acme"))
}

// TestMoveAgainIsANoOp: a second run of a finished move finds the tenant there.
func TestMoveAgainIsANoOp(t *testing.T) {
	s := twoShards(t)
	s.router(t, 0)
	res, err := s.move("acme", "b", &bytes.Buffer{}).Run(context.Background())
	require.NoError(t, err)
	require.False(t, res.Already)
	res, err = s.move("acme", "b", &bytes.Buffer{}).Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Already)
}

// startMove runs a move of tenant to shard to in the background: its log, line by line (closed
// when it ends), and its error.
func (s *shards) startMove(ctx context.Context, tenant, to string) (lines, <-chan error) {
	log := make(lines, 64)
	moved := make(chan error, 1)
	go func() {
		_, err := s.move(tenant, to, log).Run(ctx)
		close(log)
		moved <- err
	}()
	return log, moved
}

// lines is a move's log: each line it writes, in order, to be awaited.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}

// await reads lines until one contains want, and returns those it read.
func (l lines) await(t *testing.T, want string) string {
	t.Helper()
	var read strings.Builder
	for line := range l {
		read.WriteString(line)
		if strings.Contains(line, want) {
			return read.String()
		}
	}
	t.Fatalf("the log ended without %q:\n%s", want, read.String())
	return ""
}

// TestMoveWaitsOutTheRoutersAnswers: after its fence, a move waits MaxStale before it copies, so
// that no Router still uses a route it read before the fence; stopped meanwhile, it leaves the
// tenant fenced and nothing copied.
func TestMoveWaitsOutTheRoutersAnswers(t *testing.T) {
	s := twoShards(t)
	r := s.router(t, time.Nanosecond)
	var effects atomic.Int64
	_, err := charge(context.Background(), r, "acme", "order-1", &effects, nil)
	require.NoError(t, err)

	m := s.move("acme", "b", io.Discard)
	m.MaxStale = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = m.Run(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 0, s.receipts(t, "b", "acme"), "nothing is copied before the wait ends")
	_, err = charge(context.Background(), r, "acme", "order-1", &effects, nil)
	var moving *shard.MovingError
	require.ErrorAs(t, err, &moving)
}

// TestMoveBetweenPartitionedAndPlain: a shard whose receipts are partitioned by day has a
// column the other lacks; the tenant moves there and back, and its retry replays each time.
func TestMoveBetweenPartitionedAndPlain(t *testing.T) {
	ctx := context.Background()
	s := twoShards(t)
	op, err := operator.NewClient(s.pools["a"], operator.Config{})
	require.NoError(t, err)
	require.NoError(t, op.Partition(ctx))
	r := s.router(t, time.Nanosecond)
	var effects atomic.Int64
	first, err := charge(ctx, r, "acme", "order-1", &effects, nil)
	require.NoError(t, err)
	for _, to := range []string{"b", "a"} {
		_, err := s.move("acme", to, io.Discard).Run(ctx)
		require.NoError(t, err)
		again, err := charge(ctx, r, "acme", "order-1", &effects, nil)
		require.NoError(t, err)
		require.Equal(t, first, again, "on %s", to)
	}
	require.Equal(t, int64(1), effects.Load())
}

// TestMoveRefusesShardsOfDifferentVersions: receipts copied between tables of different columns
// would lose what one records; the move stops before copying, the tenant still fenced.
func TestMoveRefusesShardsOfDifferentVersions(t *testing.T) {
	ctx := context.Background()
	s := twoShards(t)
	s.router(t, 0)
	_, err := s.pools["b"].Exec(ctx, "ALTER TABLE tempotent.receipts ADD COLUMN later text")
	require.NoError(t, err)
	_, err = s.move("acme", "b", io.Discard).Run(ctx)
	require.ErrorContains(t, err, "their receipts tables differ in [later]; migrate both to the same version")
}

// TestMoveCarriesAReceiptWhoseAttemptCrashed: a pending receipt whose lease has ended (its
// worker died mid-call) does not hold the move, which would keep the tenant fenced for good: it
// is copied as it is, and the retry on the new shard finds it there rather than acting afresh.
func TestMoveCarriesAReceiptWhoseAttemptCrashed(t *testing.T) {
	ctx := context.Background()
	s := twoShards(t)
	r := s.router(t, time.Nanosecond)
	var effects atomic.Int64

	// An attempt that charges and vanishes, its lease short: as a worker killed mid-call.
	k, err := keys.Explicit("default", "acme", "Charge", "order-1")
	require.NoError(t, err)
	store, err := r.Store(ctx, "acme")
	require.NoError(t, err)
	receipttest.CrashAfterEffect(ctx, store, activity.Call{Key: k, Request: "order-1", Lease: 20 * time.Millisecond},
		func(keys.Token) { effects.Add(1) })
	require.Eventually(t, func() bool {
		var ended bool
		require.NoError(t, s.pools["a"].QueryRow(ctx, "SELECT lease_expires_at < now() FROM tempotent.receipts WHERE tenant = 'acme'").Scan(&ended))
		return ended
	}, time.Minute, 5*time.Millisecond, "the dead attempt's lease never ended")

	var log bytes.Buffer
	bounded, cancel := context.WithTimeout(ctx, time.Minute) // as the command's --wait
	defer cancel()
	_, err = s.move("acme", "b", &log).Run(bounded)
	require.NoError(t, err, "the move did not finish: %s", log.String())
	require.NotContains(t, log.String(), "waiting for", "the move waited for an attempt that had died")
	require.Equal(t, 1, s.receipts(t, "b", "acme"), "the dead attempt's receipt was not moved")

	// The retry reaches the new shard and finds the receipt: an unknown outcome to settle (the
	// downstream does not deduplicate), not a second charge.
	_, err = charge(ctx, r, "acme", "order-1", &effects, nil)
	require.ErrorAs(t, err, new(*activity.OutcomeUnknownError))
	require.Equal(t, int64(1), effects.Load(), "the retry charged again after the move")
}
