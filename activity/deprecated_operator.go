// The operator's API as 1.0 had it, on Store: it moved to the operator package, and these names
// stay for one release so that 1.0 code compiles. Each forwards to operator.

package activity

import (
	"context"
	"fmt"
	"time"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// Deprecated: use operator.Receipt; removed in the release after next.
type Receipt = operator.Receipt

// Deprecated: use operator.Filter; removed in the release after next.
type Filter = operator.Filter

// Deprecated: use operator.Page; removed in the release after next.
type Page = operator.Page

// Deprecated: use operator.Resolution; removed in the release after next.
type Resolution = operator.Resolution

// Deprecated: use operator.Rearming; removed in the release after next.
type Rearming = operator.Rearming

// Deprecated: use operator.AuditEntry; removed in the release after next.
type AuditEntry = operator.AuditEntry

// Deprecated: use operator.Stats; removed in the release after next.
type Stats = operator.Stats

// Deprecated: use operator.OperationStats; removed in the release after next.
type OperationStats = operator.OperationStats

// Deprecated: use operator.Counts; removed in the release after next.
type Counts = operator.Counts

// Receipt states, statuses and filters, page sizes, audit actions, metrics and defaults of the
// operator's API.
//
// Deprecated: use the operator package's constants of the same names; removed in the release
// after next.
const (
	StatePending           = operator.StatePending
	StateCompleted         = operator.StateCompleted
	StateFailed            = operator.StateFailed
	StatusRunning          = operator.StatusRunning
	StatusLeaseEnded       = operator.StatusLeaseEnded
	StatusSucceeded        = operator.StatusSucceeded
	StatusFailed           = operator.StatusFailed
	StatusUnknown          = operator.StatusUnknown
	FilterUnresolved       = operator.FilterUnresolved
	FilterUnknown          = operator.FilterUnknown
	FilterLeaseEnded       = operator.FilterLeaseEnded
	ListLimitDefault       = operator.ListLimitDefault
	ListLimitMax           = operator.ListLimitMax
	AuditResolve           = operator.AuditResolve
	AuditRearm             = operator.AuditRearm
	MetricUnresolvedHeld   = operator.MetricUnresolvedHeld
	MetricUnresolved       = operator.MetricUnresolved
	MetricUnresolvedOldest = operator.MetricUnresolvedOldest
	PurgeBatchDefault      = operator.PurgeBatchDefault
	RetentionDefault       = operator.RetentionDefault
)

// Sentinel errors of the operator's API.
//
// Deprecated: use operator.ErrNoReceipt, operator.ErrInvalidFilter, operator.ErrNotUnresolved
// and operator.ErrNotFailed (the same errors); removed in the release after next.
var (
	ErrNoReceipt     = operator.ErrNoReceipt
	ErrInvalidFilter = operator.ErrInvalidFilter
	ErrNotUnresolved = operator.ErrNotUnresolved
	ErrNotFailed     = operator.ErrNotFailed
)

// operator is an operator.Client on the store's pool, configured as the store is.
func (s *Store) operator() *operator.Client {
	op, err := operator.NewClient(s.db, operator.Config{
		Schema:           s.cfg.Schema,
		Retention:        s.cfg.Retention,
		DataConverter:    s.cfg.DataConverter,
		Codecs:           s.cfg.Codecs,
		MaxPayloadBytes:  s.cfg.MaxPayloadBytes,
		LockTimeout:      s.cfg.LockTimeout,
		StatementTimeout: s.cfg.StatementTimeout,
		MetricsHandler:   s.cfg.MetricsHandler,
	})
	if err != nil {
		// NewClient checks what NewStore checked already.
		panic(fmt.Sprintf("activity: the operator.Config of a valid Store is refused: %v", err))
	}
	return op
}

// Deprecated: use operator.Client.Receipts; removed in the release after next.
func (s *Store) Receipts(ctx context.Context, f Filter) (Page, error) {
	return s.operator().Receipts(ctx, f)
}

// Deprecated: use operator.Client.Receipt; removed in the release after next.
func (s *Store) Receipt(ctx context.Context, token keys.Token) (Receipt, error) {
	return s.operator().Receipt(ctx, token)
}

// Deprecated: use operator.Client.Resolve; removed in the release after next.
func (s *Store) Resolve(ctx context.Context, token keys.Token, r Resolution) (Receipt, error) {
	return s.operator().Resolve(ctx, token, r)
}

// Deprecated: use operator.Client.Rearm; removed in the release after next.
func (s *Store) Rearm(ctx context.Context, token keys.Token, r Rearming) (Receipt, error) {
	return s.operator().Rearm(ctx, token, r)
}

// Deprecated: use operator.Client.Audit; removed in the release after next.
func (s *Store) Audit(ctx context.Context, token keys.Token) ([]AuditEntry, error) {
	return s.operator().Audit(ctx, token)
}

// Deprecated: use operator.Client.Stats; removed in the release after next.
func (s *Store) Stats(ctx context.Context) (Stats, error) { return s.operator().Stats(ctx) }

// Deprecated: use operator.Client.Purge; removed in the release after next.
func (s *Store) Purge(ctx context.Context, limit int) (int64, error) {
	return s.operator().Purge(ctx, limit)
}

// Deprecated: use operator.Client.Unresolved; removed in the release after next.
func (s *Store) Unresolved(ctx context.Context) (int64, error) { return s.operator().Unresolved(ctx) }

// Deprecated: use operator.Client.CountSince; removed in the release after next.
func (s *Store) CountSince(ctx context.Context, since time.Time) (Counts, error) {
	return s.operator().CountSince(ctx, since)
}

// Deprecated: use operator.Client.Partition; removed in the release after next.
func (s *Store) Partition(ctx context.Context) error { return s.operator().Partition(ctx) }

// Deprecated: use operator.Client.Partitioned; removed in the release after next.
func (s *Store) Partitioned(ctx context.Context) (bool, error) { return s.operator().Partitioned(ctx) }
