// What an operator does with receipts without SQL: list them, read one, settle an unknown outcome,
// count them. The tempotent command (cmd/tempotent) is built on these.

package activity

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tempotent/tempotent/keys"
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
	// Fingerprint is the request's fingerprint, as "v<version>:<hex>".
	Fingerprint string
	// Result is the recorded result as the DataConverter made it (Config.Codecs undone), nil
	// when there is none; ResultText renders it.
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
	// Compensations are the receipts of the compensations of this step (Store.Receipt fills it;
	// Store.Receipts does not).
	Compensations []Receipt
	// Set when an operator resolved the receipt (Store.Resolve) or re-armed it (Store.Rearm; see
	// Rearmed): the last such action. The audit log (Store.Audit) has every one.
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

// Filter selects receipts for Store.Receipts. Its zero value selects every receipt.
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

// Page sizes of Store.Receipts.
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

// ErrNoReceipt is matched by the errors of Receipt and Resolve for a token that names no receipt.
var ErrNoReceipt = errors.New("no receipt")

// ErrInvalidFilter is matched by Receipts' error for a Filter it cannot use: an unknown state, or
// an After that no page returned.
var ErrInvalidFilter = errors.New("invalid receipt filter")

// ErrNotUnresolved is matched by Resolve's error for a receipt whose outcome is not unresolved:
// it is recorded, or an attempt is running, and resolving it by hand would overwrite what
// happened.
var ErrNotUnresolved = errors.New("receipt is not unresolved")

// operatorColumns are the columns scanOperator reads, in its order.
const operatorColumns = `namespace, tenant, operation, id, token, state, fingerprint_version, fingerprint, fence, attempts,
	effect_possible, result, coalesce(error_type, ''), coalesce(error_message, ''), lease_expires_at, lease_expires_at <= now(),
	created_at, updated_at, completed_at, expires_at, coalesce(workflow_id, ''), coalesce(run_id, ''),
	coalesce(activity_id, ''), coalesce(activity_type, ''), coalesce(compensates, ''), resolved_at,
	coalesce(resolved_by, ''), coalesce(resolution, ''), coalesce(` + unresolved + `, false)`

func (s *Store) scanOperator(row pgx.Row) (Receipt, error) {
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
	r.Fingerprint = fmt.Sprintf("v%d:%x", fpVersion, fp)
	switch {
	case r.State == StateCompleted:
		r.Status = StatusSucceeded
	case r.ErrorType == ErrTypeOutcomeUnknown:
		r.Status = StatusUnknown
	case r.State == StateFailed:
		r.Status = StatusFailed
	case ended != nil && *ended:
		r.Status = StatusLeaseEnded
	default:
		r.Status = StatusRunning
	}
	if result != nil {
		p := &commonpb.Payload{}
		if err := proto.Unmarshal(result, p); err != nil {
			return Receipt{}, fmt.Errorf("receipt %s: decode its result: %w", r.Token, err)
		}
		if r.Result, err = s.open(p); err != nil {
			return Receipt{}, fmt.Errorf("receipt %s: %w", r.Token, err)
		}
	}
	return r, nil
}

