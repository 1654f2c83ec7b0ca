package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/schema"
)

// fenceTenant fences tenant on s's shard as a move does (sealed or draining).
func fenceTenant(t *testing.T, s *Store, tenant string, sealed bool) {
	t.Helper()
	_, err := s.db.Exec(context.Background(), "INSERT INTO "+s.cfg.fences().table+" (tenant, moved_to, sealed, moved_by) VALUES ($1, 'b', $2, 'test')", tenant, sealed)
	require.NoError(t, err)
}

// requireMoved requires err to be the shard's refusal of tenant (TT001, naming it in its detail).
func requireMoved(t *testing.T, err error, tenant string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "TT001", pgErr.Code, "%v", err)
	var d struct{ Tenant string }
	require.NoError(t, json.Unmarshal([]byte(pgErr.Detail), &d))
	require.Equal(t, tenant, d.Tenant)
}

// tenantCall is reserveCall for a key of tenant.
func tenantCall(t *testing.T, id, tenant string) Call {
	c := reserveCall(t, id, true)
	c.Key.Tenant = tenant
	return c
}

// batchOf returns a reservation batch of calls, and the completion of each reservation (a
// stored result), for reservations.send and completions.send.
func batchOf(calls ...Call) ([]*reserveReq, []*completion) {
	var reqs []*reserveReq
	var comps []*completion
	for _, c := range calls {
		r := &reserveReq{call: c, reservation: newReservation(), lease: time.Minute, done: make(chan struct{})}
		reqs = append(reqs, r)
		comps = append(comps, &completion{key: c.Key, reservation: r.reservation, fingerprint: c.Fingerprint,
			outcome: outcome{state: schema.StateCompleted, result: []byte("1")}, done: make(chan struct{})})
	}
	return reqs, comps
}

// TestSealedTenantCannotFailAnotherTenantsCompletion: a group commit of completions that holds a
// late completion of a sealed tenant records the other tenants' completions; the sealed tenant's
// row comes back skipped, and its lone write is refused for it alone (TT001 naming it). Before,
// the fence's check failed the whole statement, and every completion of the batch with it.
func TestSealedTenantCannotFailAnotherTenantsCompletion(t *testing.T) {
	t.Parallel()
	s := reserveStore(t, Config{TenantFences: true})
	reqs, comps := batchOf(tenantCall(t, "batch-moved", "moved"), tenantCall(t, "batch-innocent", "innocent"))
	s.reservations.send(reqs)
	for _, r := range reqs {
		require.NoError(t, r.err)
		require.False(t, r.alone)
	}
	fenceTenant(t, s, "moved", true)

	s.completions.send(comps)
	moved, innocent := comps[0], comps[1]
	require.NoError(t, innocent.err, "an unmoved tenant's completion failed with the sealed tenant's in its batch")
	require.True(t, innocent.written)
	require.NoError(t, moved.err)
	require.True(t, moved.skipped, "the sealed tenant's row was not left to its lone write")
	written, err := s.completeOne(context.Background(), moved)
	require.False(t, written)
	requireMoved(t, err, "moved")
}

// TestDrainingTenantCannotFailAnotherTenantsReservation: a reservation batch that holds a
// reservation of a draining tenant writes the other tenants' reservations in the batch; the
// draining tenant's comes back with no row and is written alone, where reserve refuses it.
// Before, the fence's check failed the whole batch, and every reservation of it went alone.
func TestDrainingTenantCannotFailAnotherTenantsReservation(t *testing.T) {
	t.Parallel()
	s := reserveStore(t, Config{TenantFences: true})
	fenceTenant(t, s, "moved", false)
	var reqs []*reserveReq
	for _, tenant := range []string{"moved", "innocent"} {
		reqs = append(reqs, &reserveReq{call: tenantCall(t, "reserve-"+tenant, tenant), reservation: newReservation(), lease: time.Minute, done: make(chan struct{})})
	}
	s.reservations.send(reqs)
	moved, innocent := reqs[0], reqs[1]
	require.NoError(t, innocent.err)
	require.False(t, innocent.alone, "the batch failed for the draining tenant's row, and the others went alone")
	require.True(t, innocent.receipt.inserted)
	require.True(t, moved.alone, "the draining tenant's reservation is not written alone")
	_, err := s.reserveOne(context.Background(), moved)
	requireMoved(t, err, "moved")
}

