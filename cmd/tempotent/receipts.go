package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/migrate"
)

func (a *app) list(ctx context.Context, args []string) error {
	f := a.flags("receipts list", "", "Lists receipts, oldest first, a page at a time.")
	var filter activity.Filter
	var asJSON bool
	f.StringVar(&filter.State, "state", "", "pending, completed, failed, unresolved, unknown (OutcomeUnknown) or lease-ended")
	f.Func("tenant", "only this tenant (\"\" for receipts without one)", func(v string) error { filter.Tenant = &v; return nil })
	f.StringVar(&filter.Operation, "operation", "", "only this operation (the activity type, unless the workflow named it)")
	f.StringVar(&filter.WorkflowID, "workflow", "", "only receipts written by this workflow ID")
	f.Func("older-than", "only receipts first reserved longer ago than this (e.g. 1h, 7d)", durationFlag(&filter.OlderThan))
	f.Func("newer-than", "only receipts first reserved more recently than this", durationFlag(&filter.NewerThan))
	f.IntVar(&filter.Limit, "limit", activity.ListLimitDefault, fmt.Sprintf("page size, at most %d", activity.ListLimitMax))
	f.StringVar(&filter.After, "after", "", "the cursor printed at the end of the page before")
	f.BoolVar(&asJSON, "json", false, "print JSON: {\"receipts\": [...], \"next\": cursor}")
	if err := f.parse(args); err != nil {
		return err
	}
	if len(f.args) > 0 {
		return usagef("unexpected argument %q", f.arg(0))
	}
	s, pool, err := f.store(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	page, err := s.Receipts(ctx, filter)
	if err != nil {
		if errors.Is(err, activity.ErrInvalidFilter) {
			return usagef("%v", err)
		}
		return err
	}
	if asJSON {
		out := struct {
			Receipts []receiptJSON `json:"receipts"`
			Next     string        `json:"next,omitempty"`
		}{Receipts: []receiptJSON{}, Next: page.Next}
		for _, r := range page.Receipts {
			out.Receipts = append(out.Receipts, toJSON(r))
		}
		return writeJSON(a.stdout, out)
	}
	if len(page.Receipts) == 0 {
		fmt.Fprintln(a.stdout, "no receipts match")
		return nil
	}
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TOKEN\tOPERATION\tTENANT\tSTATUS\tATTEMPTS\tAGE\tWORKFLOW")
	for _, r := range page.Receipts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Token, r.Key.Operation, orDash(r.Key.Tenant), status(r), r.Attempts,
			age(r.CreatedAt), orDash(r.WorkflowID))
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
	f := a.flags("receipts show", "[TOKEN]", "Prints every field of the receipt under TOKEN (or --key), with its compensations,\nor of every receipt a workflow wrote (--workflow).")
	var key, workflowID string
	var asJSON bool
	f.StringVar(&key, "key", "", "the receipt's key as NAMESPACE/TENANT/OPERATION/ID (as errors and logs of older versions print it)")
	f.StringVar(&workflowID, "workflow", "", "every receipt written by this workflow ID")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	if err := f.parse(args); err != nil {
		return err
	}
	var tokens []keys.Token
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
	s, pool, err := f.store(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if workflowID != "" {
		for after := ""; ; {
			page, err := s.Receipts(ctx, activity.Filter{WorkflowID: workflowID, Limit: activity.ListLimitMax, After: after})
			if err != nil {
				return err
			}
			for _, r := range page.Receipts {
				tokens = append(tokens, r.Token)
			}
			if after = page.Next; after == "" {
				break
			}
		}
		if len(tokens) == 0 {
			return &refusedError{fmt.Errorf("%w written by workflow %q in schema %q (receipts written before migration 004 do not record their workflow)",
				activity.ErrNoReceipt, workflowID, f.schema)}
		}
	}
	var all []receiptJSON
	for i, tok := range tokens {
		r, err := s.Receipt(ctx, tok)
		if errors.Is(err, activity.ErrNoReceipt) {
			return &refusedError{err}
		}
		if err != nil {
			return err
		}
		if asJSON {
			j := toJSON(r)
			audit, err := s.Audit(ctx, r.Token)
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
		if err := a.printWithAudit(ctx, s, r); err != nil {
			return err
		}
	}
	if asJSON {
		if len(all) == 1 && workflowID == "" {
			return writeJSON(a.stdout, all[0])
		}
		return writeJSON(a.stdout, all)
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
Who, when and why are recorded on the receipt. The result is stored as JSON, unencrypted:
a store with Config.Codecs should resolve with activity.Store.Resolve from Go instead.`)
	var applied, notApplied bool
	var result, reason, by string
	f.BoolVar(&applied, "applied", false, "the effect happened (give --result)")
	f.BoolVar(&notApplied, "not-applied", false, "the effect did not happen")
	f.StringVar(&result, "result", "", "with --applied: the activity's result as JSON (\"null\" for none)")
	f.StringVar(&reason, "reason", "", "why: what the downstream showed, a ticket (required)")
	f.StringVar(&by, "by", defaultBy(), "who resolves it")
	if err := f.parse(args); err != nil {
		return err
	}
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
	s, pool, err := f.store(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res := activity.Resolution{Applied: applied, By: by, Reason: reason}
	if applied {
		res.Result = json.RawMessage(result)
	}
	r, err := s.Resolve(ctx, keys.Token(f.arg(0)), res)
	if errors.Is(err, activity.ErrNoReceipt) || errors.Is(err, activity.ErrNotUnresolved) {
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
	if err := f.parse(args); err != nil {
		return err
	}
	switch {
	case len(f.args) != 1:
		return usagef("give the receipt's TOKEN")
	case strings.TrimSpace(reason) == "":
		return usagef("give --reason: what was fixed, or a ticket; it goes to the audit log")
	}
	s, pool, err := f.store(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	tok := keys.Token(f.arg(0))
	before, err := s.Receipt(ctx, tok)
	if errors.Is(err, activity.ErrNoReceipt) {
		return &refusedError{err}
	}
	if err != nil {
		return err
	}
	r, err := s.Rearm(ctx, tok, activity.Rearming{By: by, Reason: reason})
	if errors.Is(err, activity.ErrNoReceipt) || errors.Is(err, activity.ErrNotFailed) {
		return &refusedError{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "re-armed %s: the next attempt of %s calls it again under the same token\ncleared: %s: %s\n\n",
		r.Token, r.Key.Operation, before.ErrorType, before.ErrorMessage)
	return a.printWithAudit(ctx, s, r)
}

// printWithAudit prints r and the audit log's records of it. A schema without the audit table
// (migration 005 not applied yet) has none to print.
func (a *app) printWithAudit(ctx context.Context, s *activity.Store, r activity.Receipt) error {
	entries, err := s.Audit(ctx, r.Token)
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

// status is a receipt's status, marked when it waits for a person.
func status(r activity.Receipt) string {
	switch {
	case r.Unresolved:
		return r.Status + " (unresolved)"
	case r.ResolvedAt != nil:
		return r.Status + " (resolved)"
	}
	return r.Status
}

func printReceipt(w io.Writer, r activity.Receipt, audit ...activity.AuditEntry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	line("token", "%s", r.Token)
	line("key", "%s/%s/%s/%s", r.Key.Namespace, r.Key.Tenant, r.Key.Operation, r.Key.ID)
	line("status", "%s; stored state %s", status(r), r.State)
	if r.Unresolved && r.Rearmed() {
		line("to do", "re-armed: the next attempt of %s runs it again under the same token (a saga's compensation: have the workflow call Compensate again)", r.Key.Operation)
	} else if r.Unresolved {
		line("to do", "check the downstream for the token, then: tempotent receipts resolve %s --applied --result JSON | --not-applied --reason WHY", r.Token)
	}
	line("effect possible", "%t", r.EffectPossible)
	line("attempts", "%d (fence %d)", r.Attempts, r.Fence)
	line("fingerprint", "%s", r.Fingerprint)
	if r.Result != nil {
		line("result", "%s", r.ResultText())
	}
	if r.ErrorType != "" {
		line("error", "%s: %s", r.ErrorType, r.ErrorMessage)
	}
	if r.LeaseExpiresAt != nil {
		line("lease", "%s", relative(*r.LeaseExpiresAt))
	}
	line("created", "%s", stamp(r.CreatedAt))
	line("updated", "%s", stamp(r.UpdatedAt))
	if r.CompletedAt != nil {
		line("completed", "%s", stamp(*r.CompletedAt))
	}
	line("expires", "%s", stamp(r.ExpiresAt))
	line("workflow", "%s", orDash(r.WorkflowID))
	line("run", "%s", orDash(r.RunID))
	line("activity", "%s", orDash(strings.TrimSpace(r.ActivityType+" "+parens(r.ActivityID))))
	if r.Compensates != "" {
		line("compensates", "%s", r.Compensates)
	}
	for _, c := range r.Compensations {
		line("compensation", "%s %s %s", c.Token, c.Key.Operation, status(c))
	}
	if r.ResolvedAt != nil {
		if r.Rearmed() {
			line("re-armed", "%s by %s: %s", stamp(*r.ResolvedAt), r.ResolvedBy, strings.TrimPrefix(r.Resolution, "re-armed: "))
		} else {
			line("resolved", "%s by %s: %s", stamp(*r.ResolvedAt), r.ResolvedBy, r.Resolution)
		}
	}
	for _, e := range audit {
		line("audit", "%s %s by %s: %s %s", stamp(e.At), e.Action, e.Actor, e.Reason, e.Detail)
	}
	return tw.Flush()
}

// receiptJSON is a receipt as --json prints it.
type receiptJSON struct {
	Token          string          `json:"token"`
	Namespace      string          `json:"namespace"`
	Tenant         string          `json:"tenant"`
	Operation      string          `json:"operation"`
	ID             string          `json:"id"`
	State          string          `json:"state"`
	Status         string          `json:"status"`
	Unresolved     bool            `json:"unresolved"`
	EffectPossible bool            `json:"effect_possible"`
	Attempts       int             `json:"attempts"`
	Fence          int64           `json:"fence"`
	Fingerprint    string          `json:"fingerprint"`
	Result         json.RawMessage `json:"result,omitempty"`
	ResultEncoding string          `json:"result_encoding,omitempty"`
	ErrorType      string          `json:"error_type,omitempty"`
	ErrorMessage   string          `json:"error_message,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	CompletedAt    *time.Time      `json:"completed_at,omitempty"`
	ExpiresAt      time.Time       `json:"expires_at"`
	WorkflowID     string          `json:"workflow_id,omitempty"`
	RunID          string          `json:"run_id,omitempty"`
	ActivityID     string          `json:"activity_id,omitempty"`
	ActivityType   string          `json:"activity_type,omitempty"`
	Compensates    string          `json:"compensates,omitempty"`
	Compensations  []receiptJSON   `json:"compensations,omitempty"`
	ResolvedAt     *time.Time      `json:"resolved_at,omitempty"`
	ResolvedBy     string          `json:"resolved_by,omitempty"`
	Resolution     string          `json:"resolution,omitempty"`
	// Audit is the audit log's records of the receipt (receipts show only).
	Audit []auditJSON `json:"audit,omitempty"`
}

// auditJSON is an audit record as --json prints it.
type auditJSON struct {
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Reason string          `json:"reason"`
	Detail json.RawMessage `json:"detail"`
}

func toJSON(r activity.Receipt) receiptJSON {
	j := receiptJSON{
		Token: string(r.Token), Namespace: r.Key.Namespace, Tenant: r.Key.Tenant, Operation: r.Key.Operation, ID: r.Key.ID,
		State: r.State, Status: r.Status, Unresolved: r.Unresolved, EffectPossible: r.EffectPossible, Attempts: r.Attempts,
		Fence: r.Fence, Fingerprint: r.Fingerprint, ErrorType: r.ErrorType, ErrorMessage: r.ErrorMessage,
		LeaseExpiresAt: r.LeaseExpiresAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CompletedAt: r.CompletedAt,
		ExpiresAt: r.ExpiresAt, WorkflowID: r.WorkflowID, RunID: r.RunID, ActivityID: r.ActivityID,
		ActivityType: r.ActivityType, Compensates: string(r.Compensates), ResolvedAt: r.ResolvedAt, ResolvedBy: r.ResolvedBy,
		Resolution: r.Resolution,
	}
	if r.Result != nil {
		text := r.ResultText()
		if json.Valid([]byte(text)) {
			j.Result = json.RawMessage(text)
		} else {
			j.ResultEncoding = string(r.Result.GetMetadata()["encoding"])
		}
	}
	for _, c := range r.Compensations {
		j.Compensations = append(j.Compensations, toJSON(c))
	}
	return j
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parens(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

func stamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339) + " (" + relative(t) + ")"
}

// relative says how far t is from now, as people say it.
func relative(t time.Time) string {
	d := time.Until(t)
	if d < 0 {
		return roughly(-d) + " ago"
	}
	return "in " + roughly(d)
}

func age(t time.Time) string { return roughly(time.Since(t)) }

func roughly(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour && int(d.Minutes())%60 == 0:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
