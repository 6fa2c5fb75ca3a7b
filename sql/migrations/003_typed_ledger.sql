-- chunkyard schema, version 3: the ledger's states are a closed set, checked by the database.
-- They mirror pipeline/model.py (RunKind, RunStatus, Stage); a new value needs a new migration.
-- Errors are written to ingest_errors as each file fails (not when the run ends), so a crash keeps them.

ALTER TABLE runs
    ADD CONSTRAINT runs_kind_check
        CHECK (kind IN ('ingest', 'backfill', 'reindex', 'prune', 'eval')),
    ADD CONSTRAINT runs_status_check
        CHECK (status IN ('running', 'completed', 'failed', 'crashed')),
    ADD CONSTRAINT runs_finished_check
        CHECK ((status = 'running') = (finished_at IS NULL));

ALTER TABLE ingest_errors
    ADD CONSTRAINT ingest_errors_stage_check
        CHECK (stage IN ('discover', 'load', 'normalize', 'diff', 'chunk', 'embed', 'store', 'prune', 'task'));

COMMENT ON COLUMN runs.kind IS 'what started the run: ingest | backfill | reindex | prune | eval';
COMMENT ON COLUMN runs.status IS 'running | completed (every file ingested) | failed (some files failed, each in ingest_errors) | crashed';
