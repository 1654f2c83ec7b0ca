-- The day a receipt is kept under, when the table is partitioned (activity.Store.Partition): when
-- the receipt was written, or moved by Purge. Reserving statements return it and a completion
-- names it, so that on a partitioned table Postgres reads the one partition that holds the
-- receipt instead of probing every day's. On the plain table nothing else reads it.
-- {{schema}} is replaced by the quoted schema name.
--
-- now() is evaluated once for the rows already there, so adding the column rewrites nothing. On a
-- table that Partition converted before this migration existed, the column is already there.

ALTER TABLE {{schema}}.receipts ADD COLUMN IF NOT EXISTS bucket timestamptz NOT NULL DEFAULT now();
