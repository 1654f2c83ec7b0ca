// Tenant fences: the clause every receipt statement of a sharded store carries, refusing a
// tenant moved away from this shard (migration 012, package shard's Move).

package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// fences are the names a store with Config.TenantFences checks its tenants' fences by, quoted:
// the tenant_fences table, the tenant_moved function and the tenant_fences_read_committed
// function (migration 012). The zero value is a store that does not check: its statements are
// exactly those of a store before fences.
type fences struct{ table, refuse, isolation string }

// fenced returns the clause (to follow a condition, "AND …") that refuses the statement when
// tenant (an expression: $2) is fenced on this shard, in phase any (draining or sealed) or only
// once sealed; "" for a store without fences. Race: a move that fences the tenant after this
// statement's snapshot is not seen here; the move waits for every transaction that holds a lock
// on the receipts table when its fence commits (Move's barrier), and a READ COMMITTED statement
// takes that lock before its snapshot, so the move copies nothing such a statement has not yet
// written. A transaction at REPEATABLE READ or SERIALIZABLE keeps the snapshot of its first
// statement, which may predate the fence while it held no lock on the receipts table yet: so the
// clause also refuses the statement outside READ COMMITTED (readCommitted). The subquery finds a
// row only for a fenced tenant (one probe of the table's primary key, a table of one row per
// tenant that ever moved away), and only then calls tenant_moved, which raises SQLSTATE TT001
// with the tenant in its detail: the statement and its transaction fail, and the caller
// (shard.Register) looks the route up again. It is for statements of one tenant: the batch
// statements skip a fenced row instead (skip).
func (f fences) fenced(tenant string, sealedOnly bool) string {
	if f.table == "" {
		return ""
	}
	return fmt.Sprintf(" AND (SELECT %s(f.tenant, f.moved_to) FROM %s AS f WHERE f.tenant = %s%s) IS NULL%s",
		f.refuse, f.table, tenant, sealed(sealedOnly), f.readCommitted())
}

// skip is the WHERE clause, on a line of its own, of a batch statement's rows (reserveBatch,
// completeBatch): it leaves out each row whose tenant (a column of the batch) is fenced, row by
// row, so that one moved tenant's row cannot fail the statement, and with it the other tenants'
// rows of the batch. A row left out comes back as neither written nor found, and its caller
// writes it alone (reserveOne, completeOne), where fenced refuses it with TT001 for its own
// tenant only. "" without fences.
func (f fences) skip(tenant string, sealedOnly bool) string {
	if f.table == "" {
		return ""
	}
	return fmt.Sprintf("\n\tWHERE NOT EXISTS (SELECT FROM %s AS f WHERE f.tenant = %s%s)%s", f.table, tenant, sealed(sealedOnly), f.readCommitted())
}

// where is fenced as a WHERE clause of its own, on a line of its own; "" without fences.
func (f fences) where(tenant string, sealedOnly bool) string {
	c := f.fenced(tenant, sealedOnly)
	if c == "" {
		return ""
	}
	return "\n\tWHERE" + strings.TrimPrefix(c, " AND")
}

// readCommitted is the clause that refuses a statement run outside READ COMMITTED, calling
// tenant_fences_read_committed, which raises SQLSTATE 0A000 (feature_not_supported) saying so, as
// a partitioned receipts table's trigger does: a snapshot older than the statement (REPEATABLE
// READ, SERIALIZABLE) may predate a fence that Move's barrier did not wait for. OR evaluates its
// left side first, so a READ COMMITTED statement never calls the function. The check is a scalar
// subquery of no column, planned as a one-time filter evaluated once per statement: written as a
// bare condition, the function (volatile) became a filter on the receipts found, and a
// reservation of a new key, which finds none, was never checked.
func (f fences) readCommitted() string {
	return fmt.Sprintf(" AND (SELECT current_setting('transaction_isolation') = 'read committed' OR %s())", f.isolation)
}

func sealed(sealedOnly bool) string {
	if sealedOnly {
		return " AND f.sealed"
	}
	return ""
}

// The two phases of a fence that a statement checks (see fences.fenced). A statement that starts
// an attempt, or reads a receipt to start one (reserve, take over, DoInNewTx's final insert), is
// refused from the move's first step (draining): the move then waits for the attempts already
// running, and those go on and complete. A statement of an attempt already running (complete,
// release, extend) or a plain read is refused once the fence is sealed, right before the copy.
const (
	anyPhase   = false
	sealedOnly = true
)

// isTenantMoved reports whether err is the shard's refusal of a fenced tenant (tenant_moved's
// SQLSTATE TT001; shard.AsMoved reads which tenant from its detail).
func isTenantMoved(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "TT001"
}
