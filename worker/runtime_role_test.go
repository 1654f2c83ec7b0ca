package worker_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
	"github.com/tempotent/tempotent/worker"
)

// grantedRole migrates a fresh schema as the owner (the test database's superuser), creates a
// role, and gives it migrate.Grants, applied as the owner.
func grantedRole(t *testing.T) (schema, role string) {
	t.Helper()
	schema = pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pgtest.Pool(t), schema))
	role = pgtest.Role(t)
	grant(t, schema, role)
	return schema, role
}

// grant applies migrate.Grants as the owner.
func grant(t *testing.T, schema, role string) {
	t.Helper()
	grants, err := migrate.Grants(schema, role)
	require.NoError(t, err)
	_, err = pgtest.Pool(t).Exec(context.Background(), grants)
	require.NoError(t, err)
}

// swSecret signs the webhook deliveries of these tests (Standard Webhooks' whsec_ form).
const swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// owner runs stmt as the schema's owner, with {s} standing for the quoted schema: how the test
// arranges time passing (receipts and records past their retention).
func owner(t *testing.T, schema, stmt string) {
	t.Helper()
	_, err := pgtest.Pool(t).Exec(context.Background(), strings.ReplaceAll(stmt, "{s}", pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
}

// A whole worker connected as the runtime role, on the real dev server: it starts with -migrate
// on a schema the owner migrated, runs an activity whose receipt commits with an outbox message,
// has its dispatcher deliver that message into an inbox consumer, takes a webhook delivery and
// records its tallies, leaves an outcome unknown that the operator resolves (its audit row
// written by the role), and purges receipts, inbox records and webhook tallies — all without a
// privilege beyond migrate.Grants, and owning nothing.
func TestWorkerRunsUnderTheRuntimeRole(t *testing.T) {
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	ctx := context.Background()
	schema, role := grantedRole(t)
	env, err := worker.Start(ctx, worker.Config{
		DatabaseURL: pgtest.URLAs(t, role), Receipts: activity.Config{Schema: schema}, Migrate: true,
		TemporalCLI: cli, LogLevel: "error", PurgeEvery: -1, TaskQueue: "least-privilege",
	})
	require.NoError(t, err, "the worker did not start under the runtime role")
	t.Cleanup(env.Close)
	var user string
	require.NoError(t, env.Pool.QueryRow(ctx, "SELECT current_user").Scan(&user))
	require.Equal(t, role, user, "the worker is not connected as the runtime role")

	// An inbox consumer behind the dispatcher, applying versions in order.
	ledger, err := inbox.New(env.Pool, inbox.Config{Consumer: "ledger", Schema: schema})
	require.NoError(t, err)
	delivered := make(chan string, 8)
	require.NoError(t, env.Dispatch(outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		ran, err := ledger.Process(ctx, inbox.Message{ID: d.ID, Payload: d.Payload}, func(ctx context.Context, tx pgx.Tx) error {
			_, err := ledger.Newer(ctx, tx, d.Topic, int64(d.Attempt))
			return err
		})
		if ran {
			delivered <- d.Topic
		}
		return err
	}), &outbox.DispatcherConfig{Poll: 50 * time.Millisecond}))

	w := env.NewWorker()
	require.NoError(t, activity.RegisterTx(w, env.Store, "Ship", func(ctx context.Context, tx pgx.Tx, order string) (string, error) {
		return "shipped " + order, env.Outbox.Put(ctx, tx, outbox.Message{Topic: "order.shipped", Payload: []byte(order)})
	}, activity.Options{}))
	var charges atomic.Int32
	require.NoError(t, activity.Register(w, env.Store, "LegacyCharge", func(ctx context.Context, amount int) (string, error) {
		if charges.Add(1) == 1 {
			<-ctx.Done() // charged, then froze past its timeout
			return "", ctx.Err()
		}
		return "ch_second", nil
	}, activity.Options{}))
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, order string) (string, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
		var out string
		return out, workflow.ExecuteActivity(ctx, "Ship", order).Get(ctx, &out)
	}, workflow.RegisterOptions{Name: "Ship"})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, amount int) (string, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: time.Second,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 3},
		})
		var out string
		if err := workflow.ExecuteActivity(ctx, "LegacyCharge", amount).Get(ctx, &out); err != nil {
			return "", temporal.NewApplicationError("the charge's outcome is not known yet", "ChargeOutcome", err)
		}
		return out, nil
	}, workflow.RegisterOptions{Name: "Order"})
	runCtx, stop := context.WithCancel(ctx)
	running := make(chan error, 1)
	go func() { running <- env.Run(runCtx, w) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-running) })

	// The activity's receipt and its message, then the dispatcher and the inbox.
	var shipped string
	ship, err := env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "ship-1", TaskQueue: "least-privilege"}, "Ship", "order-1")
	require.NoError(t, err)
	require.NoError(t, ship.Get(ctx, &shipped))
	require.Equal(t, "shipped order-1", shipped)
	require.Equal(t, "order.shipped", <-delivered)

	// The webhook intake takes a delivery into the inbox and the outbox, and its dispatcher
	// hands it on.
	hook, err := webhook.NewHandler(env.Pool, env.Outbox, webhook.HandlerConfig{Source: "fakepay", Verifier: webhook.StandardWebhooks{Secrets: []string{swSecret}}})
	require.NoError(t, err)
	body := []byte(`{"type":"charge.succeeded","data":{"id":"ch_1"}}`)
	header, err := webhook.SignStandardWebhooks(swSecret, "msg_1", time.Now(), body)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/webhooks/fakepay", bytes.NewReader(body))
	req.Header = header
	rec := httptest.NewRecorder()
	hook.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, "the intake refused the delivery under the runtime role: %s", rec.Body)
	require.Equal(t, "webhook.fakepay", <-delivered)
	// Its tallies, flushed under the role.
	require.NoError(t, hook.Close(ctx), "the intake could not record its tallies under the runtime role")
	tallies, err := env.Operator.WebhookTallies(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, tallies, 1)
	require.Equal(t, int64(1), tallies[0].Accepted)

	// An outcome left unknown by a frozen attempt, resolved by the operator under the role.
	run, err := env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "order-1", TaskQueue: "least-privilege",
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1}}, "Order", 100)
	require.NoError(t, err)
	var token keys.Token
	require.Eventually(t, func() bool {
		page, err := env.Operator.Receipts(ctx, operator.Filter{State: operator.FilterUnknown})
		require.NoError(t, err)
		if len(page.Receipts) == 0 {
			return false
		}
		token = page.Receipts[0].Token
		return true
	}, time.Minute, 50*time.Millisecond, "no outcome became unknown")
	_, err = env.Operator.Resolve(ctx, token, operator.Resolution{Applied: true, Result: "ch_first", By: "oncall@example.com", Reason: "the gateway shows ch_first"})
	require.NoError(t, err, "the operator could not resolve under the runtime role")
	var charged string
	require.NoError(t, run.Get(ctx, &charged))
	require.Equal(t, "ch_first", charged, "the retry did not replay the resolution")
	entries, err := env.Operator.Audit(ctx, token)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "oncall@example.com", entries[0].Actor)

	// Time passes: the purge round under the role deletes the receipts and inbox records
	// past their retention, and the outbox prunes what it delivered.
	owner(t, schema, "UPDATE {s}.receipts SET expires_at = now() - interval '1 second'")
	owner(t, schema, "UPDATE {s}.inbox SET processed_at = now() - interval '31 days'")
	owner(t, schema, "UPDATE {s}.outbox SET delivered_at = now() - interval '31 days'")
	owner(t, schema, "UPDATE {s}.webhook_tallies SET minute = minute - interval '8 days'")
	purged, ran, err := env.PurgeRound(ctx)
	require.NoError(t, err, "the purge round failed under the runtime role")
	require.True(t, ran)
	require.Equal(t, worker.Purged{Receipts: 2, Inbox: 3, WebhookTallies: 1}, purged) // Ship, Order; ledger's 2, fakepay's 1; its accepted minute
	pruned, err := env.Outbox.Prune(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, int64(2), pruned)

	var owned int
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = $1", role).Scan(&owned))
	require.Zero(t, owned, "the runtime role created something")
}

