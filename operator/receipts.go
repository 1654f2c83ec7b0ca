// Receipts as an operator reads them: a page of them (Receipts), or one with its compensations
// (Receipt).

package operator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"

	"github.com/tempotent/tempotent/internal/errtype"
	"github.com/tempotent/tempotent/internal/schema"
	"github.com/tempotent/tempotent/keys"
)

// Receipt states, as Receipt.State holds them and Filter.State selects them.
const (
	StatePending   = "pending"
	StateCompleted = "completed"
	StateFailed    = "failed"
)

// Receipt is a receipt as an operator reads it: every column, and what it means.
type Receipt struct {
	Key   keys.Key
	Token keys.Token
	// State is StatePending, StateCompleted or StateFailed, as stored.
	State string
	// Status says what the state means: "running" (a live lease), "lease ended" (pending, and
	// the next attempt takes over), "succeeded", "failed", or "unknown" (OutcomeUnknown).
	Status string
	// Unresolved: an attempt may have had its effect and nothing records what happened (an
	// OutcomeUnknown, or pending with an ended lease after a possible effect). It waits for
	// Resolve, or, for a lease that ended, for the next attempt.
	Unresolved bool
	// EffectPossible: an attempt may have had the effect, as far as the receipt knows.
	EffectPossible bool
	// Fence counts reservations and takeovers; Attempts the attempts that held the receipt.
	Fence    int64
	Attempts int
	// Fingerprint is the request's fingerprint, as "v<version>:<hex>", or "k<version>:<hex>"
	// when the workers key it (activity.Config.FingerprintKeys).
	Fingerprint string
	// Result is the recorded result as the workers' DataConverter made it (Config.Codecs
	// undone), nil when there is none; ResultText renders it.
	Result *commonpb.Payload
	// ErrorType and ErrorMessage are the recorded failure's.
	ErrorType, ErrorMessage string
	// LeaseExpiresAt is when the holding attempt's lease ends (ended, if in the past); nil on a
	// finished receipt.
	LeaseExpiresAt *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    *time.Time
	// ExpiresAt is when Purge may delete it (never while it is unresolved).
	ExpiresAt time.Time
	// The Temporal execution whose attempt first wrote the receipt; empty outside Temporal and
	// on receipts written before migration 004.
	WorkflowID, RunID, ActivityID, ActivityType string
	// Compensates is the token of the forward step this compensation undoes, if it is one.
	Compensates keys.Token
	// Compensations are the receipts of the compensations of this step (Client.Receipt fills
	// it; Client.Receipts does not).
	Compensations []Receipt
	// Set when an operator resolved the receipt (Client.Resolve) or re-armed it (Client.Rearm;
	// see Rearmed): the last such action. The audit log (Client.Audit) has every one.
	ResolvedAt             *time.Time
	ResolvedBy, Resolution string
}

// ResultText renders the result for people: JSON as it is, anything else (an encrypted or
// binary payload) by its encoding and size.
func (r Receipt) ResultText() string {
	if r.Result == nil {
		return ""
	}
	enc := string(r.Result.GetMetadata()["encoding"])
	switch enc {
	case "json/plain":
		return string(r.Result.GetData())
	case "binary/null":
		return "null"
	}
	return fmt.Sprintf("<%s, %d bytes>", enc, len(r.Result.GetData()))
}

// Statuses of a Receipt, and the states Filter.State takes beside StatePending, StateCompleted
// and StateFailed.
const (
	StatusRunning    = "running"
	StatusLeaseEnded = "lease ended"
	StatusSucceeded  = "succeeded"
	StatusFailed     = "failed"
	StatusUnknown    = "unknown"

	// FilterUnresolved selects the unresolved receipts (Receipt.Unresolved).
	FilterUnresolved = "unresolved"
	// FilterUnknown selects the receipts recorded as OutcomeUnknown.
	FilterUnknown = "unknown"
	// FilterLeaseEnded selects the pending receipts whose lease has ended.
	FilterLeaseEnded = "lease-ended"
)

