-- The audit log: one row for every action an operator takes (activity.Store's Resolve and Rearm,
-- the tempotent command's "receipts resolve" and "receipts rearm"), written in the same statement
-- as the change it records, so that no change goes unrecorded and no record names a change that
-- was refused. Rows are only ever inserted; nothing in tempotent deletes them (Purge does not).
-- {{schema}} is replaced by the quoted schema name.
CREATE TABLE {{schema}}.audit (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    -- who: the person or system that acted, as it named itself (Resolution.By, Rearming.By).
    actor  text        NOT NULL,
    -- what: 'resolve' or 'rearm' today; the console will add its own.
    action text        NOT NULL,
    -- on what: a receipt's token, for the actions on receipts.
    target text        NOT NULL,
    -- why: a ticket, what the downstream showed.
    reason text        NOT NULL,
    -- what the action changed, as JSON: for a re-arm, the failure it cleared; for a resolution,
    -- whether the effect was applied.
    detail jsonb       NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_target_idx ON {{schema}}.audit (target, at);
CREATE INDEX audit_at_idx ON {{schema}}.audit (at);
