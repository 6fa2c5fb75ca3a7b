-- chunkyard schema, version 9: retrieval quality of a live collection, one row per evaluation run.
--
-- `chunkyard eval --collection NAME --questions FILE` (the Prefect flow chunkyard-evaluate) searches the
-- collection with every question of a saved question set and scores the retrieved chunks against the
-- answer spans (span recall, precision, precision at perfect recall, IoU: pipeline/evaluate/metrics.py).
-- Each run is a `runs` row of kind 'eval'; its figures are here. The first run of a question set on a
-- collection (per k and search mode) is its baseline, until another run is marked the baseline
-- (--set-baseline); a run whose recall is more than max_drop points below the baseline's fails (its
-- runs.status is 'failed' and its flow run ends Failed).

CREATE TABLE eval_results (
    run_id           bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    collection_id    bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    question_set     text NOT NULL,
    questions_hash   text NOT NULL,
    k                integer NOT NULL CHECK (k > 0),
    search_mode      text NOT NULL CHECK (search_mode IN ('vector', 'fulltext', 'hybrid', 'rrf')),
    n_questions      integer NOT NULL CHECK (n_questions > 0),
    recall           double precision NOT NULL,
    precision        double precision NOT NULL,
    precision_omega  double precision NOT NULL,
    iou              double precision NOT NULL,
    hit_rate         double precision NOT NULL,
    mrr              double precision NOT NULL,
    is_baseline      boolean NOT NULL DEFAULT false,
    baseline_run_id  bigint REFERENCES runs (id) ON DELETE SET NULL,
    baseline_recall  double precision,
    recall_drop      double precision,
    max_drop         double precision NOT NULL CHECK (max_drop >= 0),
    passed           boolean NOT NULL,
    per_question     jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- at most one baseline per question set, collection, k and search mode
CREATE UNIQUE INDEX eval_results_baseline_idx
    ON eval_results (collection_id, questions_hash, k, search_mode) WHERE is_baseline;
CREATE INDEX eval_results_history_idx ON eval_results (collection_id, questions_hash, run_id);

COMMENT ON TABLE eval_results IS 'one row per evaluation run (runs.kind = eval): retrieval figures of a question set on a live collection';
COMMENT ON COLUMN eval_results.questions_hash IS 'sha256 of the question set (questions, documents, answer spans): an edited set gets its own baseline';
COMMENT ON COLUMN eval_results.recall IS 'mean span recall over the questions, in percent (0-100); precision, precision_omega, iou and hit_rate likewise';
COMMENT ON COLUMN eval_results.recall_drop IS 'baseline recall minus this run''s recall, in points; NULL for the first run (no baseline yet)';
COMMENT ON COLUMN eval_results.passed IS 'false when recall_drop > max_drop and this run was not marked the baseline';
COMMENT ON COLUMN eval_results.per_question IS 'per question: row, question, document, recall, precision, iou, hit, rr, retrieved [[source_uri, start, end]]';
COMMENT ON COLUMN runs.status IS 'running | completed | failed (an ingest: some files failed, each in ingest_errors; an eval: recall dropped beyond its margin, see eval_results) | crashed';

-- Row-level security as for the other tables (migration 005): readers see the rows of granted collections.
CREATE POLICY eval_results_read ON eval_results FOR SELECT
    USING (collection_id IN (SELECT unnest(chunkyard_readable_collections())));

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        CREATE POLICY eval_results_write ON eval_results FOR ALL TO chunkyard_writer USING (true) WITH CHECK (true);
        GRANT SELECT, INSERT, UPDATE, DELETE ON eval_results TO chunkyard_writer;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_reader') THEN
        GRANT SELECT ON eval_results TO chunkyard_reader;
    END IF;
    -- a database that already has row-level security on keeps it consistent
    IF (SELECT relrowsecurity FROM pg_class WHERE oid = 'chunks'::regclass) THEN
        ALTER TABLE eval_results ENABLE ROW LEVEL SECURITY;
    END IF;
END
$$;
