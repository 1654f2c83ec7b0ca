// What an operator does to a receipt that failed for good (Rearm), and the audit log that every
// operator action writes (Resolve, Rearm).

package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/keys"
)

// Actions recorded in the audit log (AuditEntry.Action).
const (
	AuditResolve = "resolve"
	AuditRearm   = "rearm"
)

// AuditEntry is one operator action, as the audit table (migration 005) records it.
type AuditEntry struct {
	ID int64
	At time.Time
	// Actor is who acted, as they named themselves (Resolution.By, Rearming.By).
	Actor string
	// Action is AuditResolve or AuditRearm for a receipt; "outbox.requeue" or "outbox.discard"
	// for an outbox message (outbox.Outbox.RequeueMessage, outbox.Outbox.DiscardMessage).
	Action string
	// Target is the receipt's token, or the outbox message's ID.
	Target string
	Reason string
	// Detail is what the action changed, as JSON: {"applied": bool} for a resolution; for a
	// re-arm, the failure it cleared ({"error_type", "error_message", "fence", "attempts",
	// "failed_at"}); for an outbox action, the attempts and last error it cleared.
	Detail json.RawMessage
}

// rearmedPrefix begins the Resolution of a receipt whose last operator action was a re-arm.
const rearmedPrefix = "re-armed: "

// Rearmed reports whether the receipt's last operator action was a re-arm (Client.Rearm), rather
// than a resolution: its Resolution is then "re-armed: " and the reason given.
func (r Receipt) Rearmed() bool { return strings.HasPrefix(r.Resolution, rearmedPrefix) }

// ErrNotFailed is matched by Rearm's error for a receipt that did not fail for good: it
// succeeded, an attempt holds it, its outcome is unknown (settle that with Resolve), or it was
// re-armed already.
var ErrNotFailed = errors.New("receipt has not failed")

// Rearming is what Rearm records: who re-arms the receipt, and why (the cause that was fixed, a
// ticket). Both are required.
type Rearming struct {
	By, Reason string
}

// Rearm makes the receipt under token, which recorded a failure for good, runnable again, and
// returns it as it now is. Until then every attempt of its intent replays that failure: a saga's
// compensation that failed for good (a refund refused while the account was blocked) could never
// run again, even once its cause was fixed.
//
// The receipt becomes pending with its lease ended, so that the next attempt of the activity
// takes it over (its fence grows by one) and calls the function again under the same key and
// token, and the outcome of that run is recorded as any other. The failure it cleared, who
// re-armed it, when and why go to the audit log (Audit); the receipt's ResolvedAt, ResolvedBy and
// Resolution say who re-armed it last. Nothing runs until an attempt comes: for a saga, have the
// workflow call Compensate again (saga.Saga.Compensate), or reset it to before its compensations.
//
// The failed attempt may have sent a request before it failed, so the receipt says an effect
// may have happened: for a downstream that deduplicates (activity.Options.DownstreamDeduplicates)
// the next attempt calls again under the token, which is safe; otherwise, or once the token is
// older than the downstream's key memory, it reconciles (activity.Options.Reconcile) or fails with
// OutcomeUnknown, as any takeover does. A downstream that remembers a failed answer under the
// token (Stripe stores the first response to a key, errors included, for 24 hours) gives the
// same answer again: a cause at the downstream that the token's first answer pinned is fixed
// with a new intent, not a re-arm.
//
// It refuses (ErrNotFailed) any receipt but one whose recorded failure is final: a succeeded or
// pending receipt, and one recorded as OutcomeUnknown, which Resolve settles instead, since its
// effect may have happened.
func (c *Client) Rearm(ctx context.Context, token keys.Token, r Rearming) (Receipt, error) {
	if strings.TrimSpace(r.By) == "" || strings.TrimSpace(r.Reason) == "" {
		return Receipt{}, errors.New("rearm: say who re-arms (Rearming.By) and why (Rearming.Reason); both go to the audit log")
	}
	if _, err := c.Receipt(ctx, token); err != nil {
		return Receipt{}, fmt.Errorf("rearm: %w", err)
	}
	tag, err := c.exec(ctx, fmt.Sprintf(rearm, c.receipts, c.audit),
		string(token), newReservation(), r.By, r.Reason, c.cfg.Retention.Microseconds(), rearmedPrefix)
	if err != nil {
		return Receipt{}, fmt.Errorf("rearm %s: %w", token, c.explain(err))
	}
	now, err := c.Receipt(ctx, token)
	if err != nil {
		return Receipt{}, fmt.Errorf("rearm: %w", err)
	}
	if tag.RowsAffected() == 0 {
		hint := "only a receipt that failed for good can be re-armed"
		if now.Status == StatusUnknown {
			hint = "its effect may have happened: find out at the downstream, then resolve it (Client.Resolve, tempotent receipts resolve)"
		}
		return now, fmt.Errorf("%w: receipt %s is %s; %s", ErrNotFailed, token, now.Status, hint)
	}
	return now, nil
}

