package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
)

func (a *app) list(ctx context.Context, args []string) error {
	f := a.flags("receipts list", "", "Lists receipts, oldest first, a page at a time.")
	var filter operator.Filter
	var asJSON bool
	f.StringVar(&filter.State, "state", "", "pending, completed, failed, unresolved, unknown (OutcomeUnknown) or lease-ended")
	f.Func("tenant", "only this tenant (\"\" for receipts without one)", func(v string) error { filter.Tenant = &v; return nil })
	f.StringVar(&filter.Operation, "operation", "", "only this operation (the activity type, unless the workflow named it)")
	f.StringVar(&filter.WorkflowID, "workflow", "", "only receipts written by this workflow ID")
	f.Func("older-than", "only receipts first reserved longer ago than this (e.g. 1h, 7d)", durationFlag(&filter.OlderThan))
	f.Func("newer-than", "only receipts first reserved more recently than this", durationFlag(&filter.NewerThan))
	f.IntVar(&filter.Limit, "limit", operator.ListLimitDefault, fmt.Sprintf("page size, at most %d", operator.ListLimitMax))
	f.StringVar(&filter.After, "after", "", "the cursor printed at the end of the page before")
	f.BoolVar(&asJSON, "json", false, "print JSON: {\"receipts\": [...], \"next\": cursor}")
	check := func() error {
		if len(f.args) > 0 {
			return usagef("unexpected argument %q", f.arg(0))
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		page, err := s.op.Receipts(ctx, filter)
		if errors.Is(err, operator.ErrInvalidFilter) {
			return usagef("%v", err)
		}
		if err != nil {
			return err
		}
		return a.printPage(page, asJSON)
	})
}

// printPage prints a page of receipts as list does.
func (a *app) printPage(page operator.Page, asJSON bool) error {
	if asJSON {
		out := struct {
			Receipts []receiptJSON `json:"receipts"`
			Next     string        `json:"next,omitempty"`
		}{Receipts: []receiptJSON{}, Next: page.Next}
		for _, r := range page.Receipts {
			out.Receipts = append(out.Receipts, toJSON(r))
		}
		return writeSafeJSON(a.stdout, out)
	}
	if len(page.Receipts) == 0 {
		fmt.Fprintln(a.stdout, "no receipts match")
		return nil
	}
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TOKEN\tOPERATION\tTENANT\tSTATUS\tATTEMPTS\tAGE\tWORKFLOW")
	for _, r := range page.Receipts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Token, safe(r.Key.Operation), safe(orDash(r.Key.Tenant)), status(r), r.Attempts,
			age(r.CreatedAt), safe(orDash(r.WorkflowID)))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(a.stdout, "\nmore: add --after %s\n", page.Next)
	}
	return nil
}

func (a *app) show(ctx context.Context, args []string) error {
	f := a.flags("receipts show", "[TOKEN]", "Prints every field of the receipt under TOKEN (or --key), with its compensations,\nor of every receipt a workflow wrote (--workflow). A result that the workers' codecs sealed\n(activity.Config.Codecs) is shown sealed, as <encoding, size>: this command has no codecs.")
	var key, workflowID string
	var asJSON bool
	f.StringVar(&key, "key", "", "the receipt's key as NAMESPACE/TENANT/OPERATION/ID (as errors and logs of older versions print it)")
	f.StringVar(&workflowID, "workflow", "", "every receipt written by this workflow ID")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	var tokens []keys.Token
	check := func() error {
		switch given := countSet(f.arg(0), key, workflowID); {
		case given != 1 || len(f.args) > 1:
			return usagef("give one of TOKEN, --key or --workflow")
		case f.arg(0) != "":
			tokens = append(tokens, keys.Token(f.arg(0)))
		case key != "":
			parts := strings.SplitN(key, "/", 4)
			if len(parts) != 4 {
				return usagef("--key %q is not NAMESPACE/TENANT/OPERATION/ID", key)
			}
			tokens = append(tokens, keys.Key{Namespace: parts[0], Tenant: parts[1], Operation: parts[2], ID: parts[3]}.Token())
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		if workflowID != "" {
			var err error
			if tokens, err = workflowTokens(ctx, s.op, workflowID); err != nil {
				return err
			}
			if len(tokens) == 0 {
				return &refusedError{fmt.Errorf("%w written by workflow %q in schema %q (receipts written before migration 004 do not record their workflow)",
					operator.ErrNoReceipt, workflowID, f.schema)}
			}
		}
		return a.showAll(ctx, s.op, tokens, asJSON, workflowID == "")
	})
}

