// Package operator is what the person on call does with tempotent's receipts, without SQL: list
// them and read one (Client.Receipts, Client.Receipt), settle an outcome nobody knows
// (Client.Resolve), run again an intent that failed for good once its cause is fixed
// (Client.Rearm), read the audit log of those actions (Client.Audit), count receipts
// (Client.Stats, Client.CountSince, Client.Unresolved), forget them once their retention has
// passed (Client.Purge), partition their table by day (Client.Partition), record and read the
// last run of each maintenance task, such as the purger's (Client.RecordMaintenanceRun,
// Client.MaintenanceRuns, Client.LastRun), and check the deployment as doctor does
// (Client.Diagnose). It also reads what each webhook source's intake answered, from the tallies
// its handlers write (Client.WebhookTallies), and purges those (Client.PurgeWebhookTallies).
//
// It is for tools that act on receipts from outside an activity: the tempotent command
// (cmd/tempotent), the worker's purger (worker.Env.PurgeRound), a console to come, or a script of
// your own. Activities never need it: the activity package writes and replays receipts on its
// own, and this package shares nothing with it but the tables, so a Client may run in any
// process, beside any number of workers.
//
// A Client is configured like the workers' store, where both have a setting: the same Schema,
// Retention, DataConverter, Codecs and MaxPayloadBytes, so that it reads results as the workers
// sealed them and records a resolved result as they would have:
//
//	op, err := operator.NewClient(pool, operator.Config{Schema: "tempotent", Codecs: codecs})
//	page, err := op.Receipts(ctx, operator.Filter{State: operator.FilterUnresolved})
//
// What is safe: reading (Receipts, Receipt, Audit, Stats, CountSince, Unresolved,
// MaintenanceRuns) changes nothing, though Stats and most listings read the whole table (run them off peak, or against a
// replica). Purge never deletes an unresolved receipt nor one whose attempt may still run, and
// may run beside the workers and other purgers. Partition converts the table in place while
// workers run. Resolve and Rearm change what the next attempt of an activity does: Resolve only
// a receipt whose outcome is unknown (Receipt.Unresolved), Rearm only one that failed for good;
// each refuses anything else (ErrNotUnresolved, ErrNotFailed), races an attempt that takes the
// receipt over safely (one of them wins), and records who, when and why in the audit log. What
// neither can check is what the downstream did: find that out under the receipt's token before
// you resolve.
package operator
