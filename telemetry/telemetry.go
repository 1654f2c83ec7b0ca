package telemetry

// Counters of receipts, sent to the activity's Temporal metrics handler, each tagged with
// MetricTagOperation (and "namespace" by the SDK). Outside an activity they go nowhere.
const (
	// ReceiptReserved counts first executions: an attempt reserved its key (or, on the
	// transactional paths, committed its receipt with its writes).
	ReceiptReserved = "tempotent_receipt_reserved"
	// ReceiptReplayed counts finished receipts replayed: the recorded result or failure
	// returned, nothing called.
	ReceiptReplayed = "tempotent_receipt_replayed"
	// ReceiptMismatched counts calls refused because their key was used with another request.
	ReceiptMismatched = "tempotent_receipt_mismatched"
	// ReceiptInProgress counts duplicates that found another attempt holding the key (or waiting
	// out the downstream's settle time) and were told to retry.
	ReceiptInProgress = "tempotent_receipt_in_progress"
	// ReceiptTakenOver counts attempts that took over a receipt whose lease had ended.
	ReceiptTakenOver = "tempotent_receipt_taken_over"
	// ReceiptFencedOut counts stale attempts whose write was refused because another attempt
	// had taken their receipt over.
	ReceiptFencedOut = "tempotent_receipt_fenced_out"
)

// Spans of the receipt steps, started on the store's Config.Tracer as children of the span in the
// activity's context and named "<step>:<operation>" by the SDK's convention.
const (
	// SpanReserve is the reserve (or takeover) round trip.
	SpanReserve = "tempotent.Reserve"
	// SpanReplay is a finished receipt's result decoded and returned.
	SpanReplay = "tempotent.Replay"
	// SpanCall is the protected function; its own spans are children of this one.
	SpanCall = "tempotent.Call"
	// SpanReconcile is Reconcile asking the downstream what an earlier attempt did.
	SpanReconcile = "tempotent.Reconcile"
	// SpanComplete is the outcome recorded (or the lease released).
	SpanComplete = "tempotent.Complete"
)

// Tags of the receipt spans: the token and the operation only, never the key, which may hold
// customer data, nor any payload.
const (
	// TagToken is the receipt's token.
	TagToken = "tempotent.token"
	// TagOperation is the key's operation.
	TagOperation = "tempotent.operation"
)

// Tags of the metrics.
const (
	// MetricTagOperation tags the receipt counters with the key's operation.
	MetricTagOperation = "operation"
	// MetricTagConsumer tags the inbox counters with the consumer (inbox.Config.Consumer).
	MetricTagConsumer = "consumer"
	// MetricTagSource tags the webhook counters with the source (webhook.HandlerConfig.Source).
	MetricTagSource = "source"
	// MetricTagReason tags WebhookRefused with why the delivery was refused.
	MetricTagReason = "reason"
)

// Metrics of the outbox dispatcher, sent to outbox.DispatcherConfig.Metrics.
const (
	// OutboxDelivered counts messages marked delivered.
	OutboxDelivered = "tempotent_outbox_delivered"
	// OutboxRetried counts failed attempts that will be retried.
	OutboxRetried = "tempotent_outbox_retried"
	// OutboxDead counts messages parked as dead.
	OutboxDead = "tempotent_outbox_dead"
	// OutboxLostClaim counts marks refused because the claim had ended.
	OutboxLostClaim = "tempotent_outbox_lost_claim"
	// OutboxHandedBack counts claimed messages handed back unpublished, no attempt counted.
	OutboxHandedBack = "tempotent_outbox_handed_back"
	// OutboxPruned counts delivered messages pruned past their retention.
	OutboxPruned = "tempotent_outbox_pruned"
	// OutboxBacklog is the gauge of pending messages.
	OutboxBacklog = "tempotent_outbox_backlog"
	// OutboxOldestAge is the gauge of the oldest pending message's age, in seconds.
	OutboxOldestAge = "tempotent_outbox_oldest_seconds"
	// OutboxDeadRows is the gauge of dead messages waiting for an operator.
	OutboxDeadRows = "tempotent_outbox_dead_rows"
)

