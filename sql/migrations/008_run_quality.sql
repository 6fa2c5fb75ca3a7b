-- chunkyard schema, version 8: chunk quality figures per run, in the ledger.
--
-- At the end of every run (pipeline/run.py), chunkyard_quality_figures (sql/functions/quality.sql) measures
-- the collection's live chunks and the run stores the result in runs.quality: one object per document type
-- and one for 'all', each with counts (chunks, tiny, at budget, duplicates, uncovered characters, ...) and a
-- token histogram. NULL: a run that did not finish (crashed), or one from before this version.
-- The view chunkyard_run_quality shows them as typed rows, one per run and document type, with the shares
-- and the previous run's id; `chunkyard status --quality` compares the last two runs.
-- Being a column of runs, the figures follow runs' grants and row-level security (005, 006); the view runs
-- with the privileges of whoever queries it (security_invoker), so a tenant sees only its collections.

ALTER TABLE runs ADD COLUMN quality jsonb;

COMMENT ON COLUMN runs.quality IS
    'chunk quality of the collection after the run: {doc_type | all: {chunks, tiny, at_budget, duplicates, '
    'uncovered_text_chars, histogram, ...}}; see chunkyard_quality_figures and the view chunkyard_run_quality';

CREATE VIEW chunkyard_run_quality WITH (security_invoker = true) AS
SELECT r.id AS run_id,
       c.name AS collection,
       r.kind,
       r.status,
       r.finished_at,
       q.key AS doc_type,
       lag(r.id) OVER (PARTITION BY r.collection_id, q.key ORDER BY r.id) AS previous_run_id,
       (q.value ->> 'documents')::bigint AS documents,
       (q.value ->> 'sections')::bigint AS sections,
       (q.value ->> 'chunks')::bigint AS chunks,
       (q.value ->> 'tokens_mean')::numeric AS tokens_mean,
       (q.value ->> 'tokens_p50')::integer AS tokens_p50,
       (q.value ->> 'tokens_p95')::integer AS tokens_p95,
       (q.value ->> 'tokens_max')::integer AS tokens_max,
       (q.value ->> 'budget')::integer AS budget,
       (q.value ->> 'at_budget')::bigint AS at_budget,
       round((q.value ->> 'at_budget')::numeric / nullif((q.value ->> 'chunks')::numeric, 0), 4) AS at_budget_share,
       (q.value ->> 'tiny')::bigint AS tiny,
       round((q.value ->> 'tiny')::numeric / nullif((q.value ->> 'chunks')::numeric, 0), 4) AS tiny_share,
       (q.value ->> 'duplicates')::bigint AS duplicates,
       round((q.value ->> 'duplicates')::numeric / nullif((q.value ->> 'chunks')::numeric, 0), 4) AS duplicate_share,
       (q.value ->> 'duplicate_texts')::bigint AS duplicate_texts,
       (q.value ->> 'empty_sections')::bigint AS empty_sections,
       (q.value ->> 'chunks_per_section_mean')::numeric AS chunks_per_section_mean,
       (q.value ->> 'chunks_per_section_p50')::integer AS chunks_per_section_p50,
       (q.value ->> 'chunks_per_section_max')::integer AS chunks_per_section_max,
       (q.value ->> 'text_chars')::bigint AS text_chars,
       (q.value ->> 'uncovered_chars')::bigint AS uncovered_chars,
       (q.value ->> 'uncovered_text_chars')::bigint AS uncovered_text_chars,
       round((q.value ->> 'uncovered_text_chars')::numeric / nullif((q.value ->> 'text_chars')::numeric, 0), 6)
           AS uncovered_text_share,
       q.value -> 'histogram' AS histogram,
       q.value -> 'histogram_edges' AS histogram_edges
FROM runs r
JOIN collections c ON c.id = r.collection_id
CROSS JOIN LATERAL jsonb_each(r.quality) AS q
WHERE r.quality IS NOT NULL;

COMMENT ON VIEW chunkyard_run_quality IS
    'chunk quality per run and document type (doc_type ''all'' for the whole collection); shares of chunks, '
    'uncovered_text_share of the normalized text (must be 0); previous_run_id: the run before with figures';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_reader') THEN
        GRANT SELECT ON chunkyard_run_quality TO chunkyard_reader;
    END IF;
END
$$;