// workflowTokens returns the tokens of every receipt the workflow wrote, oldest first.
func workflowTokens(ctx context.Context, op *operator.Client, workflowID string) ([]keys.Token, error) {
	var tokens []keys.Token
	for after := ""; ; {
		page, err := op.Receipts(ctx, operator.Filter{WorkflowID: workflowID, Limit: operator.ListLimitMax, After: after})
		if err != nil {
			return nil, err
		}
		for _, r := range page.Receipts {
			tokens = append(tokens, r.Token)
		}
		if after = page.Next; after == "" {
			return tokens, nil
		}
	}
}

// showAll prints the receipts under tokens as show does; one alone is printed as itself, not a
// list, when single.
func (a *app) showAll(ctx context.Context, op *operator.Client, tokens []keys.Token, asJSON, single bool) error {
	var all []receiptJSON
	for i, tok := range tokens {
		r, err := op.Receipt(ctx, tok)
		if errors.Is(err, operator.ErrNoReceipt) {
			return &refusedError{err}
		}
		if err != nil {
			return err
		}
		if asJSON {
			j := toJSON(r)
			audit, err := op.Audit(ctx, r.Token)
			if err != nil && !errors.Is(err, migrate.ErrNotMigrated) {
				return err
			}
			for _, e := range audit {
				j.Audit = append(j.Audit, auditJSON{At: e.At, Actor: e.Actor, Action: e.Action, Reason: e.Reason, Detail: e.Detail})
			}
			all = append(all, j)
			continue
		}
		if i > 0 {
			fmt.Fprintln(a.stdout)
		}
		if err := a.printWithAudit(ctx, op, r); err != nil {
			return err
		}
	}
	if asJSON {
		if len(all) == 1 && single {
			return writeSafeJSON(a.stdout, all[0])
		}
		return writeSafeJSON(a.stdout, all)
	}
	return nil
}

func (a *app) resolve(ctx context.Context, args []string) error {
	f := a.flags("receipts resolve", "TOKEN", `Settles the unresolved receipt under TOKEN with what you found out at the downstream
(its dashboard or API, searched for the token):

  --applied --result JSON   the effect happened; the next attempt of the activity returns
                            JSON (in the activity's result type) without calling anything
  --not-applied             it did not; the next attempt calls the downstream again, under
                            the same token. Be sure no attempt is still sending (a frozen
                            worker's request may still land) before you say so.

Only an unknown outcome, or a lease that ended after a possible effect, can be resolved.
Who, when and why are recorded on the receipt. The result is stored as JSON, unsealed: this
command has no codecs. Where the workers seal results (activity.Config.Codecs), --applied is
refused once results sealed by them are stored beside the receipt: resolve from Go with an
operator.Client whose Config.Codecs are the workers'. --not-applied stores no result.`)
	var applied, notApplied bool
	var result, reason, by string
	f.BoolVar(&applied, "applied", false, "the effect happened (give --result)")
	f.BoolVar(&notApplied, "not-applied", false, "the effect did not happen")
	f.StringVar(&result, "result", "", "with --applied: the activity's result as JSON (\"null\" for none)")
	f.StringVar(&reason, "reason", "", "why: what the downstream showed, a ticket (required)")
	f.StringVar(&by, "by", defaultBy(), "who resolves it")
	check := func() error {
		switch {
		case len(f.args) != 1:
			return usagef("give the receipt's TOKEN")
		case applied == notApplied:
			return usagef("give --applied or --not-applied")
		case applied && result == "":
			return usagef("--applied needs --result with the activity's result as JSON (\"null\" if it returns none)")
		case notApplied && result != "":
			return usagef("--not-applied records no result; drop --result")
		case applied && !json.Valid([]byte(result)):
			return usagef("--result is not valid JSON: %s", result)
		case strings.TrimSpace(reason) == "":
			return usagef("give --reason: what the downstream showed, or a ticket; it is recorded on the receipt")
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		res := operator.Resolution{Applied: applied, By: by, Reason: reason}
		if applied {
			res.Result = json.RawMessage(result)
		}
		r, err := s.op.Resolve(ctx, keys.Token(f.arg(0)), res)
		if errors.Is(err, operator.ErrNoReceipt) || errors.Is(err, operator.ErrNotUnresolved) || errors.Is(err, operator.ErrSealedResults) {
			return &refusedError{err}
		}
		if err != nil {
			return err
		}
		if applied {
			fmt.Fprintf(a.stdout, "resolved %s as applied: the next attempt of %s returns the recorded result without calling anything\n\n", r.Token, r.Key.Operation)
		} else {
			fmt.Fprintf(a.stdout, "resolved %s as not applied: the next attempt of %s calls the downstream again under the same token\n\n", r.Token, r.Key.Operation)
		}
		return printReceipt(a.stdout, r)
	})
}

