-- Messages: the transactional outbox and the consumers' inbox (DESIGN.md, "Messages").
-- {{schema}} is replaced by the quoted schema name.

-- One row per message put in a business transaction. The dispatcher claims pending rows under a
-- lease, counting the attempt at claim time, and marks them delivered or dead; delivered rows
-- are pruned after the outbox's retention.
CREATE TABLE {{schema}}.outbox (
    -- Insertion order. For ordered messages it is also commit order per ordering key: Put
    -- serialises the transactions that publish on one key (see outbox.Put).
    seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The message ID that consumers deduplicate on: stable across retries of the transaction
    -- that put it, unique across messages.
    id           text        NOT NULL CONSTRAINT outbox_id_key UNIQUE,
    topic        text        NOT NULL,
    -- Messages with the same ordering key are delivered one at a time, in seq order; NULL for
    -- unordered messages.
    ordering_key text,
    payload      bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    -- SHA-256 of topic, ordering key, payload and headers: a second Put of the same ID must
    -- carry the same message.
    digest       bytea       NOT NULL,
    state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    -- Claims so far, counted when claimed, so that a message that kills its dispatcher still
    -- reaches the dead state.
    attempts     integer     NOT NULL DEFAULT 0,
    -- Not claimed before this time: the backoff after a failed attempt.
    available_at timestamptz NOT NULL DEFAULT now(),
    -- The current claim: no other dispatcher claims the row before lease_until, and only the
    -- claimer (claimed_by, at this attempts count) may mark it.
    lease_until  timestamptz,
    claimed_by   text,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz
);

-- Claim order among pending rows, and the backlog and dead counts of Stats. Dead rows stay in it
-- until an operator requeues or discards them; delivered rows leave it.
CREATE INDEX outbox_undelivered_idx ON {{schema}}.outbox (seq) WHERE state <> 'delivered';
-- "Is an earlier message of this key not yet delivered?" for ordered claims.
CREATE INDEX outbox_ordering_idx ON {{schema}}.outbox (ordering_key, seq)
    WHERE state <> 'delivered' AND ordering_key IS NOT NULL;
-- Pruning of delivered rows past retention.
CREATE INDEX outbox_delivered_idx ON {{schema}}.outbox (delivered_at) WHERE state = 'delivered';

-- One row per (consumer, message) processed, written in the consumer's own transaction.
CREATE TABLE {{schema}}.inbox (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    -- SHA-256 of the message's payload when the consumer gave one: the same ID with another
    -- payload is refused instead of acknowledged.
    digest       bytea,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- Pruning past retention.
CREATE INDEX inbox_processed_idx ON {{schema}}.inbox (processed_at);
