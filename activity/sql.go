package activity

import "fmt"

// statements holds the receipt SQL rendered for one table. Every value is a bind parameter; the
// table name was quoted with pgx.Identifier.Sanitize. Parameters $1–$4 are always the key:
// namespace, tenant, operation, id.
type statements struct {
	reserve, reserveAsync, read, takeOver, complete, completeBatch, release, extend, insertFinal, purge string
}

// receiptColumns is what every read returns; scanReceipt reads them in this order.
const receiptColumns = `fence, fingerprint, fingerprint_version, state, result, error_type, error_message,
	(extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint, effect_possible`

func newStatements(table string) statements {
	return statements{
		reserve:      reserve(table, "true"),
		reserveAsync: reserve(table, "set_config('synchronous_commit', 'off', true) IS NOT NULL"),

		read: fmt.Sprintf(`SELECT false, %[2]s FROM %[1]s WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)`,
			table, receiptColumns),

		// takeOver claims a pending receipt whose lease has ended. Race: two attempts may see the
		// same ended lease; the fence = $5 condition lets exactly one of them win, and the
		// loser's fence no longer matches for complete or release.
		takeOver: fmt.Sprintf(`
UPDATE %[1]s SET fence = fence + 1, attempts = attempts + 1, effect_possible = true,
	lease_expires_at = now() + $6::bigint * interval '1 microsecond',
	expires_at = now() + $6::bigint * interval '1 microsecond' + $7::bigint * interval '1 microsecond',
	updated_at = now()
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)
	AND fence = $5 AND state = 'pending' AND lease_expires_at <= now()
RETURNING fence`, table),

		// complete records one attempt's outcome and returns its key. Race: an attempt that was
		// taken over (paused past its lease, or timed out while still running) still holds its
		// old fence; fence = $5 makes its late write touch no row, so it can never overwrite the
		// newer attempt's outcome. expires_at only grows, so that the update can be HOT.
		complete: fmt.Sprintf(`
UPDATE %[1]s SET state = $6, result = $7, error_type = $8, error_message = $9,
	lease_expires_at = NULL, completed_at = now(), updated_at = now(),
	expires_at = greatest(expires_at, now() + $10::bigint * interval '1 microsecond')
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) AND fence = $5 AND state = 'pending'
RETURNING namespace, tenant, operation, id`, table),

		// completeBatch is complete for many attempts at once, $1–$9 arrays with one element per
		// attempt and at most one per key. (A batch of one uses complete: a statement whose size
		// the planner cannot know is planned afresh on every execution.)
		completeBatch: fmt.Sprintf(`
UPDATE %[1]s AS r SET state = b.state, result = b.result, error_type = b.error_type,
	error_message = b.error_message, lease_expires_at = NULL, completed_at = now(), updated_at = now(),
	expires_at = greatest(r.expires_at, now() + $10::bigint * interval '1 microsecond')
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bytea[], $8::text[], $9::text[])
	AS b(namespace, tenant, operation, id, fence, state, result, error_type, error_message)
WHERE (r.namespace, r.tenant, r.operation, r.id) = (b.namespace, b.tenant, b.operation, b.id)
	AND r.fence = b.fence AND r.state = 'pending'
RETURNING r.namespace, r.tenant, r.operation, r.id`, table),

		// release ends the lease after a retryable error so that the next attempt takes over at
		// once, with the same token. Fenced like complete.
		release: fmt.Sprintf(`
UPDATE %[1]s SET lease_expires_at = now(), effect_possible = $6, updated_at = now()
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) AND fence = $5 AND state = 'pending'`, table),

		// extend moves the lease forward on a heartbeat. Fenced like complete.
		extend: fmt.Sprintf(`
UPDATE %[1]s SET lease_expires_at = now() + $6::bigint * interval '1 microsecond', updated_at = now()
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) AND fence = $5 AND state = 'pending'`, table),

		// insertFinal writes a finished receipt in one statement (DoTx). It is a plain INSERT on
		// purpose: when a concurrent duplicate committed first, the unique index fails it, which
		// aborts the transaction it was sent in, business writes included.
		insertFinal: fmt.Sprintf(`
INSERT INTO %[1]s (namespace, tenant, operation, id, token, fingerprint, fingerprint_version,
	state, result, error_type, error_message, completed_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now(), now() + $12::bigint * interval '1 microsecond')`, table),

		// purge deletes up to $1 expired receipts. A pending receipt is deleted only once its
		// lease has ended too, so a live attempt never loses its receipt. SKIP LOCKED lets
		// several purgers run without waiting on each other.
		purge: fmt.Sprintf(`
DELETE FROM %[1]s WHERE ctid IN (
	SELECT ctid FROM %[1]s
	WHERE expires_at <= now() AND (state <> 'pending' OR lease_expires_at <= now())
	LIMIT $1 FOR UPDATE SKIP LOCKED)`, table),
	}
}

// reserve inserts a pending receipt, or returns the one already there, in one round trip. It
// looks the key up first and attempts the INSERT only when that found nothing, so that a replay
// costs one index lookup and writes nothing. Race: under READ COMMITTED a receipt committed by a
// concurrent attempt after this statement's snapshot is invisible to the lookup and makes the
// INSERT do nothing, so no row comes back; the caller then reads again in a new statement.
//
// condition guards the INSERT as well. reserveAsync uses it to switch synchronous_commit off for
// the statement's own transaction (set_config's is_local), which the server reads when it
// commits: the reservation then commits without waiting for its WAL flush. See
// Store.reserveStatement for when that is safe.
func reserve(table, condition string) string {
	return fmt.Sprintf(`
WITH existing AS (
	SELECT %[2]s FROM %[1]s WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)
), inserted AS (
	INSERT INTO %[1]s (namespace, tenant, operation, id, token, fingerprint, fingerprint_version,
		state, lease_expires_at, expires_at)
	SELECT $1, $2, $3, $4, $5, $6, $7, 'pending',
		now() + $8::bigint * interval '1 microsecond',
		now() + $8::bigint * interval '1 microsecond' + $9::bigint * interval '1 microsecond'
	WHERE NOT EXISTS (SELECT FROM existing) AND %[3]s
	ON CONFLICT DO NOTHING
	RETURNING fence
)
SELECT true, fence, NULL::bytea, NULL::smallint, NULL::text, NULL::bytea, NULL::text, NULL::text, NULL::bigint, true
FROM inserted
UNION ALL
SELECT false, existing.* FROM existing`, table, receiptColumns, condition)
}
