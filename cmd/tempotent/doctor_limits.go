package main

import (
	"fmt"
	"time"

	"github.com/tempotent/tempotent/operator"
)

// limits are doctor's thresholds for what waits for a person. Crossing one fails its check, and
// doctor exits 4, so that doctor run from cron pages someone. A negative limit turns its check
// off: a count above zero is then a warning, and the oldest pending message's wait is shown.
type limits struct {
	unresolved    int64         // unresolved receipts allowed
	dead          int64         // dead outbox messages allowed
	oldestPending time.Duration // how long the oldest pending outbox message may have waited
	sincePurge    time.Duration // how long ago a purge may last have succeeded
}

// oldestPendingDefault is --max-oldest-pending's default.
const oldestPendingDefault = operator.OldestPendingDefault

// define defines the limits' flags on f.
func (l *limits) define(f *flags) {
	l.oldestPending = oldestPendingDefault
	f.Int64Var(&l.unresolved, "max-unresolved", 0, "fail when more receipts than this are unresolved, waiting for a person (negative: only warn)")
	f.Int64Var(&l.dead, "max-dead", 0, "fail when more outbox messages than this are dead (negative: only warn)")
	f.Func("max-oldest-pending", "fail when the oldest pending outbox message has waited longer than this (default 1h; negative: not checked)",
		durationFlag(&l.oldestPending))
	l.sincePurge = operator.SincePurgeDefault
	f.Func("max-since-purge", "fail when the last purge that succeeded is older than this, once one has run (default 48h; negative: not checked)",
		durationFlag(&l.sincePurge))
}

// operator returns l as operator.Client.Diagnose takes them. Its zero OldestPending and
// SincePurge mean the defaults, so --max-oldest-pending=0 and --max-since-purge=0 are given as a
// nanosecond: any pending message, any time since the last success, fails them.
func (l limits) operator() operator.Limits {
	return operator.Limits{Unresolved: l.unresolved, Dead: l.dead, OldestPending: orNanosecond(l.oldestPending), SincePurge: orNanosecond(l.sincePurge)}
}

// orNanosecond is d, or a nanosecond for 0.
func orNanosecond(d time.Duration) time.Duration {
	if d == 0 {
		return time.Nanosecond
	}
	return d
}

// report reports a finding of what waits for a person in doctor's words, which name the flag
// that sets its limit and the command that lists what it counted; it returns false for the
// other findings, whose own message doctor prints.
func (l limits) report(f operator.Finding, report func(level, format string, args ...any)) bool {
	// verdict says how a count above zero stands against its flag's limit.
	verdict := func(limit int64, flag string) string {
		switch {
		case limit < 0:
			return fmt.Sprintf("not checked (--%s=%d)", flag, limit)
		case f.Level == operator.LevelFail:
			return fmt.Sprintf("more than --%s=%d allows", flag, limit)
		}
		return fmt.Sprintf("within --%s=%d", flag, limit)
	}
	level := levelOf[f.Level]
	switch {
	case f.Check == operator.CheckUnresolved && f.Count == 0:
		report(level, "nothing unresolved")
	case f.Check == operator.CheckUnresolved:
		report(level, "unresolved receipts waiting for someone: %d, %s; see tempotent receipts list --state unresolved", f.Count, verdict(l.unresolved, "max-unresolved"))
	case f.Check == operator.CheckDead && f.Count == 0:
		report(level, "no dead outbox messages")
	case f.Check == operator.CheckDead:
		report(level, "dead outbox messages: %d, %s; see tempotent outbox list --state dead", f.Count, verdict(l.dead, "max-dead"))
	case f.Check == operator.CheckOldestPending && f.Count == 0:
		report(level, "no pending outbox messages")
	case f.Check == operator.CheckOldestPending && f.Level != operator.LevelFail:
		report(level, "pending outbox messages: %d, the oldest waiting for %s", f.Count, roughly(f.Waited))
	case f.Check == operator.CheckOldestPending:
		report(level, "oldest pending outbox message: waiting for %s (%d pending), longer than --max-oldest-pending=%s allows: no dispatcher running, a receiver failing, or a dead message holding its key back? see tempotent outbox list",
			roughly(f.Waited), f.Count, roughly(l.oldestPending))
	case f.Check == operator.CheckPurge && f.Level == operator.LevelFail:
		// Diagnose quotes the runner and the error it names.
		report(level, "%s (the limit is --max-since-purge=%s)", safe(f.Message), roughly(l.sincePurge))
	default:
		return false
	}
	return true
}
