-- Fails on a partitioned table, which is partitioned by this column: its receipts would have to
-- be copied back into a plain table first.
ALTER TABLE {{schema}}.receipts DROP COLUMN bucket;
