package engine

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
)

// readTakeOver takes a receipt over only where Do would at once: pending, its lease ended,
// recorded for this very request, its step not compensated, and no settle time to decide in Go
// (no Reconcile). Every other receipt it only reads, leaving the row as it was.
func TestReadTakeOverTakesOnlyWhatDoWould(t *testing.T) {
	t.Parallel()
	s := reserveStore(t, Config{})
	ctx := context.Background()
	batch := func(id string) Call {
		c := reserveCall(t, id, true)
		c.DownstreamKeyMemory = math.MaxInt64
		require.True(t, c.runsAgain(s.cfg.Retention))
		return c
	}
	// reserved writes c's receipt under a lease of lease (a microsecond: ended at once).
	reserved := func(c Call, lease time.Duration) {
		_, err := s.reserveOne(ctx, &reserveReq{call: c, reservation: newReservation(), lease: lease})
		require.NoError(t, err)
	}
	current := func(k keys.Key) pgtype.UUID {
		var r pgtype.UUID
		require.NoError(t, s.db.QueryRow(ctx, "SELECT reservation FROM "+s.table()+" WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)",
			k.Namespace, k.Tenant, k.Operation, k.ID).Scan(&r))
		return r
	}
	exec := func(sql string, args ...any) {
		_, err := s.db.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}

	ended := batch("ended")
	reserved(ended, time.Microsecond)
	res := newReservation()
	r, fence, err := s.readTakeOver(ctx, ended, res, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, fence, "a released receipt of this request was not taken over")
	require.Equal(t, int64(2), *fence)
	require.Equal(t, res.uuid(), current(ended.Key), "taken over, but not under the new reservation")
	require.LessOrEqual(t, r.lease, time.Duration(0), "the receipt is answered as it was read")

	live := batch("live")
	reserved(live, time.Hour)
	other := batch("other")
	reserved(other, time.Microsecond)
	other.Fingerprint, err = keys.FingerprintOf("another request")
	require.NoError(t, err)
	reconciled := batch("reconciled")
	reserved(reconciled, time.Microsecond)
	reconciled.Reconcile = func(context.Context, keys.Token) (any, bool, error) { return nil, false, nil }
	finished := batch("finished")
	reserved(finished, time.Microsecond)
	exec("UPDATE "+s.table()+" SET state = 'completed', result = $2, completed_at = now() WHERE id = $1", finished.Key.ID, []byte("1"))
	compensated := batch("compensated")
	reserved(compensated, time.Microsecond)
	comp, err := compensated.Key.Compensation("refund")
	require.NoError(t, err)
	exec(s.sql.insertFinal, comp.Namespace, comp.Tenant, comp.Operation, comp.ID, string(comp.Token()), compensated.Fingerprint.Sum[:],
		compensated.Fingerprint.Version, "completed", []byte("1"), nil, nil, nil, s.cfg.Retention.Microseconds(),
		nil, nil, nil, nil, string(compensated.Key.Token()))

	for name, c := range map[string]Call{"a live lease": live, "another request": other, "a call that reconciles": reconciled,
		"a finished receipt": finished, "a compensated step": compensated} {
		before := current(c.Key)
		_, fence, err := s.readTakeOver(ctx, c, newReservation(), time.Minute)
		require.NoError(t, err, name)
		require.Nil(t, fence, "%s was taken over", name)
		require.Equal(t, before, current(c.Key), "%s: the row changed", name)
	}
}

// A receipt released after readTakeOver read it (a new reservation, an ended lease, what the
// releasing attempt may have done in effect_possible) is not taken over: the statement read the
// receipt as it was before, and Do would decide from that. The update waits for the releasing
// transaction's row lock, checks the row again once it is free, and no longer finds the
// reservation it read.
func TestReadTakeOverLosesToARelease(t *testing.T) {
	t.Parallel()
	s := reserveStore(t, Config{})
	ctx := context.Background()
	c := reserveCall(t, "released", true)
	c.DownstreamKeyMemory = math.MaxInt64
	_, err := s.reserveOne(ctx, &reserveReq{call: c, reservation: newReservation(), lease: time.Microsecond})
	require.NoError(t, err)
	k := c.Key

	tx, err := s.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	released := newReservation()
	_, err = tx.Exec(ctx, "UPDATE "+s.table()+" SET reservation = $5, lease_expires_at = now() - interval '1 second' WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)",
		k.Namespace, k.Tenant, k.Operation, k.ID, released.uuid())
	require.NoError(t, err)

	type answer struct {
		r     receipt
		fence *int64
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		r, fence, err := s.readTakeOver(ctx, c, newReservation(), time.Minute)
		done <- answer{r, fence, err}
	}()
	// The statement has read the receipt as it was and waits for the row's lock.
	for {
		var waiting bool
		require.NoError(t, s.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH cur AS%' AND query LIKE '%"+s.cfg.Schema+"%')").Scan(&waiting))
		if waiting {
			break
		}
		select {
		case a := <-done:
			t.Fatalf("readTakeOver did not wait for the row's lock: %+v", a)
		case <-time.After(time.Millisecond):
		}
	}
	require.NoError(t, tx.Commit(ctx))
	a := <-done
	require.NoError(t, a.err)
	require.Nil(t, a.fence, "a receipt released after it was read was taken over")
	require.NotEqual(t, released.uuid(), a.r.reservation, "the receipt is answered as it was read, before the release")
	var now pgtype.UUID
	require.NoError(t, s.db.QueryRow(ctx, "SELECT reservation FROM "+s.table()+" WHERE id = $1", k.ID).Scan(&now))
	require.Equal(t, released.uuid(), now)
}
