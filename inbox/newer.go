package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/internal/schema"
)

// ErrTypeInvalidVersion is the Temporal application error type of a *VersionError
// (non-retryable: the same call fails the same way).
const ErrTypeInvalidVersion = "tempotent.InboxInvalidVersion"

// Newer records, in the caller's transaction tx, that this consumer applies version of the
// object named object, and reports whether version is newer than every version of the object
// the consumer applied before (committed). Apply the event's change in tx only when it is; when
// it is not, the event is stale (an older version) or a repeat (the same version) and must be
// skipped, and Newer changed nothing.
//
// Providers send events out of order (Stripe documents it): a charge.succeeded may arrive after
// the charge.refunded that followed it. The inbox makes each message run once; Newer makes an
// older one not undo a newer one. Use it inside Process (or after Claim), on the same tx:
//
//	ran, err := ib.Process(ctx, m, func(ctx context.Context, tx pgx.Tx) error {
//		newer, err := ib.Newer(ctx, tx, ev.ChargeID, ev.Version)
//		if err != nil || !newer {
//			return err // stale: acknowledged, nothing applied
//		}
//		_, err = tx.Exec(ctx, "UPDATE charges SET status = $2 WHERE id = $1", ev.ChargeID, ev.Status)
//		return err
//	})
//
// A version is an int64 that grows with the object's history: the provider's object version
// or sequence number, or its event time as t.UnixMicro() (or Unix seconds). Versions start at
// 1. Two different events with the same version are one version: the second is not newer. Where
// the provider's time is too coarse to tell two changes apart (Stripe's created is in seconds),
// make the version from the time and the state's rank, created*8 + rank say, or from the
// state's rank alone when the object's states only move forward.
//
// Racing events of one object are serialised: the second Newer waits for the first one's
// transaction to end, and then compares with what it committed, so that of two events only the
// newer applies, whichever comes first, and neither applies twice. If tx rolls back, nothing is
// recorded. Under REPEATABLE READ or SERIALIZABLE the waiting one fails with a serialization
// error (SQLSTATE 40001) instead: retry its transaction. Events that touch several objects may
// deadlock each other (40P01), as any two transactions that update rows in different orders;
// Postgres breaks it and the delivery is retried.
//
// The records are kept as long as the consumer's objects live: a record removed while an old
// event of its object can still arrive would let that event apply. Package worker does not
// purge them; delete an object's row (table inbox_versions) when the object is gone for good.
//
// An empty object or a version below 1 is a *VersionError, before anything is sent: tx stays
// usable and nothing is recorded.
func (i *Inbox) Newer(ctx context.Context, tx pgx.Tx, object string, version int64) (newer bool, err error) {
	if object == "" || version < 1 {
		e := &VersionError{Consumer: i.cfg.Consumer, Object: object, Version: version}
		return false, temporal.NewNonRetryableApplicationError(e.Error(), ErrTypeInvalidVersion, e)
	}
	// A row comes back when this version is stored: the object's first, or one greater than the
	// stored version. ON CONFLICT locks the stored row, waiting for a concurrent transaction
	// that inserted or raised it, and compares with the committed version (READ COMMITTED):
	// two racing events cannot both see the old version and both apply, the older last.
	table := pgx.Identifier{i.cfg.Schema, "inbox_versions"}.Sanitize()
	err = tx.QueryRow(ctx, `INSERT INTO `+table+` AS v (consumer, object_id, version) VALUES ($1, $2, $3)
		ON CONFLICT (consumer, object_id) DO UPDATE SET version = excluded.version, applied_at = now()
		WHERE v.version < excluded.version
		RETURNING true`, i.cfg.Consumer, object, version).Scan(&newer)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // stale or a repeat: the stored version is at least this one
	}
	if err != nil {
		return false, fmt.Errorf("inbox: newer %s version %d: %w", object, version, schema.Explain(err, i.cfg.Schema))
	}
	return newer, nil
}

// VersionError reports a call to Newer that names no object or no usable version. Nothing was
// recorded; fix the caller (retrying the same call fails the same way).
type VersionError struct {
	Consumer, Object string
	Version          int64
}

func (e *VersionError) Error() string {
	if e.Object == "" {
		return fmt.Sprintf("inbox: consumer %q: Newer got an empty object ID; pass the ID of the object the event changes (a charge's ID, say)", e.Consumer)
	}
	return fmt.Sprintf("inbox: consumer %q: object %q: version %d is below 1; pass the object's version or the event's time (t.UnixMicro()), both of which start at 1",
		e.Consumer, e.Object, e.Version)
}
