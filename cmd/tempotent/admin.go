package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
)

func (a *app) partition(ctx context.Context, args []string) error {
	f := a.flags("receipts partition", "", `Converts the receipts table to one partition per UTC day, so that purge drops a day at a
time instead of deleting rows (operator.Client.Partition). Existing receipts stay, in a
partition named receipts_legacy that purge drops once they have all expired. Safe while
workers run: the one step that blocks receipt statements takes milliseconds and waits at most
the lock timeout. Run it once, after migrate; again, it only creates the days ahead.`)
	return f.execute(ctx, args, nil, func(s *session) error {
		was, err := s.op.Partitioned(ctx)
		if err != nil {
			return err
		}
		if err := s.op.Partition(ctx); err != nil {
			return err
		}
		if was {
			fmt.Fprintf(a.stdout, "schema %q: receipts were already partitioned; the days ahead are there\n", f.schema)
		} else {
			fmt.Fprintf(a.stdout, "schema %q: receipts are partitioned by day; purge now drops whole days\n", f.schema)
		}
		return nil
	})
}

func (a *app) purge(ctx context.Context, args []string) error {
	f := a.flags("purge", "", "Deletes receipts past their retention, a batch at a time. It never deletes an unresolved\nreceipt, nor a pending one whose attempt may still run. Workers started with the worker\nlibrary purge by themselves; this is for a job of your own, or a backlog. Each run is\nrecorded as the purger's last run, which tempotent doctor and the console show.")
	var batch int
	var untilDone bool
	f.IntVar(&batch, "batch", operator.PurgeBatchDefault, "receipts per statement")
	f.BoolVar(&untilDone, "until-done", false, "repeat until nothing expired is left (each batch is its own short statement)")
	check := func() error {
		if batch <= 0 {
			return usagef("--batch must be positive")
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		started := time.Now()
		total, err := purgeReceipts(ctx, s.op, batch, untilDone)
		// Recorded as the worker records its rounds, so that doctor and the console see a purge
		// run from cron (as a partitioned table needs) as the purger's last run.
		run := operator.MaintenanceRun{Task: operator.TaskPurge, Runner: defaultBy() + " (tempotent purge)",
			Started: started, Finished: time.Now(), Receipts: total}
		if err != nil {
			run.Error = err.Error()
		}
		if rerr := s.op.RecordMaintenanceRun(context.WithoutCancel(ctx), run); rerr != nil {
			err = errors.Join(err, fmt.Errorf("purged %d receipts, but %w", total, rerr))
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "purged %d receipts\n", total)
		if n, err := s.op.Unresolved(ctx); err == nil && n > 0 {
			fmt.Fprintf(a.stdout, "%d unresolved receipts are kept until someone resolves them: tempotent receipts list --state unresolved\n", n)
		}
		return nil
	})
}

// purgeReceipts purges batch receipts, and again while a batch is full when untilDone, and
// returns how many it deleted.
func purgeReceipts(ctx context.Context, op *operator.Client, batch int, untilDone bool) (int64, error) {
	var total int64
	for {
		n, err := op.Purge(ctx, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("%w (purged %d before)", err, total)
		}
		if !untilDone || n < int64(batch) {
			return total, nil
		}
	}
}

func (a *app) stats(ctx context.Context, args []string) error {
	f := a.flags("stats", "", "Counts receipts by operation and status, and says how long the oldest unresolved one\nhas waited. It reads the whole table: on a large one, run it off peak.")
	var asJSON bool
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return f.execute(ctx, args, nil, func(s *session) error {
		st, err := s.op.Stats(ctx)
		if err != nil {
			return err
		}
		return a.printStats(st, asJSON)
	})
}

