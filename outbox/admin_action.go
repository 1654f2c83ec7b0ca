// Settling dead messages by hand, each action in the audit log: RequeueMessage, DiscardMessage,
// and their bulk forms RequeueDead and DiscardDead.

package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Actions the audit log records for the outbox (the audit table's action column; its target is
// the message's ID).
const (
	AuditRequeue = "outbox.requeue"
	AuditDiscard = "outbox.discard"
)

// ErrInvalidAction is matched by the error of an action without Action.By or Action.Reason:
// nothing changed, and nothing was recorded.
var ErrInvalidAction = errors.New("outbox: invalid action")

// Action is who acts on a message, and why: both go to the audit log (the audit table of the
// outbox's schema, which `tempotent outbox show` prints), in the statement that makes the change.
type Action struct {
	// By names who acts: a person, or the system acting for one. Required.
	By string
	// Reason says why: the cause that was fixed, a ticket. Required.
	Reason string
}

func (a Action) validate(verb string) error {
	if strings.TrimSpace(a.By) == "" || strings.TrimSpace(a.Reason) == "" {
		return fmt.Errorf("%w: %s needs Action.By (who) and Action.Reason (why); both go to the audit log", ErrInvalidAction, verb)
	}
	return nil
}

// RequeueMessage gives the dead message id a fresh set of attempts, to be delivered at once
// (after the cause of its failures is fixed), and records who, when and why in the audit log
// (action AuditRequeue, target id, detail the attempts and last error it cleared) in the same
// statement. It refuses, changing and recording nothing, a message that is not dead
// (ErrNotDead, whose message says its state) and an unknown one (ErrNoMessage), and an Action
// without By or Reason (ErrInvalidAction). Two operators requeueing one message at once: one
// requeues it, the other gets ErrNotDead; one audit row.
func (o *Outbox) RequeueMessage(ctx context.Context, id string, a Action) error {
	return o.act(ctx, "requeue", id, a, requeueChange)
}

// DiscardMessage deletes the dead message id without delivering it, releasing the messages of its
// ordering key that wait behind it, and records who, when and why in the audit log (action
// AuditDiscard, target id, detail its topic, key, attempts, last error and payload size) in the
// same statement. It refuses as RequeueMessage does.
func (o *Outbox) DiscardMessage(ctx context.Context, id string, a Action) error {
	return o.act(ctx, "discard", id, a, discardChange)
}

// RequeueDead requeues, as RequeueMessage does, the dead messages f selects (f.State must be
// empty or StateDead; f.Limit bounds how many, ListLimitMax at most), oldest first unless
// f.Newest, and returns how many. Each message requeued gets its own audit row (target its ID),
// so that a message's history reads the same whether it was requeued alone or with others; the
// rows of one call share their actor, reason and time. Messages another operator is changing at
// that moment are skipped, not waited for. Call it again while it returns f.Limit (or
// ListLimitDefault) to requeue more: each call is one statement, holding its locks for that long.
func (o *Outbox) RequeueDead(ctx context.Context, f ListFilter, a Action) (int64, error) {
	return o.actAll(ctx, "requeue", f, a, requeueChange)
}

// DiscardDead discards, as DiscardMessage does, the dead messages f selects, as RequeueDead
// selects them, and returns how many; one audit row per message.
func (o *Outbox) DiscardDead(ctx context.Context, f ListFilter, a Action) (int64, error) {
	return o.actAll(ctx, "discard", f, a, discardChange)
}

// Requeue gives a dead message a fresh set of attempts, to be delivered at once: after the cause
// of its failures is fixed. It records nothing: who did it, and why, is lost.
//
// Deprecated: use RequeueMessage, which records who and why in the audit log.
func (o *Outbox) Requeue(ctx context.Context, id string) error {
	tag, err := o.db.Exec(ctx, `UPDATE `+o.table+` SET state = 'pending', attempts = 0, available_at = now(), lease_until = NULL
		WHERE id = $1 AND state = 'dead'`, id)
	if err != nil {
		return fmt.Errorf("outbox: requeue %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q is not a dead message of this outbox (pending, delivered, pruned, or never put)", ErrNotDead, id)
	}
	return nil
}

// Discard deletes a dead message without delivering it, releasing the messages of its ordering
// key that wait behind it. It records nothing: who did it, and why, is lost.
//
// Deprecated: use DiscardMessage, which records who and why in the audit log.
func (o *Outbox) Discard(ctx context.Context, id string) error {
	tag, err := o.db.Exec(ctx, `DELETE FROM `+o.table+` WHERE id = $1 AND state = 'dead'`, id)
	if err != nil {
		return fmt.Errorf("outbox: discard %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q is not a dead message of this outbox (pending, delivered, pruned, or never put)", ErrNotDead, id)
	}
	return nil
}

// A change is the data-modifying part of an audited action: %[1]s the outbox table, acting on the
// rows of the CTE "old" (seq, id, topic, ordering_key, attempts, last_error, size), returning
// the audit detail of each row it changed as "detail" and its ID as "id".
const (
	requeueChange = `UPDATE %[1]s AS m SET state = 'pending', attempts = 0, available_at = now(), lease_until = NULL
	FROM old WHERE m.seq = old.seq
	RETURNING old.id, jsonb_build_object('attempts', old.attempts, 'last_error', old.last_error) AS detail`
	discardChange = `DELETE FROM %[1]s AS m USING old WHERE m.seq = old.seq
	RETURNING old.id, jsonb_build_object('topic', old.topic, 'ordering_key', old.ordering_key, 'attempts', old.attempts,
		'last_error', old.last_error, 'payload_bytes', old.size) AS detail`
)

// audited is the statement that selects the dead messages of sel (its arguments first, then $n
// who, $n+1 why, $n+2 the action), applies change to them and writes an audit row for each
// message changed, in one statement: no change goes unrecorded, and a refused one (nothing
// selected) records nothing. Race: sel locks the rows it takes (FOR UPDATE); a concurrent action
// on one of them waits for that lock, then reads the row again, no longer dead, and matches
// nothing.
func (o *Outbox) audited(sel string, n int, change string) string {
	return fmt.Sprintf(`WITH old AS (
	SELECT seq, id, topic, ordering_key, attempts, last_error, octet_length(payload) AS size FROM (%[2]s) picked
	JOIN %[1]s USING (seq)
), changed AS (%[3]s)
INSERT INTO %[4]s (actor, action, target, reason, detail)
SELECT $%[5]d, $%[7]d, id, $%[6]d, detail FROM changed`,
		o.table, sel, fmt.Sprintf(change, o.table), o.audit(), n+1, n+2, n+3)
}

func (o *Outbox) audit() string { return pgx.Identifier{o.cfg.Schema, "audit"}.Sanitize() }

// act applies change to the dead message id on a's behalf; see RequeueMessage.
func (o *Outbox) act(ctx context.Context, verb, id string, a Action, change string) error {
	if err := a.validate(verb); err != nil {
		return err
	}
	sel := `SELECT seq FROM ` + o.table + ` WHERE id = $1 AND state = 'dead' FOR UPDATE`
	tag, err := o.db.Exec(ctx, o.audited(sel, 1, change), id, a.By, a.Reason, "outbox."+verb)
	if err != nil {
		return fmt.Errorf("outbox: %s %q: %w", verb, id, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	m, err := o.Get(ctx, id)
	switch {
	case errors.Is(err, ErrNoMessage):
		return err
	case err != nil:
		return fmt.Errorf("outbox: %s: %w", verb, err)
	case m.State == StateDead:
		// Requeued by someone else and dead again between the two statements.
		return fmt.Errorf("%w: %q changed while this %s ran; look at it again (tempotent outbox show)", ErrNotDead, id, verb)
	}
	return fmt.Errorf("%w: %q is %s; only a dead message can be requeued or discarded (tempotent outbox list --state dead)",
		ErrNotDead, id, m.State)
}

// actAll applies change to the dead messages f selects; see RequeueDead.
func (o *Outbox) actAll(ctx context.Context, verb string, f ListFilter, a Action, change string) (int64, error) {
	if err := a.validate(verb); err != nil {
		return 0, err
	}
	if f.State != "" && f.State != StateDead {
		return 0, fmt.Errorf("%w: State %q; only dead messages can be requeued or discarded", ErrInvalidFilter, f.State)
	}
	f.State = StateDead
	q, err := selectMessages(o.table, f, "FOR UPDATE SKIP LOCKED")
	if err != nil {
		return 0, err
	}
	// The select names its columns; the audited statement only needs seq from it.
	sel := `SELECT seq FROM (` + q.sql + `) s`
	var n int64
	err = o.byIndex(ctx, o.audited(sel, len(q.args), change), append(q.args, a.By, a.Reason, "outbox."+verb), func(rows pgx.Rows) error {
		rows.Close()
		n = rows.CommandTag().RowsAffected()
		return rows.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: %s dead messages: %w", verb, err)
	}
	return n, nil
}