// Filter selects receipts for Client.Receipts. Its zero value selects every receipt.
type Filter struct {
	// State is "" (any), StatePending, StateCompleted, StateFailed, FilterUnresolved,
	// FilterUnknown or FilterLeaseEnded.
	State string
	// Tenant, when not nil, selects one tenant ("" is the receipts without one).
	Tenant *string
	// Operation and WorkflowID, when not empty, select one of each.
	Operation, WorkflowID string
	// OlderThan and NewerThan, when positive, select receipts first reserved longer ago, or
	// more recently, than that.
	OlderThan, NewerThan time.Duration
	// Limit is the page size; ListLimitDefault when not positive, at most ListLimitMax.
	Limit int
	// After is the Page.Next of the page before, "" for the first.
	After string
}

// Page sizes of Client.Receipts.
const (
	ListLimitDefault = 50
	ListLimitMax     = 1000
)

// Page is one page of receipts, oldest first. Next is the Filter.After of the following page, ""
// when this is the last.
type Page struct {
	Receipts []Receipt
	Next     string
}

// ErrNoReceipt is matched by the errors of Receipt, Resolve and Rearm for a token that names no
// receipt.
var ErrNoReceipt = errors.New("no receipt")

// ErrInvalidFilter is matched by Receipts' error for a Filter it cannot use: an unknown state, or
// an After that no page returned.
var ErrInvalidFilter = errors.New("invalid receipt filter")

// operatorColumns are the columns scan reads, in its order.
const operatorColumns = `namespace, tenant, operation, id, token, state, fingerprint_version, fingerprint, fence, attempts,
	effect_possible, result, coalesce(error_type, ''), coalesce(error_message, ''), lease_expires_at, lease_expires_at <= now(),
	created_at, updated_at, completed_at, expires_at, coalesce(workflow_id, ''), coalesce(run_id, ''),
	coalesce(activity_id, ''), coalesce(activity_type, ''), coalesce(compensates, ''), resolved_at,
	coalesce(resolved_by, ''), coalesce(resolution, ''), coalesce(` + schema.Unresolved + `, false)`

// scan reads a row of operatorColumns.
func (c *Client) scan(row pgx.Row) (Receipt, error) {
	var (
		r          Receipt
		token      string
		fpVersion  int16
		fp, result []byte
		ended      *bool
		comp       string
	)
	err := row.Scan(&r.Key.Namespace, &r.Key.Tenant, &r.Key.Operation, &r.Key.ID, &token, &r.State, &fpVersion, &fp,
		&r.Fence, &r.Attempts, &r.EffectPossible, &result, &r.ErrorType, &r.ErrorMessage, &r.LeaseExpiresAt, &ended,
		&r.CreatedAt, &r.UpdatedAt, &r.CompletedAt, &r.ExpiresAt, &r.WorkflowID, &r.RunID, &r.ActivityID,
		&r.ActivityType, &comp, &r.ResolvedAt, &r.ResolvedBy, &r.Resolution, &r.Unresolved)
	if err != nil {
		return Receipt{}, err
	}
	r.Token, r.Compensates = keys.Token(token), keys.Token(comp)
	r.Fingerprint = storedFingerprint(fpVersion, fp)
	switch {
	case r.State == StateCompleted:
		r.Status = StatusSucceeded
	case r.ErrorType == errtype.OutcomeUnknown:
		r.Status = StatusUnknown
	case r.State == StateFailed:
		r.Status = StatusFailed
	case ended != nil && *ended:
		r.Status = StatusLeaseEnded
	default:
		r.Status = StatusRunning
	}
	if result != nil {
		if r.Result, err = schema.DecodeResult(c.cfg.Codecs, result); err != nil {
			return Receipt{}, fmt.Errorf("receipt %s: %w", r.Token, err)
		}
	}
	return r, nil
}

