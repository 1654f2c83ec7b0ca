-- Maintenance runs: the last run of each maintenance task (task 'purge': the worker's purge round,
-- worker.Env.PurgeRound), so that the console's overview and tempotent doctor can say when it last
-- ran, who ran it, what it deleted and whether it failed. One row per task, replaced by each run
-- (operator.Client.RecordMaintenanceRun, one UPSERT); last_success_at is kept across failed runs,
-- so that a purge failing for days shows as such. Times are the database's clock.
-- {{schema}} is replaced by the quoted schema name.
CREATE TABLE {{schema}}.maintenance_runs (
    task            text        PRIMARY KEY,
    -- who: the runner as it named itself, host/pid for a worker.
    runner          text        NOT NULL,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL,
    -- what the run deleted: receipts and inbox records.
    receipts        bigint      NOT NULL DEFAULT 0,
    inbox           bigint      NOT NULL DEFAULT 0,
    -- the run's error; NULL when it succeeded.
    error           text,
    -- when a run of the task last succeeded; NULL until one has.
    last_success_at timestamptz
);
