// How the commands print receipts: for people (tables, relative times) and as JSON.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotent/tempotent/operator"
)

// status is a receipt's status, marked when it waits for a person.
func status(r operator.Receipt) string {
	switch {
	case r.Unresolved:
		return r.Status + " (unresolved)"
	case r.ResolvedAt != nil:
		return r.Status + " (resolved)"
	}
	return r.Status
}

func printReceipt(w io.Writer, r operator.Receipt, audit ...operator.AuditEntry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// Every text of a receipt can come from outside (a key's ID, an error's message, a result,
	// a workflow ID, an operator's reason): each is printed through safe, so a terminal shown it
	// executes nothing.
	line := func(name, format string, args ...any) {
		for i, arg := range args {
			switch v := arg.(type) {
			case string:
				args[i] = safe(v)
			case json.RawMessage:
				args[i] = safe(string(v))
			}
		}
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

func toJSON(r operator.Receipt) receiptJSON {
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

// writeJSON writes v indented; callers that print what came from outside use writeSafeJSON.
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
