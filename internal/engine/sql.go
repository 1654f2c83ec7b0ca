package engine

import "fmt"

// statements holds the receipt SQL rendered for one table. Every value is a bind parameter; the
// table name was quoted with pgx.Identifier.Sanitize. Parameters $1–$4 are always the key:
// namespace, tenant, operation, id.
//
// An attempt's writes (complete, release, extend) match on its reservation, a random 128-bit
// identity that the client generates for each reservation and takeover, never on the fence
// number alone: a fence starts again at 1 when a reservation is lost (Postgres crashed before
// an asynchronous commit was flushed) or its row was deleted, and a stale attempt still holding
// that number must not write to, release or extend the new row. The fence stays as a count of
// takeovers.
//
// A statement that finds a row and then updates or deletes it by its physical address matches
// (tableoid, ctid), never ctid alone: on a partitioned table (Store.Partition) the same ctid
// names a row in every partition.
type statements struct {
	settings, settingsAsync, txSettings, completeBatchSettings                                    string
	reserveBatchSettings, reserveBatchSettingsAsync                                               string
	reserve, reserveBatch, read, readItems, takeOver, complete, completeSkipLocked, completeBatch string
	readTakeOver, release, extend, insertFinal                                                    string
}

// receiptColumns is what every read returns; scanReceipt reads them in this order. The lease
// column is the time left on the lease in microseconds, negative once it has ended (how long
// ago); age is how long ago the receipt was first reserved, which is when its token was first
// sent.
//
// The last two are the token of a completed compensation of the receipt's step and when it
// completed, from compensatedBy's join (NULL when there is none, and in readItems, whose items
// are never a compensation's forward step).
const receiptColumns = `fence, reservation, fingerprint, fingerprint_version, state, result, failure, error_type, error_message,
	(extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint, effect_possible,
	(extract(epoch FROM now() - created_at) * 1000000)::bigint, comp.compensation_token, comp.compensated_at`

// compensatedBy joins a receipt r (%[1]s is the table) to a completed compensation of its step:
// a receipt whose compensates column holds r's token. A forward step whose compensation
// completed must not be run again, nor replayed as if it stood, by a workflow reset to before
// it (workflow-scope keys survive a reset), see CompensatedError. It is part of every statement
// that reads a receipt by its key, so that the answer costs no round trip of its own; it runs
// only for a receipt found, never on a first execution's insert, and reaches the compensation
// through receipts_compensates_idx (partial: only compensations have compensates set), in
// every partition of a partitioned table. LIMIT 1: a step has one compensation, but nothing in
// the schema says so.
const compensatedBy = `LEFT JOIN LATERAL (
	SELECT c.token AS compensation_token, c.completed_at AS compensated_at FROM %[1]s AS c
	WHERE c.compensates = r.token AND c.state = 'completed' LIMIT 1) AS comp ON true`

// stillPending is state = 'pending' for the statements that find their row by its key, written
// so that the planner cannot prove from it the unresolved index's predicate (state = 'pending'
// OR …), and so cannot choose that index. Once ANALYZE has seen few pending receipts it took
// that index for every completion, release, heartbeat and takeover, and scanned it whole for the
// one row the key finds in a few pages: every receipt pending now and, until the next vacuum, a
// dead entry for every receipt completed since the last one, so the cost of a completion grew
// with the load. Measured with 120,000 receipts completed since the last vacuum: a batch of 8
// completions read 2,700 buffers in 10–14 ms through that index, and 134 in 0.4 ms through the
// key. TestKeyedStatementsUseTheKey keeps every keyed statement on the key's index.
const stillPending = `(state || '') = 'pending'`