func (a *app) printStats(st operator.Stats, asJSON bool) error {
	if asJSON {
		type op struct {
			Operation  string `json:"operation,omitempty"`
			Running    int64  `json:"running"`
			LeaseEnded int64  `json:"lease_ended"`
			Succeeded  int64  `json:"succeeded"`
			Failed     int64  `json:"failed"`
			Unknown    int64  `json:"unknown"`
			Unresolved int64  `json:"unresolved"`
		}
		conv := func(o operator.OperationStats) op {
			return op{o.Operation, o.Running, o.LeaseEnded, o.Succeeded, o.Failed, o.Unknown, o.Unresolved}
		}
		out := struct {
			Operations              []op    `json:"operations"`
			Total                   op      `json:"total"`
			OldestUnresolvedSeconds float64 `json:"oldest_unresolved_seconds"`
			Expired                 int64   `json:"expired"`
		}{Operations: []op{}, Total: conv(st.Total), OldestUnresolvedSeconds: st.OldestUnresolved.Seconds(), Expired: st.Expired}
		for _, o := range st.Operations {
			out.Operations = append(out.Operations, conv(o))
		}
		return writeJSON(a.stdout, out)
	}
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "OPERATION\tRUNNING\tLEASE ENDED\tSUCCEEDED\tFAILED\tUNKNOWN\tUNRESOLVED")
	row := func(o operator.OperationStats, name string) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", name, o.Running, o.LeaseEnded, o.Succeeded, o.Failed, o.Unknown, o.Unresolved)
	}
	for _, o := range st.Operations {
		row(o, o.Operation)
	}
	row(st.Total, "total")
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	if st.Total.Unresolved > 0 {
		fmt.Fprintf(a.stdout, "oldest unresolved: waiting for %s; see tempotent receipts list --state unresolved\n", roughly(st.OldestUnresolved))
	} else {
		fmt.Fprintln(a.stdout, "nothing unresolved")
	}
	fmt.Fprintf(a.stdout, "past their retention, not purged yet: %d\n", st.Expired)
	return nil
}

func (a *app) migrate(ctx context.Context, args []string) error {
	f := a.flags("migrate", "", `Applies tempotent's migrations (receipts, outbox, inbox) to the schema, each in its own
transaction; safe to run while workers run, and from several places at once. Run it as the
schema's owner. With --print, writes the SQL for a migration tool of your own instead, each
migration with the row that tells workers it is applied.

With --print-grants ROLE, writes the grants that let ROLE run workers, dispatchers, webhook
intakes and operator actions and nothing more (migrate.Grants): rows read and written, the audit
log only added to, no DDL, no TRUNCATE. Apply them as the owner after migrating, and again after
receipts partition; on a partitioned table, purge as the owner. No database needed for either.`)
	var print bool
	var after int
	var grantsFor *string // set, even to "", means print them
	f.BoolVar(&print, "print", false, "print the SQL instead of applying it (no database needed)")
	f.IntVar(&after, "after", 0, "with --print: only the migrations after this version")
	f.Func("print-grants", "print the grants of the runtime `ROLE` instead of applying anything (no database needed)", func(v string) error {
		grantsFor = &v
		return nil
	})
	printSQL := func() error {
		var sql string
		var err error
		switch {
		case print && grantsFor != nil:
			return usagef("--print and --print-grants print different things; give one")
		case grantsFor != nil:
			sql, err = migrate.Grants(f.schema, *grantsFor)
			if nameErr := (*migrate.NameError)(nil); errors.As(err, &nameErr) {
				return usagef("--print-grants: %s name %q %s", nameErr.What, nameErr.Name, nameErr.Problem)
			}
		case print:
			sql, err = migrate.Script(f.schema, after)
		default:
			return nil
		}
		if err == nil {
			_, err = fmt.Fprint(a.stdout, sql)
		}
		if err != nil {
			return err
		}
		return errDone
	}
	return f.execute(ctx, args, printSQL, func(s *session) error {
		// A role that may not read the schema may not migrate it either: Up's error says who may.
		before, missingErr := migrate.Missing(ctx, s.pool, f.schema)
		if err := migrate.Up(ctx, s.pool, f.schema); err != nil {
			return err
		}
		if missingErr != nil {
			return missingErr
		}
		if len(before) == 0 {
			fmt.Fprintf(a.stdout, "schema %q is up to date\n", f.schema)
		} else {
			fmt.Fprintf(a.stdout, "schema %q: applied %s\n", f.schema, names(before))
		}
		return nil
	})
}

// names lists migrations as "005_audit, 006_completed_result".
func names(migrations []migrate.Migration) string {
	s := make([]string, len(migrations))
	for i, m := range migrations {
		s[i] = m.String()
	}
	return strings.Join(s, ", ")
}

