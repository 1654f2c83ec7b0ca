package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/tempotent/tempotent/operator"
)

func (a *app) audit(ctx context.Context, args []string) error {
	f := a.flags("audit", "", `Prints the audit log, newest first: every action an operator took, through this command, the
console or the library (receipts resolved and re-armed, outbox messages requeued and
discarded), with when, who, on what and why. Paged: --before the last ID of a page reads the
next. Read only.`)
	var limit int
	var before int64
	var asJSON bool
	f.IntVar(&limit, "limit", operator.AuditLogLimitDefault, fmt.Sprintf("at most this many records, at most %d", operator.AuditLogLimitMax))
	f.Int64Var(&before, "before", 0, "only records whose ID is below this one (the last ID of the page before)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	check := func() error {
		switch {
		case len(f.args) > 0:
			return usagef("unexpected argument %q", f.arg(0))
		case limit <= 0 || limit > operator.AuditLogLimitMax:
			return usagef("--limit must be 1 to %d", operator.AuditLogLimitMax)
		case before < 0:
			return usagef("--before must be an audit record's ID")
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		entries, err := s.op.AuditLog(ctx, limit, before)
		if err != nil {
			return err
		}
		if asJSON {
			type entryJSON struct {
				ID int64 `json:"id"`
				auditJSON
				Target string `json:"target"`
			}
			out := struct {
				Audit []entryJSON `json:"audit"`
			}{Audit: []entryJSON{}}
			for _, e := range entries {
				out.Audit = append(out.Audit, entryJSON{ID: e.ID, Target: e.Target,
					auditJSON: auditJSON{At: e.At, Actor: e.Actor, Action: e.Action, Reason: e.Reason, Detail: e.Detail}})
			}
			return writeSafeJSON(a.stdout, out)
		}
		if len(entries) == 0 {
			fmt.Fprintln(a.stdout, "no audit records")
			return nil
		}
		// Actors, reasons and details are what people and receivers wrote: printed through safe.
		w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tAT\tACTION\tTARGET\tBY\tWHY\tDETAIL")
		for _, e := range entries {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, stamp(e.At), safe(e.Action), safe(e.Target), safe(e.Actor),
				safe(shorten(e.Reason, 80)), safe(shorten(string(e.Detail), 120)))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(entries) == limit {
			fmt.Fprintf(a.stdout, "\nmore: add --before %d\n", entries[len(entries)-1].ID)
		}
		return nil
	})
}