// A partitioned receipts table under the runtime role: receipts work once the grants are applied
// again after Partition (it replaces the table the grants named), the uniqueness trigger runs with
// the role's rights, and the purge, which creates and drops partitions, is the owner's.
func TestPartitionedReceiptsUnderTheRuntimeRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, role := grantedRole(t)
	byOwner, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, byOwner.Partition(ctx))
	pool := pgtest.PoolAs(t, role)
	store, err := activity.NewStore(pool, &activity.Config{Schema: schema})
	require.NoError(t, err)
	do := func(id string) error {
		c := activity.Call{Key: keys.Key{Namespace: "default", Operation: "charge", ID: id}}
		c.Fingerprint, _ = keys.FingerprintOf(id)
		_, err := activity.Do(ctx, store, c, func(context.Context) (string, error) { return "ch_" + id, nil })
		return err
	}
	requireDenied(t, do("before"), "a receipt was written to the partitioned table without its grants")

	grant(t, schema, role)
	require.NoError(t, do("order-1"))
	require.NoError(t, do("order-1"), "the replay failed")

	// While the days ahead are there, the role's purge has no partition to make. Days pass: the
	// last day ahead is not there yet.
	op, err := operator.NewClient(pool, operator.Config{Schema: schema})
	require.NoError(t, err)
	env := &worker.Env{Config: worker.Config{}.WithDefaults(), Pool: pool, Operator: op}
	_, _, err = env.PurgeRound(ctx)
	require.NoError(t, err)
	var last string
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1) AND c.relname <> 'receipts_legacy' ORDER BY c.relname DESC LIMIT 1`,
		pgx.Identifier{schema, "receipts"}.Sanitize()).Scan(&last))
	owner(t, schema, "DROP TABLE {s}."+pgx.Identifier{last}.Sanitize())

	_, ran, err := env.PurgeRound(ctx)
	require.True(t, ran)
	requireDenied(t, err, "the runtime role maintained partitions")
	require.ErrorContains(t, err, "create partition")
	_, err = byOwner.Purge(ctx, 0)
	require.NoError(t, err, "the owner's purge failed")
	_, _, err = env.PurgeRound(ctx)
	require.NoError(t, err, "the owner made the day ahead, and the role's purge still failed")
}

// requireDenied requires err to be Postgres' insufficient_privilege.
func requireDenied(t *testing.T, err error, msg string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, msg)
	require.Equal(t, "42501", pgErr.Code, "%s: %v", msg, err)
}