// genericPlan, the last setting of the batch statements' settings, has Postgres run the batch
// statement that follows on its generic plan: made once per connection, not planned again for
// each batch. Left to itself, Postgres plans reserveBatch and completeBatch afresh at every
// execution (their generic plans' estimates, made for arrays of unknown length, never cost less
// than a custom plan), and planning was half of what a reservation of six attempts cost the
// server: 0.20 ms planning against 0.22 ms executing (EXPLAIN ANALYZE). Measured on one
// connection, batches of six, the two kinds interleaved: a reservation's round trip took
// 340–420 µs on its generic plan against 620–780 µs planned each time, a completion's 450–820
// against 670–1270. The hazard of a generic plan, made while the table was new and kept after
// it filled, is closed for both statements (each row is reached by its key however the table
// looked: see reserveBatch and completeBatchSettings), and TestKeyedPlansMadeOnAFreshTable
// checks their generic plans made on a new table; TestBatchStatementsRunOnTheirGenericPlans
// that the settings force them.
const genericPlan = `, set_config('plan_cache_mode', 'force_generic_plan', true)`

func newStatements(table string, f fences) statements {
	return statements{
		// settings go in the same round trip and implicit transaction as each receipt statement
		// (see Store.send), local to that transaction: a lock wait or a stuck statement fails
		// after the store's timeouts instead of holding an attempt, or a whole batch of
		// completions, until the activity's deadline. $1 and $2 are in milliseconds.
		settings: `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
		// settingsAsync also lets the transaction commit without waiting for its WAL flush; see
		// Store.reserveSettings for when that is safe.
		settingsAsync: `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
	set_config('synchronous_commit', 'off', true)`,

		// completeBatchSettings are settings with sequential scans priced out while
		// completeBatch is planned. Postgres keeps the generic plan it makes for a statement
		// until the table is next analyzed, and made while the table looked a few pages long (a
		// new table, the first minute of a deployment; a day's partition created ahead) that
		// plan found the batch's rows by reading the whole table into a hash, at every
		// completion until autovacuum came by. Without sequential scans it reaches each row by
		// its address, as it does on a table of any size. (reserveBatch needs no setting: its
		// lookup is a subquery the planner keeps apart, where the key's index always wins.)
		// TestKeyedPlansMadeOnAFreshTable.
		//
		// It also runs completeBatch on its generic plan (genericPlan).
		completeBatchSettings: `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
	set_config('enable_seqscan', 'off', true)` + genericPlan,
		// reserveBatchSettings and reserveBatchSettingsAsync are settings and settingsAsync for
		// reserveBatch, which they run on its generic plan (genericPlan).
		reserveBatchSettings: `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)` + genericPlan,
		reserveBatchSettingsAsync: `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
	set_config('synchronous_commit', 'off', true)` + genericPlan,

		// txSettings open a DoInNewTx transaction: its lock timeout, and how long it may sit idle
		// (the attempt's lease, in milliseconds) before the server ends it and frees its locks.
		txSettings: `SELECT set_config('lock_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)`,

		reserve:      reserve(table, f),
		reserveBatch: reserveBatch(table, f),

		read: fmt.Sprintf(`SELECT false, %[2]s FROM %[1]s AS r %[3]s
WHERE (r.namespace, r.tenant, r.operation, r.id) = ($1, $2, $3, $4)%[4]s`,
			table, receiptColumns, fmt.Sprintf(compensatedBy, table), f.fenced("$2", sealedOnly)),
		// readItems reads the finished receipts among a batch's items ($4, their IDs): ForEach's
		// one round trip for a whole batch. Each item is looked up by its whole key on its own,
		// in a subquery the planner keeps apart (OFFSET 0), as reserveBatch does. Written as
		// id = ANY($4), the IDs were a filter wherever the planner took the rest of the key to
		// match a row or so — on a table never analyzed (a new one; any after pg_upgrade), or on
		// a generic plan made while it was new — and the lookup read every receipt of the
		// operation. TestKeyedPlansMadeOnAFreshTable.
		//
		// It also returns, with a NULL ID, the completed compensation of the batch's own step
		// ($5, the batch's token), if there is one: items replayed as paid for a batch whose
		// compensation undid them would let a saga reset to before it go on (see
		// CompensatedError). An item's own receipt is never a compensation's forward step.
		readItems: fmt.Sprintf(`SELECT item.id, false, r.* FROM unnest($4::text[]) AS item(id) CROSS JOIN LATERAL (
	SELECT %[2]s FROM %[1]s AS r CROSS JOIN (SELECT NULL::text AS compensation_token, NULL::timestamptz AS compensated_at) AS comp
	WHERE (r.namespace, r.tenant, r.operation, r.id) = ($1, $2, $3, item.id) AND r.state IN ('completed', 'failed')%[3]s
	OFFSET 0) AS r
UNION ALL
(SELECT NULL, false, 0::bigint, NULL::uuid, NULL::bytea, NULL::smallint, NULL::text, NULL::bytea, NULL::bytea, NULL::text, NULL::text,
	NULL::bigint, false, 0::bigint, c.token, c.completed_at
FROM %[1]s AS c WHERE c.compensates = $5 AND c.state = 'completed' LIMIT 1)`,
			table, receiptColumns, f.fenced("$2", sealedOnly)),

		// takeOver claims a pending receipt whose lease has ended, under a new reservation $6,
		// and returns the receipt's age as of the takeover, which decides whether the token may
		// still be sent (the downstream's key memory). Race: two attempts may see the same ended
		// lease; matching the reservation they saw ($5, NULL on receipts older than reservation
		// identities) lets exactly one of them win, and the loser's reservation matches nothing
		// afterwards.
		takeOver: fmt.Sprintf(`
UPDATE %[1]s SET reservation = $6, fence = fence + 1, attempts = attempts + 1, effect_possible = true,
	lease_expires_at = now() + $7::bigint * interval '1 microsecond',
	expires_at = now() + $7::bigint * interval '1 microsecond' + $8::bigint * interval '1 microsecond',
	updated_at = now()
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)
	AND reservation IS NOT DISTINCT FROM $5 AND %[2]s AND lease_expires_at <= now()%[3]s
RETURNING fence, (extract(epoch FROM now() - created_at) * 1000000)::bigint`, table, stillPending, f.fenced("$2", anyPhase)),

		// readTakeOver is read and takeOver in one statement, for the retry of a call that runs
		// again safely (a Batch activity's own receipt, Call.runsAgain), which more often finds
		// its receipt released than finished. It returns the receipt as read (cur), and, first,
		// the fence it took when it took the receipt over under the new reservation $5 (NULL
		// when it did not). It takes over only where Do would at once: a pending receipt whose
		// lease has ended, recorded under this very fingerprint ($8, $9), whose step has no
		// completed compensation, and, when $10 is false (a call with Reconcile), never: the
		// settle time is decided in Go. Anything else is answered from cur as read answers it.
		// Race: as takeOver, matching the reservation cur saw; an attempt that changed the row
		// after this statement's snapshot makes the update match nothing (the row is checked
		// again once its lock is free), and Do goes on from cur as from a read.
		readTakeOver: fmt.Sprintf(`
WITH cur AS (
	SELECT %[2]s FROM %[1]s AS r %[3]s
	WHERE (r.namespace, r.tenant, r.operation, r.id) = ($1, $2, $3, $4)%[4]s
), taken AS (
	UPDATE %[1]s AS r SET reservation = $5, fence = r.fence + 1, attempts = r.attempts + 1, effect_possible = true,
		lease_expires_at = now() + $6::bigint * interval '1 microsecond',
		expires_at = now() + $6::bigint * interval '1 microsecond' + $7::bigint * interval '1 microsecond',
		updated_at = now()
	FROM cur
	WHERE (r.namespace, r.tenant, r.operation, r.id) = ($1, $2, $3, $4)
		AND r.reservation IS NOT DISTINCT FROM cur.reservation AND (r.state || '') = 'pending' AND r.lease_expires_at <= now()
		AND r.fingerprint = $8 AND r.fingerprint_version = $9 AND cur.compensation_token IS NULL AND $10::boolean
	RETURNING r.fence
)
SELECT taken.fence, false, cur.* FROM cur LEFT JOIN taken ON true`, table, receiptColumns, fmt.Sprintf(compensatedBy, table),
			f.fenced("$2", anyPhase)),

		// complete records one attempt's outcome. Race: an attempt that was taken over (paused
		// past its lease, timed out while still running, or holding a reservation that was lost)
		// no longer matches the row's reservation, so its late write touches nothing. The
		// fingerprint must match too: a row reserved again for another request never takes this
		// request's result. expires_at only grows: a completion never shortens the retention a
		// takeover gave. (The update is not HOT, and cannot cheaply be: expires_at is indexed for
		// purge, and state is in the unresolved index's predicate.)
		complete: fmt.Sprintf(`
UPDATE %[1]s SET state = $8, result = $9, failure = $10, error_type = $11, error_message = $12,
	lease_expires_at = NULL, completed_at = now(), updated_at = now(),
	expires_at = greatest(expires_at, now() + $13::bigint * interval '1 microsecond')
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)
	AND reservation = $5 AND fingerprint = $6 AND fingerprint_version = $7 AND %[2]s%[3]s`, table, stillPending, f.fenced("$2", sealedOnly)),

		// completeSkipLocked is complete for the writer of a batch of one: a row locked
		// elsewhere is skipped rather than waited for, so that the completions queued behind it
		// do not wait either (see completions).
		completeSkipLocked: fmt.Sprintf(`
WITH target AS (
	SELECT tableoid, ctid FROM %[1]s
	WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4)
		AND reservation = $5 AND fingerprint = $6 AND fingerprint_version = $7 AND %[2]s%[3]s
	FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s AS r SET state = $8, result = $9, failure = $10, error_type = $11, error_message = $12,
	lease_expires_at = NULL, completed_at = now(), updated_at = now(),
	expires_at = greatest(r.expires_at, now() + $13::bigint * interval '1 microsecond')
FROM target WHERE r.tableoid = target.tableoid AND r.ctid = target.ctid`, table, stillPending, f.fenced("$2", sealedOnly)),

		// completeBatch is complete for many attempts at once: $1–$12 are arrays with one element
		// per attempt and at most one per key; it returns the reservations it completed. Rows
		// locked elsewhere are skipped, not waited for, so that one locked receipt never holds up
		// the other completions of the batch; the caller writes a skipped completion on its own
		// with complete, which tells a lock (a wait, then a write) from a fenced-out attempt
		// (no row). Each completion's row is looked up by its key on its own (the lateral join),
		// whatever the planner estimates of the batch or of the pending receipts. (A batch of one
		// uses completeSkipLocked, alone in its round trip.) With fences, a row of a sealed
		// tenant is left out (fences.skip) and comes back skipped: complete refuses it alone.
		completeBatch: fmt.Sprintf(`
WITH b AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::bytea[], $7::smallint[],
		$8::text[], $9::bytea[], $10::bytea[], $11::text[], $12::text[])
	AS b(namespace, tenant, operation, id, reservation, fingerprint, fingerprint_version,
		state, result, failure, error_type, error_message)%[3]s
), target AS (
	SELECT r.rel, r.tid, b.* FROM b CROSS JOIN LATERAL (
		SELECT tableoid AS rel, ctid AS tid FROM %[1]s AS r
		WHERE (r.namespace, r.tenant, r.operation, r.id) = (b.namespace, b.tenant, b.operation, b.id)
			AND r.reservation = b.reservation AND r.fingerprint = b.fingerprint
			AND r.fingerprint_version = b.fingerprint_version AND %[2]s
		FOR UPDATE SKIP LOCKED) AS r
)
UPDATE %[1]s AS r SET state = t.state, result = t.result, failure = t.failure, error_type = t.error_type,
	error_message = t.error_message, lease_expires_at = NULL, completed_at = now(), updated_at = now(),
	expires_at = greatest(r.expires_at, now() + $13::bigint * interval '1 microsecond')
FROM target AS t
WHERE r.tableoid = t.rel AND r.ctid = t.tid
RETURNING r.reservation`, table, stillPending, f.skip("b.tenant", sealedOnly)),

		// release ends the lease after a retryable error so that the next attempt takes over at
		// once, with the same token, and records whether an effect may have happened ($6).
		// Matched on the reservation like complete. It also replaces the reservation ($7, held by
		// no attempt). Race: an attempt that read the receipt before the release decided what to
		// do from the lease end and the effect_possible it saw (whether to wait for the settle
		// time, whether to ask the downstream); the new reservation makes its takeover match
		// nothing, and it reads again. The lease ends $8 µs ago: now for an attempt that may
		// have sent something, and for one that only asked the downstream (a failed reconcile)
		// when the attempt before it ended, so that the settle time is not counted again.
		release: fmt.Sprintf(`
UPDATE %[1]s SET reservation = $7, lease_expires_at = now() - $8::bigint * interval '1 microsecond',
	effect_possible = $6, updated_at = now()
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) AND reservation = $5 AND %[2]s%[3]s`, table, stillPending, f.fenced("$2", sealedOnly)),

		// extend moves the lease forward on a heartbeat. Matched on the reservation like
		// complete: an attempt that was taken over extends nothing, and learns so.
		extend: fmt.Sprintf(`
UPDATE %[1]s SET lease_expires_at = now() + $6::bigint * interval '1 microsecond', updated_at = now()
WHERE (namespace, tenant, operation, id) = ($1, $2, $3, $4) AND reservation = $5 AND %[2]s%[3]s`, table, stillPending, f.fenced("$2", sealedOnly)),

		// insertFinal writes a finished receipt in one statement (DoInNewTx, DoInTx). It is a plain INSERT on
		// purpose: when a concurrent duplicate committed first, the unique index fails it, which
		// aborts the transaction it was sent in, business writes included.
		// With fences it is an INSERT … SELECT, whose WHERE refuses a fenced tenant.
		insertFinal: insertFinal(table, f),
	}
}

