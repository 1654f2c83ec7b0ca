// Package inbox lets a consumer process each message once, although messages arrive at least
// once: the record that a message was processed and the consumer's own writes commit in one
// transaction, so either both happened or neither did.
//
//	shipper, _ := inbox.New(pool, inbox.Config{Consumer: "shipment-notifier"})
//	ran, err := shipper.Process(ctx, inbox.Message{ID: msgID, Payload: body}, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "INSERT INTO shipments ...")
//		return err
//	})
//
// A duplicate after success is acknowledged without running (ran is false). A duplicate that
// arrives while the first delivery is still processing waits for it (Config.LockTimeout) and is
// then acknowledged, or, if the first one rolls back, runs in its place; past the timeout it gets
// a retryable InProgressError. The same ID with another payload is ErrMismatch. Claim does the
// same inside a transaction the consumer already holds.
//
// The inbox does not order messages. For events that arrive out of order (a provider's
// webhooks), Newer, called in the same transaction, records per object the newest version
// applied and reports whether this event's version is newer: apply it only then, so that a
// late, older event does not undo a newer one.
//
// The inbox shares the receipts' conventions: tempotent's schema and migrations
// (migrate.Up creates its table), the database's clock, errors typed for Temporal (ErrType
// constants), and metrics through a Temporal metrics handler. Records are kept for
// Config.Retention (Purge deletes older ones): it must exceed the producer's redelivery horizon,
// or a message redelivered after its record was purged runs again. A worker started with package
// worker purges every consumer's records itself, after worker.Config.InboxRetention, which must
// be at least the longest Retention of the schema's consumers.
package inbox
