// Package natsjs publishes tempotent's outbox messages to a NATS JetStream stream, which drops a
// repeated delivery of one message by its ID: a Publisher for outbox.Dispatcher.
//
// It is a module of its own (github.com/tempotent/tempotent/outbox/natsjs) so that the toolkit's
// go.mod does not carry nats.go.
//
//	nc, _ := nats.Connect(url)
//	js, _ := jetstream.New(nc)
//	pub, err := natsjs.New(ctx, js, "ORDERS", &natsjs.Config{MinDuplicateWindow: natsjs.RetryHorizon(&dcfg)})
//	d, _ := outbox.NewDispatcher(out, pub, &dcfg)
//	go d.Run(ctx)
//
// Each message is published on the subject of its topic (or Config.Subject's), with its ID in
// the Nats-Msg-Id header, its topic, ordering key and attempt in the Tempotent- headers, and its
// own headers; the publish waits for the stream's ack.
//
// # Configuring the stream
//
// Create the stream before the dispatcher starts; the publisher does not create or edit it. It
// needs:
//
//   - Subjects that take every subject the messages are published on: with the default mapping,
//     the topics ("order.*" takes "order.placed" and "order.shipped"). A subject no stream takes,
//     or that another stream takes, is a permanent failure: the message is parked as dead for an
//     operator, who fixes the stream and requeues it (outbox.Outbox.Requeue).
//   - A Duplicates window longer than the dispatcher's retry horizon, RetryHorizon: the dispatcher's
//     Lease plus BackoffMax plus Poll (5m31s with the dispatcher's defaults; JetStream's default
//     window is 2m, too short). New reads the stream's info and refuses a shorter window with a
//     *WindowError; Config.MinDuplicateWindow sets what it requires.
//
// For example, with the nats CLI:
//
//	nats stream add ORDERS --subjects 'order.>' --dupe-window 6m --storage file
//
// # What deduplication covers
//
// Delivery from the outbox is at least once: a dispatcher that dies after a publish and before
// recording it, or whose ack was lost, publishes the message again. The stream drops the second
// publish only within its Duplicates window, counted from when it stored the first; the
// publisher reports the duplicate's ack as delivered. Past the window, the stream stores it again.
// The window covers one retry: a retry that fails again adds up to BackoffMax each time, a dead
// message requeued by an operator may come back at any time, and a dispatcher process frozen
// (not dead) in a publish for longer than the window may store it after another's, so any of
// these can be stored twice.
// The server keeps the IDs of the window in memory and, after a restart, recovers them from the
// messages still stored: the ID of a message already removed (a work-queue stream's consumer
// acked it, a purge, a limit) is forgotten then. Consumers that must see a message once
// deduplicate on Nats-Msg-Id too (an inbox.Inbox does).
//
// Messages with an OrderingKey reach the stream in the key's order: the dispatcher publishes a
// key's next message only once the one before is recorded delivered, and a repeated publish of an
// earlier message is dropped rather than stored after a later one.
package natsjs