func insertFinal(table string, f fences) string {
	const values = `$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now(), now() + $13::bigint * interval '1 microsecond',
	$14, $15, $16, $17, $18`
	rows := "VALUES (" + values + ")"
	if f.table != "" {
		rows = "SELECT " + values + f.where("$2", anyPhase)
	}
	return fmt.Sprintf(`
INSERT INTO %[1]s (namespace, tenant, operation, id, token, fingerprint, fingerprint_version,
	state, result, failure, error_type, error_message, completed_at, expires_at,
	workflow_id, run_id, activity_id, activity_type, compensates)
%[2]s`, table, rows)
}

// reserve inserts a pending receipt under reservation $8, with its origin ($11–$15), or returns the one already there, in
// one round trip. It looks the key up first and attempts the INSERT only when that found
// nothing, so that a replay costs one index lookup and writes nothing. Race: under READ
// COMMITTED a receipt committed by a concurrent attempt after this statement's snapshot is
// invisible to the lookup and makes the INSERT do nothing, so no row comes back; the caller then
// reads again in a new statement.
func reserve(table string, f fences) string {
	return fmt.Sprintf(`
WITH existing AS (
	SELECT %[2]s FROM %[1]s AS r %[3]s WHERE (r.namespace, r.tenant, r.operation, r.id) = ($1, $2, $3, $4)%[4]s
), inserted AS (
	INSERT INTO %[1]s (namespace, tenant, operation, id, token, fingerprint, fingerprint_version,
		state, reservation, lease_expires_at, expires_at,
		workflow_id, run_id, activity_id, activity_type, compensates)
	SELECT $1, $2, $3, $4, $5, $6, $7, 'pending', $8,
		now() + $9::bigint * interval '1 microsecond',
		now() + $9::bigint * interval '1 microsecond' + $10::bigint * interval '1 microsecond',
		$11, $12, $13, $14, $15
	WHERE NOT EXISTS (SELECT FROM existing)
	ON CONFLICT DO NOTHING
	RETURNING fence
)
SELECT true, fence, NULL::uuid, NULL::bytea, NULL::smallint, NULL::text, NULL::bytea, NULL::bytea, NULL::text, NULL::text,
	NULL::bigint, true, 0::bigint, NULL::text, NULL::timestamptz
FROM inserted
UNION ALL
SELECT false, existing.* FROM existing`, table, receiptColumns, fmt.Sprintf(compensatedBy, table), f.fenced("$2", anyPhase))
}

