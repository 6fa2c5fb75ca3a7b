-- chunkyard schema, version 15: an evaluation run records the reranker it searched with (CHUNKYARD_RERANK_MODEL,
-- pipeline/rerank.py), and a reranked run is judged against a baseline of its own reranker: reranking
-- changes what is retrieved, so a run with it is never compared with a baseline without it, nor the reverse.

ALTER TABLE eval_results ADD COLUMN rerank text;

COMMENT ON COLUMN eval_results.rerank IS 'the reranker (its folder''s name) that reordered the search''s candidates; NULL: none';

-- at most one baseline per question set, collection, k, search mode and reranker
DROP INDEX eval_results_baseline_idx;
CREATE UNIQUE INDEX eval_results_baseline_idx
    ON eval_results (collection_id, questions_hash, k, search_mode, coalesce(rerank, '')) WHERE is_baseline;