// rearm re-arms a receipt that failed for good ($1 its token, $2 a new reservation held by no
// attempt, $3 who, $4 why, $5 the retention in µs, $6 rearmedPrefix) and writes the audit record in the same
// statement (%[1]s the receipts, %[2]s the audit table). The lease ends now and an effect is
// possible (see Rearm). Race: two operators re-arming at once both wait for the row lock; the
// second finds it pending once the first commits, matches nothing and writes no record. No
// attempt writes to a failed receipt, and the new reservation keeps any that read it before
// from taking it over on what it saw.
const rearm = `
WITH old AS (
	SELECT tableoid, ctid, error_type, error_message, fence, attempts, completed_at FROM %[1]s
	WHERE token = $1 AND state = 'failed' AND error_type IS DISTINCT FROM 'tempotent.OutcomeUnknown'
	FOR UPDATE
), rearmed AS (
	UPDATE %[1]s AS r SET state = 'pending', result = NULL, failure = NULL, error_type = NULL, error_message = NULL,
		reservation = $2, lease_expires_at = now(), effect_possible = true, completed_at = NULL, updated_at = now(),
		expires_at = greatest(r.expires_at, now() + $5::bigint * interval '1 microsecond'),
		resolved_at = now(), resolved_by = $3, resolution = $6 || $4
	FROM old WHERE r.tableoid = old.tableoid AND r.ctid = old.ctid
	RETURNING r.token, old.error_type, old.error_message, old.fence, old.attempts, old.completed_at
)
INSERT INTO %[2]s (actor, action, target, reason, detail)
SELECT $3, 'rearm', token, $4, jsonb_build_object('error_type', error_type, 'error_message', error_message,
	'fence', fence, 'attempts', attempts, 'failed_at', completed_at)
FROM rearmed`

// audited turns a resolve statement (an UPDATE of the receipt under token $1, $3 who, $4 why,
// args its arguments) into one that also writes its audit record of action with detail, and
// returns it with its arguments: the record is written exactly when the update matched.
func (c *Client) audited(update string, args []any, action string, detail any) (string, []any) {
	n := len(args)
	stmt := fmt.Sprintf(`WITH changed AS (%s RETURNING token)
INSERT INTO %s (actor, action, target, reason, detail) SELECT $3, $%d, token, $4, $%d FROM changed`,
		update, c.audit, n+1, n+2)
	return stmt, append(args, action, detail)
}

// Audit returns the audit log's records of the receipt under token, oldest first.
func (c *Client) Audit(ctx context.Context, token keys.Token) ([]AuditEntry, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	rows, err := c.db.Query(ctx, fmt.Sprintf(`SELECT id, at, actor, action, target, reason, detail FROM %s WHERE target = $1 ORDER BY at, id`,
		c.audit), string(token))
	if err != nil {
		return nil, fmt.Errorf("read the audit log of %s: %w", token, c.explain(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		var detail []byte
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Reason, &detail)
		e.Detail = detail
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit log of %s: %w", token, c.explain(err))
	}
	return out, nil
}
