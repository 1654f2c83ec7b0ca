// Command tempotent is the operator's tool for tempotent's receipts: find them, read them, settle
// an outcome nobody knows, run again one that failed once its cause is fixed, purge, count, migrate, and check a deployment's health — without SQL
// against the receipts table. It also shows what is stuck in the outbox and settles it (requeue,
// discard), and counts what the inbox and the webhook intakes recorded.
//
//	go install github.com/tempotent/tempotent/cmd/tempotent@latest
//	go run github.com/tempotent/tempotent/cmd/tempotent@latest receipts list --state unresolved
//
// It is configured like the worker: DATABASE_URL (or --database-url; empty means
// postgres://postgres@127.0.0.1:5432/postgres) and TEMPOTENT_SCHEMA (or --schema; default
// tempotent).
//
// Commands:
//
//	receipts list       receipts, oldest first, filtered by state, tenant, operation, workflow, age; paged
//	receipts show       every field of one receipt (by token or key), or of a workflow's receipts
//	receipts resolve    settle an unknown outcome: --applied --result JSON, or --not-applied
//	receipts rearm      run a receipt that failed for good again once its cause is fixed (a saga's compensation)
//	receipts partition  partition receipts by day, so that purge drops days instead of deleting rows
//	purge               delete receipts past their retention, or drop whole days when partitioned (never an unresolved one)
//	outbox list         outbox messages (default pending and dead), by state, topic, key, error text, age; paged
//	outbox show         every field of one message, its headers, its audit records; --payload prints the payload, escaped
//	outbox requeue      deliver a dead message again (or --all-dead matching filters, up to --limit); audited
//	outbox discard      delete a dead message undelivered (or --all-dead matching filters); audited
//	inbox               inbox records per consumer (count, oldest, newest, within --window), or one --consumer's
//	webhooks            per source, deliveries accepted, duplicate, refused (by reason) and failed within --window, or one --source's
//	audit               the audit log, newest first: who did what, to which receipt or message, and why
//	stats               counts by operation and state, the oldest unresolved receipt
//	migrate             apply the migrations, or --print their SQL for your own tool
//	doctor              schema version, indexes, clock skew, retention against key memory, the purger's
//	                    last run; exit 4 when unresolved receipts, dead messages, an old pending one or
//	                    the time since a purge last succeeded cross --max-… limits
//	ui                  the web console on 127.0.0.1:8080 (receipts, outbox, audit; act with a reason); --users FILE
//
// Every command takes --help. list, show, stats, inbox and webhooks take --json for scripts.
// Text that producers, downstreams or webhook senders wrote (message IDs, topics, errors,
// headers, payloads) is printed Go-quoted when it holds anything a terminal would act on, and
// --json escapes such characters as well. Flags and arguments
// come in any order; a token that begins with "-" (one in 64 does) is still a token, and "--"
// ends the flags.
//
// Exit codes:
//
//	0  done
//	1  the command failed: the database did not answer, or a statement failed
//	2  the command line is wrong (unknown command or flag, missing argument)
//	3  refused: no receipt under that token, or a receipt that is not unresolved (resolve) or
//	   has not failed (rearm); no outbox message with that ID, or one that is not dead
//	   (outbox requeue, discard)
//	4  doctor found a problem, or more waiting for a person than its --max-… flags allow
//
// Install it (go install) to run it from scripts and cron: go run exits 1 whatever the
// command's own exit code.
package main
