package activitytest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activitytest"
	"github.com/tempotent/tempotent/inbox"
)

// A shipper consumer as a user might write it, safe or not: each message ships once, a row in
// its shipments table.
type shipper func(ib *inbox.Inbox, db *pgxpool.Pool, table string) func(context.Context, inbox.Message) error

// shipInTx writes the shipment through the inbox's transaction.
func shipInTx(ib *inbox.Inbox, _ *pgxpool.Pool, table string) func(context.Context, inbox.Message) error {
	return func(ctx context.Context, m inbox.Message) error {
		_, err := ib.Process(ctx, m, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (message_id) VALUES ($1)", m.ID)
			return err
		})
		return err
	}
}

// shipWithClaim owns its transaction and claims the message in it.
func shipWithClaim(ib *inbox.Inbox, db *pgxpool.Pool, table string) func(context.Context, inbox.Message) error {
	return func(ctx context.Context, m inbox.Message) error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			first, err := ib.Claim(ctx, tx, m)
			if err != nil || !first {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO "+table+" (message_id) VALUES ($1)", m.ID)
			return err
		})
	}
}

// shipOutsideTx runs only for the message's first processing, but writes through a connection
// of its own: the write commits even when the inbox's transaction does not.
func shipOutsideTx(ib *inbox.Inbox, db *pgxpool.Pool, table string) func(context.Context, inbox.Message) error {
	return func(ctx context.Context, m inbox.Message) error {
		_, err := ib.Process(ctx, m, func(ctx context.Context, _ pgx.Tx) error {
			_, err := db.Exec(ctx, "INSERT INTO "+table+" (message_id) VALUES ($1)", m.ID)
			return err
		})
		return err
	}
}

// shipWithoutInbox ships on every delivery.
func shipWithoutInbox(_ *inbox.Inbox, db *pgxpool.Pool, table string) func(context.Context, inbox.Message) error {
	return func(ctx context.Context, m inbox.Message) error {
		_, err := db.Exec(ctx, "INSERT INTO "+table+" (message_id) VALUES ($1)", m.ID)
		return err
	}
}

// shipAndAckAnyway acknowledges every delivery, even one whose transaction failed.
func shipAndAckAnyway(ib *inbox.Inbox, db *pgxpool.Pool, table string) func(context.Context, inbox.Message) error {
	safe := shipInTx(ib, db, table)
	return func(ctx context.Context, m inbox.Message) error {
		_ = safe(ctx, m)
		return nil
	}
}

// consumerCheck returns the check of consumer on a schema of its own.
func consumerCheck(t *testing.T, consumer shipper) activitytest.ConsumerCheck {
	db, schema := activitytest.NewSchema(t)
	table := pgx.Identifier{schema, "shipments"}.Sanitize()
	_, err := db.Exec(context.Background(), "CREATE TABLE "+table+" (message_id text NOT NULL)")
	require.NoError(t, err)
	cfg := inbox.Config{Consumer: "shipper", Schema: schema}
	return activitytest.ConsumerCheck{
		DB: db, Inbox: cfg,
		Consumer: func(db *pgxpool.Pool) func(context.Context, inbox.Message) error {
			ib, err := inbox.New(db, cfg)
			require.NoError(t, err)
			return consumer(ib, db, table)
		},
		Message: func(id string) inbox.Message { return inbox.Message{ID: id, Payload: []byte(`{"order":1}`)} },
		Effects: func() int {
			var n int
			require.NoError(t, db.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
			return n
		},
	}
}

func TestRequireConsumedOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		consumer shipper
		want     []string
	}{
		{name: "EffectInTheInboxTransaction", consumer: shipInTx},
		{name: "EffectAfterClaimInItsOwnTransaction", consumer: shipWithClaim},
		{name: "EffectOutsideTheInboxTransaction", consumer: shipOutsideTx, want: []string{
			activitytest.PathConnectionKilled + `: the crashed delivery left 1 effect(s) for message`,
			activitytest.PathConnectionKilled + `: 2 effects for message`,
			activitytest.PathContextCancelled + `: 2 effects for message`,
			"outside the inbox's transaction"}},
		{name: "NoInbox", consumer: shipWithoutInbox, want: []string{
			activitytest.PathDeliveredAgain + `: 3 effects for message`,
			activitytest.PathDeliveredAtOnce + `: 4 effects for message`,
			`the inbox of consumer "shipper" has no record of message`}},
		{name: "AcknowledgesAFailedDelivery", consumer: shipAndAckAnyway, want: []string{
			activitytest.PathConnectionKilled + ": the delivery was acknowledged though its transaction did not commit"}},
	} {
		t.Run(verdictName(c.name, c.want), func(t *testing.T) {
			t.Parallel()
			check := consumerCheck(t, c.consumer)
			requireVerdict(t, failures(t, func(tb testing.TB) { activitytest.RequireConsumedOnce(tb, check) }), c.want, nil)
		})
	}
}

// The deliveries at once meet the first one's uncommitted claim: with a lock timeout too short
// to wait it out, every other delivery gets an InProgressError, and is redelivered. Without the
// check's hold of the first commit, none would.
func TestRequireConsumedOnceOverlapsTheDeliveries(t *testing.T) {
	t.Parallel()
	check := consumerCheck(t, shipInTx)
	check.Inbox.LockTimeout = time.Millisecond
	var inProgress atomic.Int32
	check.Consumer = func(db *pgxpool.Pool) func(context.Context, inbox.Message) error {
		cfg := check.Inbox
		ib, err := inbox.New(db, cfg)
		require.NoError(t, err)
		handle := shipInTx(ib, db, pgx.Identifier{cfg.Schema, "shipments"}.Sanitize())
		return func(ctx context.Context, m inbox.Message) error {
			err := handle(ctx, m)
			if errors.Is(err, inbox.ErrInProgress) {
				inProgress.Add(1)
			}
			return err
		}
	}
	activitytest.RequireConsumedOnce(t, check)
	// At least the three deliveries that overlap the first: a redelivery after the killed
	// connection may also meet its claim, until Postgres has ended that backend.
	require.GreaterOrEqual(t, inProgress.Load(), int32(3), "every delivery but the first met its uncommitted claim")
}