// Receipts returns a page of the receipts that f selects, oldest first. The unresolved, unknown
// and workflow filters read an index; other listings of a large table read the table (run them
// off peak, or against a replica).
func (s *Store) Receipts(ctx context.Context, f Filter) (Page, error) {
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
		operatorColumns, s.table(), where, limit+1)
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list receipts: %w", s.explain(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Receipt, error) { return s.scanOperator(row) })
	if err != nil {
		return Page{}, fmt.Errorf("list receipts: %w", s.explain(err))
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
		conds = append(conds, "(state = 'pending' OR error_type = 'tempotent.OutcomeUnknown') AND "+unresolved)
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
func (s *Store) Receipt(ctx context.Context, token keys.Token) (Receipt, error) {
	q := fmt.Sprintf(`SELECT %s FROM %s WHERE token = $1`, operatorColumns, s.table())
	r, err := s.scanOperator(s.db.QueryRow(ctx, q, string(token)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Receipt{}, fmt.Errorf("%w under token %s in schema %q: it was never written, was purged after its retention, or is in another schema",
			ErrNoReceipt, token, s.cfg.Schema)
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("read receipt %s: %w", token, s.explain(err))
	}
	q = fmt.Sprintf(`SELECT %s FROM %s WHERE compensates = $1 AND namespace = $2 AND tenant = $3 ORDER BY created_at`,
		operatorColumns, s.table())
	rows, err := s.db.Query(ctx, q, string(token), r.Key.Namespace, r.Key.Tenant)
	if err == nil {
		r.Compensations, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Receipt, error) { return s.scanOperator(row) })
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("read the compensations of receipt %s: %w", token, s.explain(err))
	}
	return r, nil
}

// Resolution settles an unresolved receipt: what a person found out at the downstream.
type Resolution struct {
	// Applied: the effect happened. The receipt is completed with Result, and the next
	// attempt of the activity returns Result without calling anything. Otherwise the effect
	// did not happen: the receipt's lease stays ended with no effect possible, and the next
	// attempt calls the downstream again, under the same token. Say so only once no attempt
	// can still be sending: a worker frozen in the middle of its call (a long pause, a VM
	// freeze) may still deliver its request, and the receipt cannot fence the downstream.
	Applied bool
	// Result is the activity's result to record when Applied, encoded with the store's
	// DataConverter and Codecs as an activity's own result would be: give a value of the
	// activity's result type (or json.RawMessage with its JSON). Required with Applied, and
	// refused without it.
	Result any
	// By and Reason are recorded with the resolution: who, and why (a ticket, what the
	// provider's dashboard showed). Both are required.
	By, Reason string
}

// Resolve settles the unresolved receipt under token as r says, and returns it as it now is, and
// records who, when, why and whether applied in the audit log (Audit) in the same statement. It
// refuses (ErrNotUnresolved) a receipt whose outcome is recorded or whose attempt is running:
// only a receipt that Receipt.Unresolved marks may be settled by hand. An attempt that still
// holds an ended lease loses it: its late write matches nothing, and it returns what r recorded
// (Applied) or a retryable FencedOut (not applied), after which the next attempt calls again.
func (s *Store) Resolve(ctx context.Context, token keys.Token, r Resolution) (Receipt, error) {
	if strings.TrimSpace(r.By) == "" || strings.TrimSpace(r.Reason) == "" {
		return Receipt{}, errors.New("resolve: say who resolves (Resolution.By) and why (Resolution.Reason); both are recorded on the receipt")
	}
	if r.Applied && r.Result == nil {
		// The next attempt would return the zero value of the activity's result type.
		return Receipt{}, errors.New(`resolve: Applied needs Resolution.Result, the activity's result as the effect produced it (json.RawMessage("null") for an activity that returns none)`)
	}
	if !r.Applied && r.Result != nil {
		// Most likely a forgotten Applied: recording "not applied" would have the next attempt
		// call again, and a second effect, where the caller meant to record one.
		return Receipt{}, errors.New("resolve: Resolution.Result is set but Applied is false; set Applied to record the result, or drop Result to record that the effect did not happen")
	}
	current, err := s.Receipt(ctx, token)
	if err != nil {
		return Receipt{}, fmt.Errorf("resolve: %w", err)
	}
	var stmt string
	args := []any{string(token), newReservation().uuid(), r.By, r.Reason}
	if r.Applied {
		p, err := s.encode(current.Key, r.Result)
		if err != nil {
			return Receipt{}, fmt.Errorf("resolve %s: encode the result: %w", token, err)
		}
		if err := s.checkSize(current.Key, p); err != nil {
			return Receipt{}, fmt.Errorf("resolve %s: %w", token, err)
		}
		// Stored as every result is (outcome): sealed with Config.Codecs, so that an
		// operator's result is not the one kept in cleartext at rest.
		out, err := s.outcome(current.Key, p, nil)
		if err != nil {
			return Receipt{}, fmt.Errorf("resolve %s: %w", token, err)
		}
		stmt = s.sql.resolveApplied
		args = append(args, out.result, s.cfg.Retention.Microseconds())
	} else {
		stmt = s.sql.resolveNotApplied
	}
	stmt, args = s.audited(stmt, args, AuditResolve, map[string]bool{"applied": r.Applied})
	tag, err := s.exec(ctx, stmt, args...)
	if err != nil {
		return Receipt{}, fmt.Errorf("resolve %s: %w", token, s.explain(err))
	}
	if tag.RowsAffected() == 0 {
		now, err := s.Receipt(ctx, token)
		if err != nil {
			return Receipt{}, fmt.Errorf("resolve: %w", err)
		}
		return now, fmt.Errorf("%w: receipt %s is %s; only an unknown outcome, or a lease that ended after a possible effect, can be resolved",
			ErrNotUnresolved, token, now.Status)
	}
	return s.Receipt(ctx, token)
}

