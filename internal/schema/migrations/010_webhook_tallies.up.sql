-- Webhook tallies: how many deliveries each webhook source's intake (webhook.Handler) accepted,
-- answered as duplicates, refused (by the refusal's reason: signature, stale, oversized, …) and
-- failed to store, per minute, so that operators see what the metrics count without a metrics
-- stack (tempotent webhooks, the console). Handlers count in memory and add their counts here at
-- most once per flush interval, in one statement: a request never writes a row of its own, so
-- anonymous senders cannot make the database work. Reasons are the handler's own fixed set,
-- never the sender's text. Rows older than a week are deleted by the worker's purge
-- (operator.Client.PurgeWebhookTallies).
-- {{schema}} is replaced by the quoted schema name.
CREATE TABLE {{schema}}.webhook_tallies (
    -- The start of the minute the counts were flushed in, by the database's clock.
    minute  timestamptz NOT NULL,
    source  text        NOT NULL,
    outcome text        NOT NULL CHECK (outcome IN ('accepted', 'duplicate', 'refused', 'failed')),
    -- Why a delivery was refused or failed; '' for accepted and duplicate ones.
    reason  text        NOT NULL DEFAULT '',
    count   bigint      NOT NULL CHECK (count > 0),
    -- minute first: the readers and the purge select by time.
    PRIMARY KEY (minute, source, outcome, reason)
);