// TestFencedStoreRefusesRepeatableRead: a REPEATABLE READ transaction whose snapshot predates a
// tenant's fence, and that held no lock on the receipts table when the fence committed (Move's
// barrier does not wait for it), cannot see the fence; DoInTx in it is refused (SQLSTATE 0A000,
// saying to use READ COMMITTED) and writes nothing, instead of writing a receipt the move does
// not copy.
func TestFencedStoreRefusesRepeatableRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reserveStore(t, Config{TenantFences: true})
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		defer tx.Rollback(ctx)            //nolint:errcheck // rolled back below; this one for a failure
		_, err = tx.Exec(ctx, "SELECT 1") // the snapshot: business reads before the receipt
		require.NoError(t, err)
		fenceTenant(t, s, "moved-"+string(iso[:1]), true)
		c := tenantCall(t, "rr-"+string(iso), "moved-"+string(iso[:1]))
		_, err = s.DoInTx(ctx, tx, c, func(ctx context.Context, tx pgx.Tx) (*commonpb.Payload, error) { return storedResult(ctx) })
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "%s: a sealed tenant's receipt was written under a snapshot older than its fence", iso)
		require.Equal(t, "0A000", pgErr.Code)
		require.ErrorContains(t, err, "must run under READ COMMITTED")
		_ = tx.Rollback(ctx)
		var n int
		require.NoError(t, s.db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s.cfg.Schema, "receipts"}.Sanitize()+" WHERE tenant = $1", c.Key.Tenant).Scan(&n))
		require.Zero(t, n)
	}
}

// TestFencedDoInNewTxIsReadCommitted: DoInNewTx's own transaction is READ COMMITTED even where
// the role's or database's default_transaction_isolation is another level, which a fenced
// store's statements refuse.
func TestFencedDoInNewTxIsReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := repeatableReadStore(t)
	var level string
	_, err := s.DoInNewTx(ctx, tenantCall(t, "new-tx", "acme"), func(ctx context.Context, tx pgx.Tx) (*commonpb.Payload, error) {
		if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level); err != nil {
			return nil, err
		}
		return storedResult(ctx)
	})
	require.NoError(t, err)
	require.Equal(t, "read committed", level)
}

// TestSealedTenantsHeartbeatStopsTheAttempt: a heartbeat whose extension the shard refuses
// because the move sealed the tenant's fence cancels the attempt's context, with the refusal as
// its cause, as a fenced-out attempt's does: its completion would be refused, so it must not go
// on to the effect.
func TestSealedTenantsHeartbeatStopsTheAttempt(t *testing.T) {
	t.Parallel()
	s := reserveStore(t, Config{TenantFences: true})
	r := &reserveReq{call: tenantCall(t, "heartbeat", "moved"), reservation: newReservation(), lease: time.Minute}
	_, err := s.reserveOne(context.Background(), r)
	require.NoError(t, err)
	fenceTenant(t, s, "moved", true)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	l := &leaseHolder{store: s, key: r.call.Key, reservation: r.reservation, cancel: cancel}
	err = l.extend(ctx, time.Minute)
	requireMoved(t, err, "moved")
	require.Error(t, ctx.Err(), "the attempt goes on after its tenant's fence was sealed")
	requireMoved(t, context.Cause(ctx), "moved")
}

// TestFencedReservationOfANewKeyRefusesRepeatableRead: a reservation of a key no receipt holds
// yet, sent where the role's default isolation is REPEATABLE READ, is refused as a statement that
// finds a receipt is: the check is evaluated once per statement, not once per receipt found.
func TestFencedReservationOfANewKeyRefusesRepeatableRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := repeatableReadStore(t)
	_, err := s.Do(ctx, tenantCall(t, "new-key", "acme"), storedResult)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "a new key was reserved under REPEATABLE READ")
	require.Equal(t, "0A000", pgErr.Code)
	var n int
	require.NoError(t, s.db.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s.cfg.Schema, "receipts"}.Sanitize()).Scan(&n))
	require.Zero(t, n, "a receipt was written under REPEATABLE READ")
}

// repeatableReadStore is a fenced store in a migrated schema of its own, on a pool whose
// connections default to REPEATABLE READ, as a role's or database's setting can make them.
func repeatableReadStore(t *testing.T) *Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	migrated := reserveStore(t, Config{TenantFences: true})
	s, err := NewStore(db, &migrated.cfg)
	require.NoError(t, err)
	return s
}