// reserveBatch is reserve for many attempts at once (see reservations): $1–$9 and $11–$15 are
// arrays with one element per attempt and at most one per key, $10 the retention. Each row it
// returns starts with the number of the attempt it answers (from 1): the receipt it inserted or
// the one it found, as reserve returns them. An attempt with no row met a receipt committed after
// the statement's snapshot, as in reserve. The rows are inserted in key order, so that two
// batches inserting the same keys in two processes wait on each other in the same order instead
// of deadlocking. Each attempt's receipt is looked up by its key on its own (the lateral join,
// OFFSET 0 keeping the planner from merging it into a join over the whole table): a plan made
// while the table looked small, which Postgres may keep long after (completeBatchSettings),
// would otherwise read all of it at every batch. With fences, a row of a fenced tenant is left
// out (fences.skip): it comes back with no row, and its caller reserves it alone, where reserve
// refuses it.
func reserveBatch(table string, f fences) string {
	return fmt.Sprintf(`
WITH b AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::smallint[],
		$8::uuid[], $9::bigint[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[]) WITH ORDINALITY
	AS b(namespace, tenant, operation, id, token, fingerprint, fingerprint_version, reservation, lease,
		workflow_id, run_id, activity_id, activity_type, compensates, n)%[4]s
), existing AS (
	SELECT b.n, false, e.* FROM b CROSS JOIN LATERAL (
		SELECT %[2]s FROM %[1]s AS r %[3]s
		WHERE (r.namespace, r.tenant, r.operation, r.id) = (b.namespace, b.tenant, b.operation, b.id)
		OFFSET 0) AS e
), inserted AS (
	INSERT INTO %[1]s (namespace, tenant, operation, id, token, fingerprint, fingerprint_version,
		state, reservation, lease_expires_at, expires_at,
		workflow_id, run_id, activity_id, activity_type, compensates)
	SELECT namespace, tenant, operation, id, token, fingerprint, fingerprint_version, 'pending', reservation,
		now() + lease * interval '1 microsecond',
		now() + lease * interval '1 microsecond' + $10::bigint * interval '1 microsecond',
		workflow_id, run_id, activity_id, activity_type, compensates
	FROM b WHERE NOT EXISTS (SELECT FROM existing WHERE existing.n = b.n)
	ORDER BY namespace, tenant, operation, id
	ON CONFLICT DO NOTHING
	RETURNING namespace, tenant, operation, id, fence
)
SELECT b.n, true, inserted.fence, NULL::uuid, NULL::bytea, NULL::smallint, NULL::text, NULL::bytea, NULL::bytea, NULL::text, NULL::text,
	NULL::bigint, true, 0::bigint, NULL::text, NULL::timestamptz
FROM inserted JOIN b USING (namespace, tenant, operation, id)
UNION ALL
SELECT existing.* FROM existing`, table, receiptColumns, fmt.Sprintf(compensatedBy, table), f.skip("b.tenant", anyPhase))
}