func (a *app) doctor(ctx context.Context, args []string) error {
	f := a.flags("doctor", "", "Checks a deployment: the database answers, the schema has every migration, every index\nis there and valid, this machine's clock agrees with the database's, commits are durable,\nand the receipts' retention covers the downstream's key memory. Run it on a worker's host:\nthe clock check compares that machine with the database. It also counts what waits for a\nperson: unresolved receipts, dead outbox messages, and how long the oldest pending message has\nwaited; and it reads the purger's last run: a failure warns, no success for --max-since-purge\nfails. Exits 4 if any check fails or a --max- limit is crossed: run it from cron, and page on a\nnon-zero exit.")
	retention, keyMemory := operator.RetentionDefault, activity.Options{}.WithDefaults().DownstreamKeyMemory
	if v := a.getenv("TEMPOTENT_RETENTION"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return usagef("TEMPOTENT_RETENTION=%q: %v", v, err)
		}
		retention = d
	}
	f.Func("retention", "the workers' receipt retention (env TEMPOTENT_RETENTION; default 7d)", durationFlag(&retention))
	f.Func("key-memory", "how long your downstreams remember idempotency keys (default 24h, Stripe's)", durationFlag(&keyMemory))
	var lim limits
	lim.define(f)
	return f.execute(ctx, args, nil, func(s *session) error { return a.diagnose(ctx, s, retention, keyMemory, lim) })
}

// diagnose runs doctor's checks in s and reports each: the database's (operator.Client.Diagnose), with
// this machine's clock and the retention against the key memory among them.
func (a *app) diagnose(ctx context.Context, s *session, retention, keyMemory time.Duration, lim limits) error {
	findings, err := s.op.Diagnose(ctx, lim.operator())
	if err != nil {
		return err
	}
	failed := false
	report := func(level, format string, args ...any) {
		if level == "FAIL" {
			failed = true
		}
		fmt.Fprintf(a.stdout, "%-5s "+format+"\n", append([]any{level}, args...)...)
	}
	for _, f := range findings {
		if f.Check == operator.CheckSynchronousCommit {
			if err := checkClock(ctx, s, report); err != nil {
				return err
			}
		}
		if !lim.report(f, report) {
			report(levelOf[f.Level], "%s", safe(f.Message))
		}
		if f.Check == operator.CheckSynchronousCommit {
			checkRetention(retention, keyMemory, report)
		}
	}
	if failed {
		return errDoctor
	}
	return nil
}

// levelOf is how doctor prints a finding's level.
var levelOf = map[operator.Level]string{operator.LevelOK: "ok", operator.LevelWarn: "warn", operator.LevelFail: "FAIL"}

// checkClock compares this machine's clock with the database's.
func checkClock(ctx context.Context, s *session, report func(level, format string, args ...any)) error {
	var dbNow time.Time
	start := time.Now()
	if err := s.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbNow); err != nil {
		return err
	}
	rtt := time.Since(start)
	skew := dbNow.Sub(start.Add(rtt / 2))
	const skewLimit = time.Second
	if skew.Abs() > skewLimit+rtt/2 {
		report("FAIL", "this machine's clock is %v off the database's (round trip %v). Leases and retention run on the database clock, but Temporal's timeouts run on the workers': keep workers and database within %v (NTP)",
			skew.Round(time.Millisecond), rtt.Round(time.Millisecond), skewLimit)
	} else {
		report("ok", "clock: this machine and the database agree within %v (round trip %v)",
			skew.Abs().Round(time.Millisecond), rtt.Round(time.Millisecond))
	}
	return nil
}

// checkRetention compares the receipts' retention with the downstreams' key memory.
func checkRetention(retention, keyMemory time.Duration, report func(level, format string, args ...any)) {
	if retention < keyMemory {
		report("warn", "retention %s is shorter than the downstreams' key memory %s: an intent run again (a reset) between the two is refused by the replay horizon instead of replayed. Raise TEMPOTENT_RETENTION to at least %s",
			roughly(retention), roughly(keyMemory), roughly(keyMemory))
	} else {
		report("ok", "retention %s covers the downstreams' key memory %s", roughly(retention), roughly(keyMemory))
	}
}
