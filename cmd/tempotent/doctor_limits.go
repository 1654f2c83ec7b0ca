package main

import (
	"context"
	"fmt"
	"time"
)

// limits are doctor's thresholds for what waits for a person. Crossing one fails its check, and
// doctor exits 4, so that doctor run from cron pages someone. A negative limit turns its check
// off: a count above zero is then a warning, and the oldest pending message's wait is shown.
type limits struct {
	unresolved    int64         // unresolved receipts allowed
	dead          int64         // dead outbox messages allowed
	oldestPending time.Duration // how long the oldest pending outbox message may have waited
}

// oldestPendingDefault is --max-oldest-pending's default: a running dispatcher delivers within
// seconds, or retries with a backoff that stays under an hour until it parks the message as dead.
const oldestPendingDefault = time.Hour

// define defines the limits' flags on f.
func (l *limits) define(f *flags) {
	l.oldestPending = oldestPendingDefault
	f.Int64Var(&l.unresolved, "max-unresolved", 0, "fail when more receipts than this are unresolved, waiting for a person (negative: only warn)")
	f.Int64Var(&l.dead, "max-dead", 0, "fail when more outbox messages than this are dead (negative: only warn)")
	f.Func("max-oldest-pending", "fail when the oldest pending outbox message has waited longer than this (default 1h; negative: not checked)",
		durationFlag(&l.oldestPending))
}

// checkWaiting is doctor's check of what waits for a person: the unresolved receipts, and the
// outbox's dead messages and oldest pending one, each against its limit.
func checkWaiting(ctx context.Context, s *session, schemaName string, l limits, report func(level, format string, args ...any)) error {
	unresolved, err := s.op.Unresolved(ctx)
	if err != nil {
		return err
	}
	o, err := openOutbox(s, schemaName)
	if err != nil {
		return err
	}
	st, err := o.Stats(ctx)
	if err != nil {
		return err
	}
	// past judges a count n against its flag's limit.
	past := func(n, limit int64, flag string) (level, verdict string) {
		switch {
		case limit < 0:
			return "warn", fmt.Sprintf("not checked (--%s=%d)", flag, limit)
		case n > limit:
			return "FAIL", fmt.Sprintf("more than --%s=%d allows", flag, limit)
		}
		return "warn", fmt.Sprintf("within --%s=%d", flag, limit)
	}

	if unresolved == 0 {
		report("ok", "nothing unresolved")
	} else {
		level, verdict := past(unresolved, l.unresolved, "max-unresolved")
		report(level, "unresolved receipts waiting for someone: %d, %s; see tempotent receipts list --state unresolved", unresolved, verdict)
	}
	if st.Dead == 0 {
		report("ok", "no dead outbox messages")
	} else {
		level, verdict := past(st.Dead, l.dead, "max-dead")
		report(level, "dead outbox messages: %d, %s; see tempotent outbox list --state dead", st.Dead, verdict)
	}
	switch {
	case st.Pending == 0:
		report("ok", "no pending outbox messages")
	case l.oldestPending < 0 || st.OldestPending <= l.oldestPending:
		report("ok", "pending outbox messages: %d, the oldest waiting for %s", st.Pending, roughly(st.OldestPending))
	default:
		report("FAIL", "oldest pending outbox message: waiting for %s (%d pending), longer than --max-oldest-pending=%s allows: no dispatcher running, a receiver failing, or a dead message holding its key back? see tempotent outbox list",
			roughly(st.OldestPending), st.Pending, roughly(l.oldestPending))
	}
	return nil
}
