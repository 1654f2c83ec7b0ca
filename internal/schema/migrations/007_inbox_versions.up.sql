-- Order-aware consumers (inbox.Inbox.Newer): per consumer and object, the newest version of the
-- object that the consumer applied, so that an event older than it (events arrive out of order)
-- is skipped instead of undoing a newer one.
-- {{schema}} is replaced by the quoted schema name.
CREATE TABLE {{schema}}.inbox_versions (
    consumer   text        NOT NULL,
    object_id  text        NOT NULL,
    -- Only ever raised, in the consumer's own transaction: Newer's upsert updates the row only
    -- for a strictly greater version.
    version    bigint      NOT NULL CHECK (version > 0),
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, object_id)
);