// Stats is a count of receipts by operation and state.
type Stats struct {
	Operations []OperationStats
	Total      OperationStats
	// OldestUnresolved is how long the longest-waiting unresolved receipt has waited (since its
	// outcome became unknown or its lease ended); zero when there is none.
	OldestUnresolved time.Duration
	// Expired counts the receipts past their retention that Purge has not deleted yet (the
	// unresolved among them it keeps).
	Expired int64
}

// OperationStats counts one operation's receipts (Operation is empty in Stats.Total).
type OperationStats struct {
	Operation                                       string
	Running, LeaseEnded, Succeeded, Failed, Unknown int64
	Unresolved                                      int64
}

// Stats counts the receipts by operation and state. It reads the whole table: on a large one,
// run it off peak or against a replica.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	q := fmt.Sprintf(`SELECT operation,
	count(*) FILTER (WHERE state = 'pending' AND lease_expires_at > now()),
	count(*) FILTER (WHERE state = 'pending' AND lease_expires_at <= now()),
	count(*) FILTER (WHERE state = 'completed'),
	count(*) FILTER (WHERE state = 'failed' AND error_type IS DISTINCT FROM 'tempotent.OutcomeUnknown'),
	count(*) FILTER (WHERE error_type = 'tempotent.OutcomeUnknown'),
	count(*) FILTER (WHERE %[2]s)
FROM %[1]s GROUP BY operation ORDER BY operation`, s.table(), unresolved)
	rows, err := s.db.Query(ctx, q)
	if err != nil {
		return Stats{}, fmt.Errorf("count receipts: %w", s.explain(err))
	}
	var st Stats
	st.Operations, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (OperationStats, error) {
		var o OperationStats
		err := row.Scan(&o.Operation, &o.Running, &o.LeaseEnded, &o.Succeeded, &o.Failed, &o.Unknown, &o.Unresolved)
		return o, err
	})
	if err != nil {
		return Stats{}, fmt.Errorf("count receipts: %w", s.explain(err))
	}
	for _, o := range st.Operations {
		st.Total.Running += o.Running
		st.Total.LeaseEnded += o.LeaseEnded
		st.Total.Succeeded += o.Succeeded
		st.Total.Failed += o.Failed
		st.Total.Unknown += o.Unknown
		st.Total.Unresolved += o.Unresolved
	}
	u, err := s.unresolvedNow(ctx)
	if err != nil {
		return Stats{}, err
	}
	st.OldestUnresolved = u.oldest
	err = s.db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE expires_at <= now()`, s.table())).Scan(&st.Expired)
	if err != nil {
		return Stats{}, fmt.Errorf("count expired receipts: %w", s.explain(err))
	}
	return st, nil
}

func (s *Store) table() string { return pgx.Identifier{s.cfg.Schema, "receipts"}.Sanitize() }