func (a *app) rearm(ctx context.Context, args []string) error {
	f := a.flags("receipts rearm", "TOKEN", `Makes the receipt under TOKEN, which recorded a failure for good, runnable again: once
you have fixed what made it fail (a blocked account, a wrong configuration), the next attempt
of the activity calls the downstream again under the same token and records what happens
this time. For a saga's compensation, have the workflow call Compensate again (or reset it to
before its compensations) once its receipts are re-armed.

Only a receipt that failed for good can be re-armed; an unknown outcome is settled with
"receipts resolve". The failure it clears, who, when and why go to the audit log, which
"receipts show" prints. A downstream that stored its failed answer under the token (Stripe
does, for 24 hours) gives it again: such a failure needs a new intent, not a re-arm.`)
	var reason, by string
	f.StringVar(&reason, "reason", "", "why: what was fixed, a ticket (required)")
	f.StringVar(&by, "by", defaultBy(), "who re-arms it")
	check := func() error {
		switch {
		case len(f.args) != 1:
			return usagef("give the receipt's TOKEN")
		case strings.TrimSpace(reason) == "":
			return usagef("give --reason: what was fixed, or a ticket; it goes to the audit log")
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		tok := keys.Token(f.arg(0))
		before, err := s.op.Receipt(ctx, tok)
		if errors.Is(err, operator.ErrNoReceipt) {
			return &refusedError{err}
		}
		if err != nil {
			return err
		}
		r, err := s.op.Rearm(ctx, tok, operator.Rearming{By: by, Reason: reason})
		if errors.Is(err, operator.ErrNoReceipt) || errors.Is(err, operator.ErrNotFailed) {
			return &refusedError{err}
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "re-armed %s: the next attempt of %s calls it again under the same token\ncleared: %s: %s\n\n",
			r.Token, safe(r.Key.Operation), safe(before.ErrorType), safe(before.ErrorMessage))
		return a.printWithAudit(ctx, s.op, r)
	})
}

// printWithAudit prints r and the audit log's records of it. A schema without the audit table
// (migration 005 not applied yet) has none to print.
func (a *app) printWithAudit(ctx context.Context, op *operator.Client, r operator.Receipt) error {
	entries, err := op.Audit(ctx, r.Token)
	if err != nil && !errors.Is(err, migrate.ErrNotMigrated) {
		return err
	}
	return printReceipt(a.stdout, r, entries...)
}

func defaultBy() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil {
		name += "@" + host
	}
	return name
}

func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}
