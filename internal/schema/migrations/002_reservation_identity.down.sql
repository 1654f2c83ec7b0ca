DROP INDEX {{schema}}.receipts_unresolved_idx;
ALTER TABLE {{schema}}.receipts DROP COLUMN failure, DROP COLUMN reservation;
