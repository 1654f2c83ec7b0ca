package activity_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// TestMain fails the test binary if a goroutine outlives the tests: attempts run on goroutines of
// their own, and completions are written by a goroutine that hands on to the next.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// setup returns a migrated store in a fresh schema; with TEMPOTENT_TEST_PARTITIONED set, its
// receipts are partitioned (make test runs the package both ways).
func setup(t *testing.T, cfg *activity.Config) (*activity.Store, string) {
	t.Helper()
	s, schema := setupPlain(t, cfg)
	if os.Getenv("TEMPOTENT_TEST_PARTITIONED") != "" {
		partitionReceipts(t, schema)
	}
	return s, schema
}

// partitionReceipts partitions the receipts table of schema by day, as an operator does.
func partitionReceipts(t *testing.T, schema string) {
	t.Helper()
	op, err := operator.NewClient(pgtest.Pool(t), operator.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, op.Partition(context.Background()))
}

// setupPlain returns a migrated store in a fresh schema, its receipts table not partitioned.
func setupPlain(t *testing.T, cfg *activity.Config) (*activity.Store, string) {
	t.Helper()
	schema := pgtest.Schema(t)
	c := activity.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	s, err := activity.NewStore(pgtest.Pool(t), &c)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s, schema
}

// countReceipts returns the number of receipts in schema.
func countReceipts(t *testing.T, schema string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".receipts").Scan(&n))
	return n
}

// receiptState returns the state and fence of k's receipt.
func receiptState(t *testing.T, schema string, k keys.Key) (state string, fence int64) {
	t.Helper()
	require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT state, fence FROM "+schema+".receipts WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)",
		k.Namespace, k.Tenant, k.Operation, k.ID).Scan(&state, &fence))
	return state, fence
}

// call returns a Call for key id with the fingerprint of req.
func call(t *testing.T, id string, req any) activity.Call {
	t.Helper()
	fp, err := keys.FingerprintOf(req)
	require.NoError(t, err)
	return activity.Call{
		Key:         keys.Key{Namespace: "default", Tenant: "acme", Operation: "Charge", ID: id},
		Fingerprint: fp,
	}
}
