package operator_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/receipttest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// TestMain fails the test binary if a goroutine outlives the tests: the receipts these tests act
// on are written by activity attempts, which run on goroutines of their own.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// setup returns a migrated store in a fresh schema, whose receipts are partitioned with
// TEMPOTENT_TEST_PARTITIONED set, and an operator client on them.
func setup(t *testing.T, cfg *activity.Config) (*activity.Store, *operator.Client, string) {
	t.Helper()
	s, op, schema := setupPlain(t, cfg)
	if os.Getenv("TEMPOTENT_TEST_PARTITIONED") != "" {
		require.NoError(t, op.Partition(context.Background()))
	}
	return s, op, schema
}

// setupPlain is setup with the receipts table never partitioned.
func setupPlain(t *testing.T, cfg *activity.Config) (*activity.Store, *operator.Client, string) {
	t.Helper()
	c := activity.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = pgtest.Schema(t)
	s, err := activity.NewStore(pgtest.Pool(t), &c)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	// The client reads and writes results as the store does (its codecs), and reports to the
	// store's metrics handler.
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: c.Schema, Codecs: c.Codecs, MetricsHandler: c.MetricsHandler})
	require.NoError(t, err)
	return s, op, c.Schema
}

// countReceipts returns the number of receipts in schema.
func countReceipts(t *testing.T, schema string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".receipts").Scan(&n))
	return n
}

// chargeResult is what the charges of these tests return.
type chargeResult struct {
	ChargeID string `json:"charge_id"`
	Token    string `json:"token"`
}

// call returns a Call for the charge of intent id, with the fingerprint of req.
func call(t *testing.T, id string, req any) activity.Call {
	t.Helper()
	fp, err := keys.FingerprintOf(req)
	require.NoError(t, err)
	return activity.Call{Key: keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: id}, Fingerprint: fp}
}

// unknownOutcome leaves c's receipt recorded as OutcomeUnknown: an attempt charges and dies, and
// the next finds a downstream that does not deduplicate and no reconcile. It returns the count
// of charges, which the caller's later attempts go on counting.
func unknownOutcome(t *testing.T, ctx context.Context, s *activity.Store, c activity.Call) *int {
	t.Helper()
	calls := new(int)
	receipttest.CrashAfterEffect(ctx, s, c, func(keys.Token) { *calls++ })
	_, err := receipttest.DoUntilDone(ctx, s, c, func(context.Context) (chargeResult, error) { *calls++; return chargeResult{}, nil })
	require.ErrorAs(t, err, new(*activity.OutcomeUnknownError))
	require.Equal(t, 1, *calls)
	return calls
}
