DROP INDEX {{schema}}.receipts_compensates_idx;
DROP INDEX {{schema}}.receipts_workflow_idx;
DROP INDEX {{schema}}.receipts_token_idx;
ALTER TABLE {{schema}}.receipts DROP COLUMN workflow_id, DROP COLUMN run_id, DROP COLUMN activity_id,
    DROP COLUMN activity_type, DROP COLUMN compensates, DROP COLUMN resolved_at, DROP COLUMN resolved_by,
    DROP COLUMN resolution;
