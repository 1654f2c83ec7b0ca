// Package outbox is tempotent's transactional outbox: a message is put in the same transaction
// as the business change that it announces, and a Dispatcher delivers it afterwards, at least
// once, so that "the order was reserved" is never published for a reservation that rolled back,
// and never lost for one that committed.
//
//	out, _ := outbox.New(pool, nil) // the receipts' schema; migrate.Up creates the table
//	_, err := activity.DoInNewTx(ctx, store, call, func(ctx context.Context, tx pgx.Tx) (Reservation, error) {
//		// ... the business change, in tx ...
//		return r, out.Put(ctx, tx, outbox.Message{Topic: "order.reserved", OrderingKey: orderID, Payload: body})
//	})
//
//	d, _ := outbox.NewDispatcher(out, &outbox.HTTPPublisher{URL: "https://shipping.example/events"}, nil)
//	go d.Run(ctx)
//
// # Message IDs
//
// Every message has an ID that consumers deduplicate on (an inbox.Inbox does). Inside a receipt
// (activity.Do, DoInNewTx, DoInTx) Put derives it from the receipt's token, the topic and the
// ordering key, so every attempt of one intent puts the same message; elsewhere give one that a
// retried transaction gives again. A second Put of an ID with the same content does nothing; with
// other content it fails with ErrMismatch.
//
// # Delivery
//
// Dispatchers claim batches with FOR UPDATE SKIP LOCKED under a lease, counting the attempt at
// claim, publish them through a Publisher, and mark each one delivered, retried after a backoff
// (exponential, with jitter), or dead after MaxAttempts or a Permanent error. A publish starts
// only while the claim's lease can cover it and its mark; the part of a batch that a slow
// receiver leaves no time for is handed back unpublished, its attempt taken back, and so is the
// rest of a batch when the dispatcher is stopped (see DispatcherConfig.ShutdownGrace). Any number
// of dispatchers share an outbox; a message is never published by two of them at once while
// their leases hold (see Dispatcher). A dispatcher sends each batch's marks with the claim of the
// next batch, in one round trip and one commit per batch (Dispatcher.Drain), and a claim rewrites
// its rows in place on their page without touching an index (the table keeps room for it). They
// wake on Put's NOTIFY, through one LISTEN connection per pool outside it, poll as a fallback, and
// prune delivered messages after the outbox's retention, between batches while a backlog of them
// waits. Messages with an OrderingKey are delivered one at a time per key in commit order; a
// dead one holds its key until it is requeued or discarded.
//
// Delivery is at least once: a dispatcher that dies after publishing and before marking
// publishes again after the lease. Publishers pass the message ID on so that the receiver absorbs
// the repeat: HTTPPublisher as the Idempotency-Key, TemporalPublisher as a workflow ID or an
// update ID, which Temporal deduplicates itself, or in a Signal, which the receiving workflow
// deduplicates with a SignalDedup.
//
// # Operating it
//
// Stats gives the backlog, the oldest pending message's age and the dead count (also reported as
// gauges by running dispatchers, see the Metric constants). List and Get show what is stuck;
// RequeueMessage and DiscardMessage settle a dead message, RequeueDead and DiscardDead those a
// ListFilter selects, each recording who and why (Action) in the audit log in the statement that
// makes the change. The tempotent command does the same: tempotent outbox list, show, requeue,
// discard. The worker package runs a dispatcher inside a worker (worker.Env.Dispatch).
package outbox
