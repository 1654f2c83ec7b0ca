// Tenant fences: the clause every receipt statement of a sharded store carries, refusing a
// tenant moved away from this shard (migration 012, package shard's Move).

package engine

import (
	"fmt"
	"strings"
)

// fences are the names a store with Config.TenantFences checks its tenants' fences by, quoted:
// the tenant_fences table and the tenant_moved function (migration 012). The zero value is a
// store that does not check: its statements are exactly those of a store before fences.
type fences struct{ table, refuse string }

// fenced returns the clause (to follow a condition, "AND …") that refuses the statement when
// tenant (an expression: $2, or a batch row's column) is fenced on this shard, in phase any
// (draining or sealed) or only once sealed; "" for a store without fences. Race: a move that
// fences the tenant after this statement's snapshot is not seen here; the move waits for every
// transaction that holds a lock on the receipts table when its fence commits (Move's barrier),
// and a statement takes that lock before its snapshot, so the move copies nothing such a
// statement has not yet written. The subquery finds a row only for a fenced tenant (one probe of
// the table's primary key, a table of one row per tenant that ever moved away), and only then
// calls tenant_moved, which raises SQLSTATE TT001: the statement and its transaction fail, and
// the caller (shard.Register) looks the route up again. A subquery without the batch's columns
// is planned as a one-time filter, evaluated once per statement whether or not a row matches.
func (f fences) fenced(tenant string, sealedOnly bool) string {
	if f.table == "" {
		return ""
	}
	sealed := ""
	if sealedOnly {
		sealed = " AND f.sealed"
	}
	return fmt.Sprintf(" AND (SELECT %s(f.tenant, f.moved_to) FROM %s AS f WHERE f.tenant = %s%s) IS NULL", f.refuse, f.table, tenant, sealed)
}

// where is fenced as a WHERE clause of its own, on a line of its own; "" without fences.
func (f fences) where(tenant string, sealedOnly bool) string {
	c := f.fenced(tenant, sealedOnly)
	if c == "" {
		return ""
	}
	return "\n\tWHERE" + strings.TrimPrefix(c, " AND")
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
