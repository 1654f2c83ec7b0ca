-- A completed receipt holds its result (DESIGN.md at the root of github.com/tempotent/tempotent,
-- Receipts): a write that marks a receipt completed and forgets its result fails, instead of
-- leaving a receipt that replays nothing to every later attempt. A failed receipt holds its
-- failure instead, and a pending one nothing yet.
-- {{schema}} is replaced by the quoted schema name.

-- A void result (nil) was stored as no result. It is stored now as a Temporal Payload of the nil
-- encoding with no data, protobuf-encoded (activity's voidResult): give it to the void results
-- stored before. A replay returns no payload for it, as for NULL before. This reads the whole
-- table, holding no lock that stops receipts.
UPDATE {{schema}}.receipts SET result = '\x0a170a08656e636f64696e67120b62696e6172792f6e756c6c'::bytea
WHERE state = 'completed' AND result IS NULL;

-- Added NOT VALID, then validated. Here, in the migration's one transaction, that is no shorter a
-- lock than a plain ADD CONSTRAINT: the table is locked against receipts' reads and writes while
-- VALIDATE reads it. On a table too large for that pause, run the UPDATE above and
--   ALTER TABLE <schema>.receipts ADD CONSTRAINT receipts_completed_result
--       CHECK (state <> 'completed' OR result IS NOT NULL) NOT VALID;
-- by hand first (a moment's lock), then
--   ALTER TABLE <schema>.receipts VALIDATE CONSTRAINT receipts_completed_result;
-- (which reads the table without stopping receipts), and then migrate: the ADD below is skipped
-- for a constraint that is there, and VALIDATE of a valid constraint reads nothing.
-- On a partitioned table (activity.Store.Partition) the constraint is added to, and validated on,
-- every partition; partitions made later copy it (LIKE … INCLUDING CONSTRAINTS).
DO $$
BEGIN
    ALTER TABLE {{schema}}.receipts ADD CONSTRAINT receipts_completed_result
        CHECK (state <> 'completed' OR result IS NOT NULL) NOT VALID;
EXCEPTION WHEN duplicate_object THEN
    NULL; -- added by hand beforehand, as said above
END
$$;
ALTER TABLE {{schema}}.receipts VALIDATE CONSTRAINT receipts_completed_result;