// Counters of the inbox, sent to inbox.Config.Metrics with MetricTagConsumer.
const (
	// InboxProcessed counts messages that ran and committed.
	InboxProcessed = "tempotent_inbox_processed"
	// InboxDuplicate counts messages processed before, acknowledged without running.
	InboxDuplicate = "tempotent_inbox_duplicate"
	// InboxInProgress counts concurrent duplicates that gave up waiting.
	InboxInProgress = "tempotent_inbox_in_progress"
	// InboxMismatched counts processed IDs that came again with another payload.
	InboxMismatched = "tempotent_inbox_mismatched"
	// InboxPurged counts the inbox records, of every consumer and webhook source, that the
	// worker's purger deleted past their retention (untagged; sent to the receipts' handler).
	InboxPurged = "tempotent_inbox_purged"
)

// Counters of the webhook handler, sent to webhook.HandlerConfig.Metrics with MetricTagSource.
const (
	// WebhookAccepted counts new deliveries, stored.
	WebhookAccepted = "tempotent_webhook_accepted"
	// WebhookDuplicate counts deliveries seen before, answered 2xx, nothing stored.
	WebhookDuplicate = "tempotent_webhook_duplicate"
	// WebhookRefused counts deliveries answered 4xx: forged, stale, oversized, malformed
	// (tagged with MetricTagReason).
	WebhookRefused = "tempotent_webhook_refused"
	// WebhookFailed counts deliveries answered 5xx: the database did not take them, and the
	// provider retries.
	WebhookFailed = "tempotent_webhook_failed"
)

// Metrics of the receipts as a whole, sent to the handler of the operator.Client that purges
// them (the worker gives it activity.Config.MetricsHandler), after each purge.
const (
	// ReceiptsPurged counts the receipts the worker's purger deleted.
	ReceiptsPurged = "tempotent_receipts_purged"
	// PurgeFailed counts the worker's purge rounds that failed (the next round retries): while
	// they fail, the gauges below keep the values of the last round that worked.
	PurgeFailed = "tempotent_purge_failed"
	// ReceiptsUnresolved is the gauge of every unresolved receipt, within its retention or past it:
	// each waits for a retry's reconcile or for a person.
	ReceiptsUnresolved = "tempotent_receipts_unresolved"
	// ReceiptsUnresolvedOldest is how long, in seconds, the longest-waiting unresolved receipt has
	// waited: minutes are a retry between attempts, an hour is a person's job.
	ReceiptsUnresolvedOldest = "tempotent_receipts_unresolved_oldest_seconds"
	// ReceiptsUnresolvedHeld is the gauge of unresolved receipts past their retention, which
	// purging keeps.
	ReceiptsUnresolvedHeld = "tempotent_receipts_unresolved_held"
)

// Metrics returns the name of every metric the toolkit emits, counters and gauges, in the order
// this package declares them: for dashboards, and for alert rules' tests that every name they
// use exists.
func Metrics() []string {
	return []string{
		ReceiptReserved, ReceiptReplayed, ReceiptMismatched, ReceiptInProgress, ReceiptTakenOver, ReceiptFencedOut,
		ReceiptsPurged, PurgeFailed, ReceiptsUnresolved, ReceiptsUnresolvedOldest, ReceiptsUnresolvedHeld,
		OutboxDelivered, OutboxRetried, OutboxDead, OutboxLostClaim, OutboxHandedBack, OutboxPruned,
		OutboxBacklog, OutboxOldestAge, OutboxDeadRows,
		InboxProcessed, InboxDuplicate, InboxInProgress, InboxMismatched, InboxPurged,
		WebhookAccepted, WebhookDuplicate, WebhookRefused, WebhookFailed,
	}
}
