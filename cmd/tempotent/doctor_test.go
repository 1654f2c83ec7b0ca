package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

// doctorSays runs doctor with args and requires exit code want and every line of lines in its
// output: the limit crossed or kept, and the flag that changes it.
func (c cli) doctorSays(want int, lines []string, args ...string) {
	c.t.Helper()
	code, out, errOut := c.run(append([]string{"doctor"}, args...)...)
	require.Equal(c.t, want, code, "tempotent doctor %v: stdout\n%s\nstderr %s", args, out, errOut)
	for _, line := range lines {
		require.Contains(c.t, out, line, "tempotent doctor %v", args)
	}
}

// TestDoctorLimits: doctor exits 4 when what waits for a person crosses its limit (unresolved
// receipts, dead outbox messages, the oldest pending message's wait), naming it and the flag that
// sets the limit; within the limit, or with the limit turned off, it warns and exits 0.
func TestDoctorLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Unresolved", func(t *testing.T) {
		t.Parallel()
		s, tempotent := newStore(t)
		unknownReceipt(t, s, "unresolved")
		tempotent.doctorSays(exitDoctor, []string{"FAIL  unresolved receipts waiting for someone: 1, more than --max-unresolved=0 allows; see tempotent receipts list --state unresolved",
			"ok    no dead outbox messages"})
		tempotent.doctorSays(exitOK, []string{"warn  unresolved receipts waiting for someone: 1, within --max-unresolved=1"}, "--max-unresolved=1")
		tempotent.doctorSays(exitOK, []string{"warn  unresolved receipts waiting for someone: 1, not checked (--max-unresolved=-1)"}, "--max-unresolved", "-1")
		tempotent.doctorSays(exitDoctor, []string{"FAIL  unresolved receipts"}, "--max-dead=5")
	})

	t.Run("Dead", func(t *testing.T) {
		t.Parallel()
		_, tempotent := newStore(t)
		outboxOf(t, ctx, tempotent.schema, outbox.Message{ID: "a", Topic: "order.paid"}, outbox.Message{ID: "b", Topic: "order.paid"})
		dies(t, tempotent.schema, "HTTP 422", "a", "b")
		tempotent.doctorSays(exitDoctor, []string{"FAIL  dead outbox messages: 2, more than --max-dead=0 allows; see tempotent outbox list --state dead",
			"ok    nothing unresolved", "ok    no pending outbox messages"})
		tempotent.doctorSays(exitDoctor, []string{"FAIL  dead outbox messages: 2, more than --max-dead=1 allows"}, "--max-dead=1")
		tempotent.doctorSays(exitOK, []string{"warn  dead outbox messages: 2, within --max-dead=2"}, "--max-dead=2")
		tempotent.doctorSays(exitOK, []string{"warn  dead outbox messages: 2, not checked (--max-dead=-1)"}, "--max-dead=-1")
	})

	t.Run("OldestPending", func(t *testing.T) {
		t.Parallel()
		_, tempotent := newStore(t)
		outboxOf(t, ctx, tempotent.schema, outbox.Message{ID: "a", Topic: "order.paid"}, outbox.Message{ID: "b", Topic: "order.paid"})
		tempotent.doctorSays(exitOK, []string{"ok    pending outbox messages: 2, the oldest waiting for"})
		// No dispatcher has run for two hours: more than the default hour.
		_, err := pgtest.Pool(t).Exec(ctx, `UPDATE `+tempotent.schema+`.outbox SET created_at = now() - interval '2 hours' WHERE id = 'a'`)
		require.NoError(t, err)
		tempotent.doctorSays(exitDoctor, []string{"FAIL  oldest pending outbox message: waiting for 2h (2 pending), longer than --max-oldest-pending=1h allows: no dispatcher running, a receiver failing, or a dead message holding its key back? see tempotent outbox list",
			"ok    nothing unresolved", "ok    no dead outbox messages"})
		tempotent.doctorSays(exitOK, []string{"ok    pending outbox messages: 2, the oldest waiting for 2h"}, "--max-oldest-pending=3h")
		tempotent.doctorSays(exitOK, []string{"ok    pending outbox messages: 2, the oldest waiting for 2h"}, "--max-oldest-pending=-1s")
		tempotent.doctorSays(exitDoctor, []string{"longer than --max-oldest-pending=1h"}, "--max-oldest-pending=1h", "--max-dead=-1", "--max-unresolved=-1")
		// 0 means no message may wait at all: the fresh one fails it too. The clock's line is
		// there whatever the limits.
		_, err = pgtest.Pool(t).Exec(ctx, `UPDATE `+tempotent.schema+`.outbox SET created_at = now() WHERE id = 'a'`)
		require.NoError(t, err)
		tempotent.doctorSays(exitDoctor, []string{"longer than --max-oldest-pending=0s", "ok    clock:"}, "--max-oldest-pending=0")
	})

	t.Run("Purge", func(t *testing.T) {
		t.Parallel()
		_, tempotent := newStore(t)
		exec := func(sql string) {
			_, err := pgtest.Pool(t).Exec(ctx, strings.ReplaceAll(sql, "{s}", tempotent.schema))
			require.NoError(t, err)
		}
		tempotent.doctorSays(exitOK, []string{"ok    no purge run recorded yet"})
		// tempotent purge records its run as the workers' rounds do.
		tempotent.ok("purge")
		tempotent.doctorSays(exitOK, []string{`ok    the last purge, by "` + defaultBy() + ` (tempotent purge)" 0s ago, deleted 0 receipts and 0 inbox records`})

		// A purge that fails (its table gone) is recorded with its error, and warns.
		exec(`ALTER TABLE {s}.receipts RENAME TO receipts_away`)
		code, _, errOut := tempotent.run("purge")
		require.Equal(t, exitFailed, code, errOut)
		exec(`ALTER TABLE {s}.receipts_away RENAME TO receipts`)
		tempotent.doctorSays(exitOK, []string{`warn  the last purge, by "` + defaultBy() + ` (tempotent purge)" 0s ago, failed: "`,
			`does not exist`, `; the next round tries again; the last success was 0s ago`})

		// No success for three days: past the default two, doctor fails, naming its flag. The
		// error, which a terminal would act on, is quoted.
		exec(`UPDATE {s}.maintenance_runs SET last_success_at = now() - interval '3 days', error = E'denied\x1b[2J'`)
		code, out, _ := tempotent.run("doctor")
		require.Equal(t, exitDoctor, code, out)
		require.Contains(t, out, `FAIL  no purge has succeeded for 72h0m0s, longer than the limit of 48h0m0s; the last purge, by "`)
		require.Contains(t, out, `failed: "denied\x1b[2J". Is a worker purging (worker.Config.PurgeEvery), and can it? (the limit is --max-since-purge=2d)`)
		require.NotContains(t, out, "\x1b[2J", "the error reached the terminal raw")
		tempotent.doctorSays(exitOK, []string{`warn  the last purge, by`}, "--max-since-purge=96h")
		tempotent.doctorSays(exitOK, []string{`warn  the last purge, by`}, "--max-since-purge=-1s")
	})

	t.Run("BadLimit", func(t *testing.T) {
		t.Parallel()
		code, _, errOut := cli{t: t, schema: "unused"}.run("doctor", "--max-dead=some")
		require.Equal(t, exitUsage, code)
		require.Contains(t, errOut, "-max-dead")
	})
}