// Receipts returns a page of the receipts that f selects, oldest first. The unresolved, unknown
// and workflow filters read an index; other listings of a large table read the table (run them
// off peak, or against a replica).
func (c *Client) Receipts(ctx context.Context, f Filter) (Page, error) {
	where, args, err := f.where()
	if err != nil {
		return Page{}, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = ListLimitDefault
	}
	limit = min(limit, ListLimitMax)
	q := fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY created_at, token LIMIT %d`,
		operatorColumns, c.receipts, where, limit+1)
	rows, err := c.db.Query(ctx, q, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list receipts: %w", c.explain(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Receipt, error) { return c.scan(row) })
	if err != nil {
		return Page{}, fmt.Errorf("list receipts: %w", c.explain(err))
	}
	page := Page{Receipts: out}
	if len(out) > limit {
		page.Receipts = out[:limit]
		page.Next = encodeCursor(out[limit-1])
	}
	return page, nil
}

// where renders f as a WHERE clause and its arguments.
func (f Filter) where() (string, []any, error) {
	conds := []string{"true"}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	switch f.State {
	case "":
	case StatePending, StateCompleted, StateFailed:
		conds = append(conds, "state = "+arg(f.State))
	case FilterUnresolved:
		// The first condition is the unresolved index's, so that the planner uses it.
		conds = append(conds, "(state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND "+schema.Unresolved)
	case FilterUnknown:
		conds = append(conds, "(state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND error_type = 'tempotent.OutcomeUnknown'")
	case FilterLeaseEnded:
		conds = append(conds, "state = 'pending' AND lease_expires_at <= now()")
	default:
		return "", nil, fmt.Errorf("%w: unknown state %q: give pending, completed, failed, %s, %s or %s",
			ErrInvalidFilter, f.State, FilterUnresolved, FilterUnknown, FilterLeaseEnded)
	}
	if f.Tenant != nil {
		conds = append(conds, "tenant = "+arg(*f.Tenant))
	}
	if f.Operation != "" {
		conds = append(conds, "operation = "+arg(f.Operation))
	}
	if f.WorkflowID != "" {
		conds = append(conds, "workflow_id = "+arg(f.WorkflowID))
	}
	if f.OlderThan > 0 {
		conds = append(conds, "created_at < now() - "+arg(f.OlderThan.Microseconds())+"::bigint * interval '1 microsecond'")
	}
	if f.NewerThan > 0 {
		conds = append(conds, "created_at > now() - "+arg(f.NewerThan.Microseconds())+"::bigint * interval '1 microsecond'")
	}
	if f.After != "" {
		at, token, err := decodeCursor(f.After)
		if err != nil {
			return "", nil, err
		}
		conds = append(conds, fmt.Sprintf("(created_at, token) > (%s, %s)", arg(at), arg(token)))
	}
	return strings.Join(conds, " AND "), args, nil
}

// A cursor is where a page ended: the last receipt's creation time (µs since the epoch) and
// token, "<µs>.<token>". Tokens are unique, so together they order every receipt.
func encodeCursor(r Receipt) string {
	return strconv.FormatInt(r.CreatedAt.UnixMicro(), 36) + "." + string(r.Token)
}

func decodeCursor(s string) (time.Time, string, error) {
	us, token, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(us, 36, 64)
	if !ok || err != nil || token == "" {
		return time.Time{}, "", fmt.Errorf("%w: page cursor %q is not one that a page returned as Next", ErrInvalidFilter, s)
	}
	return time.UnixMicro(n), token, nil
}

// Receipt returns the receipt under token, with the receipts of its compensations. Its error
// matches ErrNoReceipt when there is none. (For a Key, pass k.Token().)
func (c *Client) Receipt(ctx context.Context, token keys.Token) (Receipt, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	q := fmt.Sprintf(`SELECT %s FROM %s WHERE token = $1`, operatorColumns, c.receipts)
	r, err := c.scan(c.db.QueryRow(ctx, q, string(token)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Receipt{}, fmt.Errorf("%w under token %s in schema %q: it was never written, was purged after its retention, or is in another schema",
			ErrNoReceipt, token, c.cfg.Schema)
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("read receipt %s: %w", token, c.explain(err))
	}
	q = fmt.Sprintf(`SELECT %s FROM %s WHERE compensates = $1 AND namespace = $2 AND tenant = $3 ORDER BY created_at`,
		operatorColumns, c.receipts)
	rows, err := c.db.Query(ctx, q, string(token), r.Key.Namespace, r.Key.Tenant)
	if err == nil {
		r.Compensations, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Receipt, error) { return c.scan(row) })
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("read the compensations of receipt %s: %w", token, c.explain(err))
	}
	return r, nil
}
