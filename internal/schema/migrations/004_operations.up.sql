-- What an operator needs to find a receipt, see where it came from and resolve it by hand
-- (the tempotent command, activity.Store's Receipts, Receipt and Resolve).
-- {{schema}} is replaced by the quoted schema name.
--
-- The columns are nullable and without defaults, so adding them rewrites nothing. The indexes are
-- built inside this migration's transaction, which blocks writes to the receipts while they are
-- built: on a large table, build them first with CREATE INDEX CONCURRENTLY under the same names,
-- and this migration will find them there (IF NOT EXISTS).

ALTER TABLE {{schema}}.receipts
    -- The Temporal execution whose attempt first reserved the receipt (NULL outside Temporal).
    ADD COLUMN workflow_id   text,
    ADD COLUMN run_id        text,
    ADD COLUMN activity_id   text,
    ADD COLUMN activity_type text,
    -- For a saga compensation: the token of the forward step it undoes.
    ADD COLUMN compensates   text,
    -- Set when an operator settled an unresolved outcome: when, who, and why.
    ADD COLUMN resolved_at   timestamptz,
    ADD COLUMN resolved_by   text,
    ADD COLUMN resolution    text;

-- An operator finds a receipt by the token a provider's dashboard shows, or by workflow ID.
CREATE INDEX IF NOT EXISTS receipts_token_idx ON {{schema}}.receipts (token);
CREATE INDEX IF NOT EXISTS receipts_workflow_idx ON {{schema}}.receipts (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS receipts_compensates_idx ON {{schema}}.receipts (compensates) WHERE compensates IS NOT NULL;
